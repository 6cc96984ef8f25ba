"""The skypilot target: a SkyPilot API server (a team's, at `endpoint`, or the local one
SkyPilot starts on demand) and the clouds it has enabled, priced from SkyPilot's catalog.

    targets:
      sky: {kind: skypilot}                                   # the local server, our venv
      team: {kind: skypilot, endpoint: https://sky.example.org:46580, venv: ~/sky-venv}

gpu-router never imports SkyPilot: every question goes to core/providers/skypilot/adapter.py,
run by SkyPilot's own venv python (venv.py), over JSON lines (client.py).

The probe asks `check` (which clouds are enabled, and why the others are not) and `prices`
(list and spot prices per GPU type for the enabled ones) and turns them into offers the router
weighs like any target's (catalog.py); a plan binds the ceiling and candidates it was priced
at (catalog.binding, in its digest).

A job's attempt runs on a cluster of its own (launching.py): `sky.launch` with a workdir that
holds everything the attempt needs, autodown, and gpu-router's runtime as the task's `run`
(core/runtime/skypilot_task.py). SkyPilot's own SSH access to a cluster
(`~/.sky/generated/ssh/<cluster>`) turns host-key checking off (`StrictHostKeyChecking no`,
known hosts /dev/null), so gpu-router never uses it; everything comes home through SkyPilot's
API instead, as the task's followed output (stream.py): the log, the metric rows, and framed
files (each checkpoint generation once it is whole, the outputs, the exit record). Not
`download_logs`: a job-written symlink and a 3 MB file in the log folder made its client fail
("Invalid folder path"), and what a job writes must come home packed by gpu-router's runtime
(no-follow, capped) and unpacked by safe_extract, as from every target.

A cluster that goes (a spot preemption, an allocation ended under it) without the task's exit
record is a session that ended: the supervisor moves the job, here or to any target, from the
checkpoint the stream brought home. A cluster is taken down when its job ends, is cancelled or
is lost, and goes down by itself once idle (autodown) where gpu-router could not; `gpu gc`
lists any of gpu-router's left up.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from core.jobs.store import Job
from core.packaging.safe_extract import OutputCaps
from core.providers import probing
from core.providers.base import Poll, TargetInfo
from core.providers.logmirror import MirroredLog
from core.providers.service import ServiceTarget
from core.providers.skypilot import catalog
from core.providers.skypilot import venv as skyvenv

log = logging.getLogger("gpu_router.skypilot")
OURS = re.compile(r"^gr-([0-9a-f]{8}-a[0-9]+)\Z")  # launching.cluster_name: its job's short id and attempt
PROBE_TTL_S = 600.0  # `sky check` takes seconds to minutes with real clouds; prices move slowly
LAUNCH_TIMEOUT_S = 1800.0  # provisioning, the workdir's sync, the runtime's setup
DOWN_TIMEOUT_S = 900.0
FOLLOW_TIMEOUT_S = 10.0 ** 9  # a follow lasts as long as the job
POLL_INTERVAL_S = 15.0  # SkyPilot's status of a cluster asks the cloud: not every tick
GONE_GRACE_S = 120.0  # a cluster not listed this soon after its launch may be on its way
OUTPUTS_WAIT_S = 120.0  # the end of the stream, after SkyPilot says the task ended
REFOLLOW_S = 10.0  # a broken follow is begun again after this, times the breaks in a row
MAX_BREAKS = 6  # follows broken in a row before the stream counts as ended
ADOPT_SETTLE_S = 30.0  # an attempt's cluster UP this long without its task: its launch died
ADOPT_POLL_S = 5.0


class SkyPilotProvider(ServiceTarget, MirroredLog):
    kind = "skypilot"

    def __init__(self, name: str, options: dict | None = None, max_jobs: int = 1) -> None:
        self.name = name
        self.options = dict(options or {})
        self.max_jobs = max_jobs
        self.enabled = True
        self.probe_ttl_s = float(self.options.get("probe_ttl_s", PROBE_TTL_S))
        self.caps = OutputCaps.from_options(self.options)
        self.max_resumes = int(self.options.get("max_resumes", 3))
        self._client = None
        self._streams: dict = {}
        self._followers: dict = {}
        self._asked: dict = {}
        self._downs: dict = {}  # (job id, attempt) -> the task taking its cluster down

    @classmethod
    def from_config(cls, t) -> "SkyPilotProvider":
        return cls(t.name, t.options, max_jobs=t.max_jobs)

    # -- where SkyPilot is ----------------------------------------------------------------------

    def venv(self) -> Path:
        named = self.options.get("venv")
        return Path(os.path.expanduser(named)) if named else skyvenv.default_path()

    def python(self) -> Path:
        return skyvenv.python_of(self.venv())

    def adapter_env(self) -> dict[str, str]:
        """The adapter's environment: this process's (SkyPilot reads the person's cloud
        credentials where its own tools would: ~/.aws, ~/.kube, ...), the target's `env`, and
        the API server's address where one is named."""
        env = {**os.environ, **{k: str(v) for k, v in (self.options.get("env") or {}).items()}}
        if self.options.get("endpoint"):
            env["SKYPILOT_API_SERVER_ENDPOINT"] = str(self.options["endpoint"])
        return env

    def server_label(self) -> str:
        return str(self.options.get("endpoint") or "the local SkyPilot API server")

    # -- probing --------------------------------------------------------------------------------

    async def probe(self, refresh: bool = False) -> TargetInfo:
        """Which clouds SkyPilot has enabled and their GPU prices; remembered for probe_ttl_s
        (also across processes). Bounded by `connect_timeout_s` here and by the target's
        `probe_timeout_s` around it (core.providers.probing)."""
        if not refresh:
            remembered = self._remembered()
            if remembered is not None:
                return remembered
        from core.providers.skypilot.client import AdapterError, AdapterTimeout, SkyPilotError, ask_once

        python = self.python()
        if not python.exists():
            fix = (f"run `gpu targets add skypilot {self.name}` again (it makes SkyPilot's venv)"
                   if not self.options.get("venv") else f"check targets.{self.name}.venv")
            return self._info(False, f"no SkyPilot venv at {self.venv()}: {fix}")
        limit = float(self.options.get("connect_timeout_s", 60))
        clouds = self.options.get("clouds")
        asks = [("check", {"clouds": clouds} if clouds else {}), ("prices", {"clouds": clouds} if clouds else {})]
        try:
            check, prices = await probing.off_loop(lambda: ask_once(python, asks, env=self.adapter_env(),
                                                                    timeout=limit))
        except AdapterTimeout:
            return self._info(False, f"{self.server_label()} did not answer in {limit:g} s")
        except SkyPilotError as exc:
            return self._info(False, f"SkyPilot could not be asked ({exc.kind}: {exc.text})"[:400])
        except AdapterError as exc:
            return self._info(False, f"SkyPilot's adapter failed: {exc}"[:400])
        details = self.details_of(check or {}, prices or {})
        info = self._info(True, None, details)
        if info.available:  # an answer with clouds but no prices is asked again next time
            self._store_probe(info)
        return info

    def details_of(self, check: dict, prices: dict) -> dict:
        """What the probe keeps of SkyPilot's answers (and remembers on disk): the clouds,
        enabled or why not, and each GPU type's cheapest price, count and candidates."""
        offers = catalog.offers(prices)
        return {
            "server": self.server_label(),
            "clouds": {"enabled": dict(check.get("enabled") or {}), "disabled": dict(check.get("disabled") or {})},
            "prices": {gpu: {"usd_per_hour": o["price"], "memory_gb": o["memory_gb"], "count_max": o["count_max"],
                             "clouds": sorted({r["cloud"] for r in o["candidates"]}),
                             "bind": catalog.binding(o),
                             "rows": [{k: r[k] for k in catalog.SLIM} for r in o["candidates"]][:50]}
                       for gpu, o in offers.items()},
            "price_errors": dict(prices.get("errors") or {}),
            "gpu_count_max": {gpu: o["count_max"] for gpu, o in offers.items()},
            "count_prices": {gpu: {str(n): c for n, c in o["count_prices"].items()} for gpu, o in offers.items()},
        }

    def _remembered(self) -> TargetInfo | None:
        """The last answer (only answers are remembered), fresh for probe_ttl_s; past it,
        used as it was, with its time: a submit or a plan is never held for `sky check` over
        every cloud (seconds to a minute) only to list prices, and a launch asks SkyPilot's
        prices of the moment before it starts anything (launching.over_ceiling); `gpu targets
        probe NAME` (and `add`) forget it and ask again."""
        import time

        from core.providers.service import last_probe

        doc = last_probe(self.kind, self.name)
        if not doc or not doc.get("details"):
            return None
        info = self._info(True, None, doc["details"])
        at = float(doc.get("at") or 0)
        if time.time() - at > self.probe_ttl_s:
            info.details = {**info.details, "as_of": at}
        return info

    def _info(self, reached: bool, why: str | None = None, details: dict | None = None) -> TargetInfo:
        if details is None and not reached:  # not asked now (a remembered failure, a timeout): the
            # clouds and prices of the last answer, however old, as Modal keeps its price table
            from core.providers.service import last_probe

            details = (last_probe(self.kind, self.name) or {}).get("details")
        details = details or {}
        prices: dict[str, dict] = details.get("prices") or {}
        offers = {gpu: [{"name": gpu, "memory_gb": p.get("memory_gb") or 0.0}] for gpu, p in prices.items()}
        first = next(iter(offers), None)
        available = False
        if reached:
            enabled = sorted((details.get("clouds") or {}).get("enabled") or {})
            if not enabled:
                why = "SkyPilot has no cloud enabled (run `sky check` in its venv to see what each needs)"
            elif not first:
                why = f"SkyPilot answers ({', '.join(enabled)} enabled) but lists no GPU prices for them"
            else:
                available, why = True, None
        return TargetInfo(name=self.name, kind=self.kind, available=available, why_unavailable=why,
                          gpus=list(offers[first]) if first else [], max_jobs=self.max_jobs,
                          price_per_hour=prices[first]["usd_per_hour"] if first else 0.0,
                          takes_secrets=False, offers=offers,
                          offer_prices={gpu: p["usd_per_hour"] for gpu, p in prices.items()},
                          details=details, answered=reached)

    # -- running ----------------------------------------------------------------------------------

    async def client(self):
        """The adapter this provider keeps for its jobs (one child for them all, started on
        first use, started again once it broke)."""
        from core.providers.skypilot.client import SkyPilotClient

        if self._client is None or self._client.broken is not None:
            self._client = await SkyPilotClient.start(self.python(), env=self.adapter_env())
        return self._client

    async def close(self) -> None:
        for _, task in list(self._followers.values()):
            task.cancel()
        self._followers.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        """Stage the workdir, hold the launch to the plan's ceiling at today's prices, and
        `sky.launch` the attempt's own cluster (autodown); returns once SkyPilot has submitted
        the task. A cluster of this attempt that already runs it (a supervisor that died in a
        launch) is adopted, never launched twice."""
        import asyncio
        import shutil
        import time

        from core.errors import UserError
        from core.providers.skypilot import launching
        from core.providers.skypilot.client import AdapterError, SkyPilotError

        if env_secrets:
            raise UserError(f"{self.name}: a skypilot target receives no keychain secrets",
                            fix="run jobs that read secrets on another target")
        started = time.monotonic()
        client = await self.client()
        cluster = launching.cluster_name(job)
        adopted = await self._adopt(client, job, cluster)
        if adopted is not None:
            return adopted
        clouds = self.options.get("clouds")
        try:
            resources = launching.resources(job, clouds)
        except ValueError as exc:
            raise UserError(f"{self.name}: {exc}") from None
        prices = await client.request("prices", {"clouds": clouds} if clouds else {}, timeout=self._timeout())
        why = launching.over_ceiling(job, prices, resources.get("infra"))
        if why:
            raise UserError(f"not launched on {self.name}: {why}",
                            fix="submit it again: the new plan shows today's price for a person to approve")
        work, size = await asyncio.to_thread(launching.stage, job, self.caps)
        billed_from = time.time()  # a cluster bills from its launch: the job's usage counts from here
        lines = self._stream(job).folder / "launch.log"
        with open(lines, "a", encoding="utf-8") as out:
            def keep(line: str) -> None:
                out.write(line + "\n")
                out.flush()
            try:
                answer = await client.request("launch", {
                    "cluster": cluster, "name": launching.task_name(job), "workdir": str(work),
                    "run": launching.RUN, "resources": resources, "down": True,
                    "idle_minutes_to_autostop": int(self.options.get("autodown_minutes",
                                                                     launching.AUTODOWN_MINUTES))},
                    timeout=float(self.options.get("launch_timeout_s", LAUNCH_TIMEOUT_S)), on_line=keep)
            except AdapterError as exc:
                await self._down_quietly(cluster)  # a cluster half made is not left paying
                what = exc.text if isinstance(exc, SkyPilotError) else str(exc)
                raise RuntimeError(f"SkyPilot could not launch {cluster}: {what} (SkyPilot's own words "
                                   f"on it: {lines})"[:1500]) from None
            finally:  # uploaded by now, or not launched: each attempt stages its own again
                await asyncio.to_thread(shutil.rmtree, work, True)
        return {"attempt": job.attempt, "cluster": cluster, "sky_job_id": answer.get("job_id"),
                "resources": answer.get("resources"), "launched_at": time.time(), "billed_from": billed_from,
                "uploaded_bytes": size,
                "launch_s": round(time.monotonic() - started, 3), "ceiling": resources["max_hourly_cost"],
                "notes": [f"SkyPilot launched cluster {cluster} ({answer.get('resources') or resources['accelerators']}, "
                          f"at most ${resources['max_hourly_cost']:.2f}/h; it goes down by itself "
                          f"{int(self.options.get('autodown_minutes', launching.AUTODOWN_MINUTES))} min after "
                          "it idles, and gpu-router takes it down when the job ends)"]}

    async def _adopt(self, client, job: Job, cluster: str) -> dict | None:
        """This attempt's task on its cluster, if a launch got that far before: its handle.

        A supervisor that died in a launch left SkyPilot's server carrying that launch on: a
        cluster of this attempt that is still starting (INIT) is waited for until it shows the
        task (adopted) or stands UP without it for ADOPT_SETTLE_S (that launch died before the
        task: this one goes on into the cluster), never launched into at once, which would run
        the job twice there."""
        import asyncio
        import time

        from core.providers.skypilot import launching
        from core.providers.skypilot.client import AdapterError, SkyPilotError

        deadline = time.monotonic() + float(self.options.get("launch_timeout_s", LAUNCH_TIMEOUT_S))
        up_since = None
        while True:
            try:
                status = await client.request("status", {"clusters": [cluster]}, timeout=self._timeout())
                rows = [c for c in status.get("clusters") or [] if c.get("name") == cluster]
                if not rows:
                    return None
                try:
                    queue = await client.request("queue", {"cluster": cluster}, timeout=self._timeout())
                except SkyPilotError:  # not up yet: no queue to read
                    queue = {}
            except AdapterError as exc:  # unsure is not "no cluster": launching now could run it twice
                what = exc.text if isinstance(exc, SkyPilotError) else str(exc)
                raise RuntimeError(f"SkyPilot could not say whether {cluster} already runs this attempt "
                                   f"({what}); not launched, so the job never runs twice there: "
                                   f"`gpu resume {job.short_id}` once `gpu targets` shows {self.name} "
                                   "available"[:1500]) from None
            mine = [j for j in queue.get("jobs") or [] if j.get("name") == launching.task_name(job)]
            if mine:
                return {"attempt": job.attempt, "cluster": cluster, "sky_job_id": mine[-1]["job_id"],
                        "launched_at": time.time(), "billed_from": rows[0].get("launched_at") or time.time(),
                        "adopted": True, "notes": [f"SkyPilot's cluster {cluster} already runs this attempt's "
                                                   "task (a launch before a restart): followed, not launched again"]}
            now = time.monotonic()
            if rows[0].get("status") == "UP":
                up_since = up_since if up_since is not None else now
                if now - up_since >= ADOPT_SETTLE_S:
                    return None
            elif rows[0].get("status") != "INIT":
                return None  # stopped: the launch starts it again
            if now > deadline:
                return None
            await asyncio.sleep(ADOPT_POLL_S)

    def _timeout(self) -> float:
        return float(self.options.get("connect_timeout_s", 60)) * 2

    # -- following ----------------------------------------------------------------------------------

    def _stream(self, job: Job, attempt: int | None = None):
        from core import paths
        from core.providers.skypilot import launching
        from core.providers.skypilot.stream import AttemptStream

        key = (job.id, attempt or job.attempt)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = AttemptStream(paths.jobs_dir() / job.id, key[1], self.caps.max_bytes,
                                                        task=launching.task_name(job, key[1]))
        return stream

    def _follow(self, job: Job):
        """The attempt's stream, followed by a task of its own from the first look on; again
        from its beginning after a restart, or a while after a follow broke (what is here
        already is read past)."""
        import asyncio
        import time

        stream = self._stream(job)
        key = (job.id, job.attempt)
        running = self._followers.get(key)
        if running is None and not stream.ended and job.handle.get("cluster") \
                and time.monotonic() - stream.broke_at >= REFOLLOW_S * stream.breaks:
            task = asyncio.get_running_loop().create_task(self._read(job, stream, stream.begin()))
            self._followers[key] = (stream, task)
        return stream

    async def _read(self, job: Job, stream, follow: int) -> None:
        import asyncio

        from core.providers.skypilot.client import AdapterError

        try:
            client = await self.client()
            answer = await client.request("logs", {"cluster": job.handle["cluster"],
                                                   "job_id": job.handle.get("sky_job_id"), "follow": True},
                                          timeout=FOLLOW_TIMEOUT_S,
                                          on_line=lambda raw: stream.line(raw, follow))
            if follow == stream.follows:
                stream.end(answer.get("exit_code"))
        except AdapterError as exc:
            log.info("job %s: SkyPilot's stream of %s broke: %s", job.short_id, job.handle["cluster"], exc)
            if follow == stream.follows:
                stream.broke(str(exc), MAX_BREAKS)
        finally:
            if self._followers.get((job.id, job.attempt), (None, None))[1] is asyncio.current_task():
                self._followers.pop((job.id, job.attempt), None)

    async def sync_log(self, job: Job) -> None:
        import asyncio

        if not job.handle.get("cluster"):
            return
        stream = self._follow(job)
        await asyncio.to_thread(stream.store)

    async def read_exit(self, job: Job) -> dict | None:
        return self._stream(job).exit_doc()

    async def poll(self, job: Job) -> Poll:
        """Where the attempt stands: its exit record once the stream brought it (the outputs
        came before it); otherwise SkyPilot's word on the cluster and the task, asked at most
        every `poll_interval_s`. A cluster gone without an exit record is a session that
        ended (a preemption, an allocation ended under it): the job resumes from its mirrored
        checkpoint, here or elsewhere."""
        import dataclasses

        from core.providers.base import exited_poll

        if not job.handle.get("cluster"):
            return Poll("provisioning", detail="launching on SkyPilot")
        stream = self._follow(job)
        doc = stream.exit_doc()
        if doc is not None:
            self._down_when_done(job)
            return exited_poll(doc)
        poll = await self._ask(job, stream)
        if poll.phase != "running":
            return poll
        gen = stream.newest_generation()  # the cluster bills from its launch, not from this look
        return dataclasses.replace(poll, checkpoint=gen, started_at=job.handle.get("billed_from"))

    async def _ask(self, job: Job, stream) -> Poll:
        import time

        from core.providers.skypilot.client import AdapterError, SkyPilotError

        cluster = job.handle["cluster"]
        now = time.monotonic()
        cached = self._asked.get((job.id, job.attempt))
        if cached is not None and now - cached[0] < float(self.options.get("poll_interval_s", POLL_INTERVAL_S)) \
                and not stream.ended:
            return cached[1]
        try:
            client = await self.client()
            status = await client.request("status", {"clusters": [cluster], "refresh": True},
                                          timeout=self._timeout())
            found = [c for c in status.get("clusters") or [] if c.get("name") == cluster]
            state = found[0].get("status") if found else None
            if state == "UP":
                queue = await client.request("queue", {"cluster": cluster}, timeout=self._timeout())
                rows = [j for j in queue.get("jobs") or [] if j.get("job_id") == job.handle.get("sky_job_id")]
                poll = self._task_poll(rows[0].get("status") if rows else None, stream)
            elif state == "INIT" and not stream.ended:
                poll = Poll("running" if stream.printed else "provisioning",
                            detail=f"SkyPilot's cluster {cluster} is INIT (starting, or being looked at)")
            else:
                poll = await self._cluster_gone(job, stream, state)
        except SkyPilotError as exc:
            if exc.kind != "ClusterDoesNotExist":
                poll = Poll("unreachable", detail=f"SkyPilot: {exc.text}"[:300])
            else:
                poll = await self._cluster_gone(job, stream, None)
        except AdapterError as exc:
            poll = Poll("unreachable", detail=str(exc)[:300])
        self._asked[(job.id, job.attempt)] = (now, poll)
        return poll

    def _task_poll(self, state: str | None, stream) -> Poll:
        if state in ("INIT", "PENDING", "SETTING_UP"):
            return Poll("provisioning", detail=f"SkyPilot: the task is {state.lower().replace('_', ' ')}")
        if state in (None, "RUNNING") or not stream.ended:
            return Poll("running")  # ended there: the stream brings what it sent before it ended
        if state == "CANCELLED":
            return Poll("cancelled", detail="cancelled on SkyPilot")
        why = (f"SkyPilot says the task {state} and it sent home no exit record"
               + (f" (the stream broke: {stream.broken})" if stream.broken else ""))
        return Poll("exited", exit_code=0 if state == "SUCCEEDED" else 1, detail=why)

    async def _cluster_gone(self, job: Job, stream, state: str | None) -> Poll:
        import time

        cluster = job.handle["cluster"]
        launched = float(job.handle.get("launched_at") or 0)
        if not stream.ended and time.time() - launched < GONE_GRACE_S:
            return Poll("running", detail=f"SkyPilot does not show cluster {cluster} yet")
        if state is not None:  # STOPPED, or INIT after a failure: not left paying
            await self._take_down(job)
        else:
            await self._record_cost(job)
        from core.providers.skypilot.launching import AUTODOWN_MINUTES

        idle = int(self.options.get("autodown_minutes", AUTODOWN_MINUTES))
        return Poll("lost", vanished=True,
                    detail=f"SkyPilot's cluster {cluster} is {'gone' if state is None else state} and the "
                           "job sent no exit record: the session ended (preempted, or its allocation "
                           f"ended; or it went down by itself {idle} min after the task ended while "
                           "gpu-router was not following it: if so, raise the target's autodown_minutes)")

    # -- ending -------------------------------------------------------------------------------------

    async def _record_cost(self, job: Job) -> None:
        """SkyPilot's own cost of the attempt's cluster (its report, once the cluster is down),
        kept beside the attempt for `gpu cost` to show against gpu-router's count."""
        import asyncio

        from core.providers.skypilot.client import AdapterError
        from core.providers.skypilot.stream import write_reported_cost

        cluster = job.handle.get("cluster")
        if not cluster:
            return
        try:
            client = await self.client()
            report = await client.request("cost_report", {"days": 30}, timeout=self._timeout())
        except AdapterError as exc:
            log.info("job %s: SkyPilot's cost report not read: %s", job.short_id, exc)
            return
        rows = [r for r in report.get("clusters") or [] if r.get("name") == cluster]
        if rows:
            await asyncio.to_thread(write_reported_cost, self._stream(job).folder, self.name, rows[-1])

    async def _down_quietly(self, cluster: str) -> str | None:
        """Take the cluster down; why it could not be (None: down, or never there)."""
        from core.providers.skypilot.client import AdapterError, SkyPilotError

        try:
            client = await self.client()
            await client.request("down", {"cluster": cluster, "stream": False},
                                 timeout=DOWN_TIMEOUT_S)
        except SkyPilotError as exc:
            if exc.kind == "ClusterDoesNotExist":
                return None
            return exc.text
        except AdapterError as exc:
            return str(exc)
        return None

    async def cancel(self, job: Job, force: bool = False) -> None:
        """Take the attempt's cluster down (its task ends with it); the stream stops."""
        cluster = job.handle.get("cluster")
        if not cluster:
            return
        follower = self._followers.pop((job.id, job.attempt), None)
        if follower is not None:
            follower[1].cancel()
        why = await self._take_down(job)
        if why:
            raise RuntimeError(f"SkyPilot could not take cluster {cluster} down: {why}; `gpu gc` tries "
                               "again (it takes down every gpu-router cluster no live job needs)")

    async def request_checkpoint(self, job: Job) -> None:
        return None  # no signal reaches a task but through SkyPilot: the job saves on its own clock

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        """The outputs the stream brought (the task sends them before its exit record), the
        log and the rows; then the cluster goes down."""
        import asyncio
        import time

        from core.packaging import runswriter
        from core.packaging.safe_extract import safe_extract

        stream = self._stream(job)
        deadline = time.monotonic() + OUTPUTS_WAIT_S
        while job.handle.get("cluster") and (job.id, job.attempt) in self._followers \
                and stream.exit_doc() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        await asyncio.to_thread(stream.store)
        notes = [f"from the cluster's stream: {e}" for e in stream.errors[:5]]
        archive = stream.folder / "outputs.tar.gz"
        if archive.is_file():
            notes += await asyncio.to_thread(safe_extract, archive, dest, caps=self.caps)
        elif job.handle.get("cluster"):
            notes.append(f"no outputs came home from SkyPilot's cluster {job.handle['cluster']} "
                         "(the task ended before it sent them)")
        for name in ("job.log", "metrics.jsonl"):
            path = stream.local_dir / name
            if path.is_file():
                await asyncio.to_thread(runswriter.copy_file, dest, name, path)
        if job.handle.get("cluster"):
            why = await self._down_when_done(job)
            if why:
                notes.append(f"SkyPilot's cluster {job.handle['cluster']} could not be taken down: {why} "
                             "(`gpu gc` lists it; it goes down by itself once idle)")
        return notes

    def _down_when_done(self, job: Job):
        """The attempt's cluster taken down (and its cost as SkyPilot reports it kept), once,
        from the moment its exit record came: everything the task sent came before that
        record, so nothing more is needed of the cluster, whatever the supervisor does next
        (the job's end, or a retry that starts another attempt on a new cluster). Returns the
        task, whose result is why the down failed (None: down)."""
        import asyncio

        key = (job.id, job.attempt)
        task = self._downs.get(key)
        if task is None:
            task = self._downs[key] = asyncio.get_running_loop().create_task(self._take_down(job))
        return task

    async def _take_down(self, job: Job) -> str | None:
        """The attempt's cluster down, then SkyPilot's cost of it kept; why it could not be."""
        why = await self._down_quietly(job.handle["cluster"])
        if not why:
            await self._record_cost(job)
        return why

    # -- the checkpoint the stream brought: listed and packed as a host's folder ----------------------

    async def checkpoint_scan(self, job: Job) -> dict:
        import asyncio

        from core.runtime import ckptscan

        return await asyncio.to_thread(ckptscan.scan, str(self._stream(job).folder / "ckpt"), self.caps.max_bytes)

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path, generation: str | None = None,
                              progress=None) -> dict:
        import asyncio

        from core.runtime import ckptscan

        return await asyncio.to_thread(ckptscan.pack, str(self._stream(job).folder / "ckpt"), str(archive),
                                       rels, generation)

    # -- `gpu gc`: gpu-router's clusters left up ------------------------------------------------------

    async def cache_scan(self) -> dict:
        """The clusters gpu-router started (`gr-<job>-a<N>`) that SkyPilot lists, as `gpu gc`
        entries keyed by their job's short id and attempt: one no live job's current attempt
        needs is taken down, whatever the cap and however new (core/engine/storage)."""
        import time

        client = await self.client()
        status = await client.request("status", {}, timeout=self._timeout())
        rows = []
        for c in status.get("clusters") or []:
            m = OURS.match(str(c.get("name") or ""))
            if m:
                rows.append({"kind": "cluster", "key": m.group(1), "path": c["name"], "bytes": 0,
                             "used_at": float(c.get("launched_at") or 0), "status": c.get("status")})
        return {"entries": rows, "now": time.time()}

    async def cache_evict(self, clusters: list[str]) -> dict:
        removed, kept = [], []
        for name in clusters:
            why = await self._down_quietly(name) if OURS.match(name) else "not one of gpu-router's clusters"
            if why:
                kept.append({"path": name, "why": why})
            else:
                removed.append(name)
        return {"removed": removed, "kept": kept, "freed": 0}
