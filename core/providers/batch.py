"""What the scheduler targets (slurm, pbs) share: resources, the batch script, the queue cache.

The batch script is bash and is generated, never templated from user text: every value in a
directive passed `SAFE_VALUE_RE` when the request or the user config was read (no spaces,
quotes or newlines, so nothing can add a line), and every value in a command is shell-quoted.

Checkpointing before the time limit: the scheduler (Slurm's `--signal=B:USR1@lead`, or a timer
in the script for PBS) sends USR1 to the batch shell; its trap touches the job's control file
(`gpu.should_checkpoint()` reads it) and forwards USR1 to the job's process group (the launcher
leads one in `--foreground` mode), and leaves a `time-signal` marker so that a job that saves
and exits 0 because time ran out is resumed, not recorded done. bash runs traps only between
commands, so the script waits on `sleep 1` in a loop rather than one long `wait`.
gpu-router's own checkpoint request uses USR2, which forwards the same way without the marker.

The newest checkpoint generation of each running job (`ckpt-gens/`, frozen by
`gpu.checkpoint_saved()`) rides on the one scheduler query a cycle makes (`Generations`), so
the mirror is poll-driven here as on ssh targets, with no extra process per job.

`SchedulerProvider` is the life of an attempt they share (the secrets rule, the upload and the
script, a poll that falls back to the attempt's own files, cancel, a checkpoint request): the
Slurm and PBS targets only name their commands and read their answers, so a fix to how a
scheduler job is followed is made once.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import math
import secrets
import time
from abc import abstractmethod
from typing import Any, Awaitable, Callable

from core.config.schema import SAFE_VALUE_RE
from core.jobs.store import Job
from core.providers.base import Poll, exited_poll
from core.providers.remote import RemoteProvider
from core.transport.base import TransportError, check_name, quote, safe_name

TIME_MARGIN = 1.25
TIME_EXTRA_MIN = 5
QUEUE_TTL_S = 2.0
GENERATIONS_KEEP_S = 60.0  # a job folder not polled this long (its job ended) is asked no more


def resources(job: Job, options: dict) -> dict[str, Any]:
    """The request's scheduler resources over the target's defaults."""
    asked = job.plan.get("resources") or {}
    res = {
        "cpus": options.get("cpus"),
        "gpus": options.get("gpus_per_job"),
        "memory_gb": options.get("memory_gb"),
        "time_minutes": options.get("time_minutes"),
        "partition": options.get("partition"),
        "modules": list(options.get("modules") or []),
        "container": options.get("container"),
    }
    for key, value in asked.items():
        if key == "modules":
            res["modules"] = list(dict.fromkeys([*res["modules"], *value]))
        elif value is not None:
            res[key] = value
    if res["gpus"] is None:
        res["gpus"] = 1
    if asked.get("time_minutes") is None and job.plan.get("hours"):
        # an honest estimate plus a margin; a target's time_minutes caps nothing here
        res["time_minutes"] = max(1, math.ceil(float(job.plan["hours"]) * 60 * TIME_MARGIN) + TIME_EXTRA_MIN)
    for key in ("partition", "container"):
        if res[key] is not None and not SAFE_VALUE_RE.match(str(res[key])):
            raise ValueError(f"{key} {res[key]!r} is not allowed in a batch script")
    for mod in res["modules"]:
        if not SAFE_VALUE_RE.match(mod):
            raise ValueError(f"module {mod!r} is not allowed in a batch script")
    return res


def signal_lead_s(minutes: int | None, options: dict) -> int:
    """Seconds before the time limit at which the job is asked to checkpoint."""
    if options.get("signal_lead_s"):
        return int(options["signal_lead_s"])
    if not minutes:
        return 300
    total = minutes * 60
    lead = min(300, max(45, total // 10))
    return max(15, min(lead, total - 15))


def job_name(job: Job) -> str:
    """Names the job in the queue: gpu-<short id>-<attempt>-<name>, [A-Za-z0-9._-] only."""
    return check_name(safe_name(f"gpu-{job.short_id}-{job.attempt}-{job.name}", 64))


def script(job: Job, *, directives: list[str], adir: str, jdir: str, launcher_cmd: list[str],
           modules: list[str], container: str | None, options: dict, timer_s: int | None = None) -> str:
    """The batch script: directives, traps, modules, then the launcher in the foreground."""
    lines = ["#!/bin/bash", *directives,
             f"# gpu-router job {job.id} attempt {job.attempt} ({job.name}); generated, do not edit",
             f"A={quote(adir)}", f"CTL={quote(jdir + '/ctl')}", 'child=""',
             'forward() { : > "$CTL/checkpoint"; if [ -n "$child" ]; then '
             'kill -s USR1 -- "-$child" 2>/dev/null || kill -s USR1 "$child" 2>/dev/null; fi; true; }',
             'on_time() { : > "$A/time-signal"; echo "[gpu-router] time limit near: asking the job to checkpoint" >&2; forward; }',
             'on_request() { echo "[gpu-router] checkpoint requested" >&2; forward; }',
             "trap on_time USR1", "trap on_request USR2", 'cd "$A"']
    for key, value in (options.get("env") or {}).items():
        lines.append(f"export {key}={quote(value)}")
    if modules:
        lines.append("if ! command -v module >/dev/null 2>&1; then for f in /etc/profile.d/lmod.sh "
                     "/etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash; do "
                     '[ -f "$f" ] && . "$f" && break; done; fi')
        for mod in modules:
            lines.append(f"module load {quote(mod)} || {{ echo {quote('[gpu-router] module load ' + mod + ' failed')} >&2; exit 97; }}")
    cmd = launcher_cmd
    if container:
        runtime = options.get("container_runtime") or "apptainer"
        root = adir.split("/jobs/")[0]
        cmd = [runtime, "exec", "--nv", "--bind", root, container, *launcher_cmd]
    lines.append("timer=''")
    if timer_s is not None:  # no --signal in this scheduler: a timer in the script sends it
        lines.append(f"( sleep {int(timer_s)}; kill -s USR1 $$ ) & timer=$!")
    lines += [
        " ".join(quote(c) for c in cmd) + " &",
        "child=$!",
        'while kill -0 "$child" 2>/dev/null; do sleep 1; done',
        'wait "$child"; status=$?',
        '[ -n "$timer" ] && kill "$timer" 2>/dev/null',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


class QueueCache:
    """One scheduler query shared by every job of a target polled within `ttl` seconds.

    The supervisor polls each job in its own task, all at the same moment: the first caller
    starts the query and the rest await the same one, so N running jobs cost one `squeue`
    (or `qstat`) per cycle, not N."""

    def __init__(self, fetch: Callable[[], Awaitable[dict]], ttl: float = QUEUE_TTL_S) -> None:
        self.fetch = fetch
        self.ttl = ttl
        self.value: dict | None = None
        self.at = 0.0
        self.wall_at = 0.0
        self.calls = 0
        self._task: asyncio.Task | None = None
        self._loop = None

    async def get(self, fresh: bool = False) -> dict:
        """The last answer if younger than ttl (unless `fresh`), else one shared new query."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._task, self.value = loop, None, None
        if not fresh and self.value is not None and time.monotonic() - self.at < self.ttl:
            return self.value
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._refresh())
        return await asyncio.shield(self._task)

    async def _refresh(self) -> dict:
        self.calls += 1
        value = await self.fetch()
        self.value, self.at, self.wall_at = value, time.monotonic(), time.time()
        return value


class Generations:
    """The newest checkpoint generation of each job folder a poll asked about, answered by the
    scheduler query itself: `wrap` appends to that command one shell loop that names, for each
    folder, the highest `ckpt-gens/<n>` (after a random mark the jobs cannot know, so nothing
    they write can pass for the scheduler's rows or for a generation), keeping the command's
    exit status; `read` takes the listing off the output. A job asked about now is answered by
    the next query (a cycle later at most)."""

    def __init__(self) -> None:
        self.wanted: dict[str, float] = {}  # job folder -> when a poll last asked
        self.newest: dict[str, int] = {}

    def want(self, job_dir: str) -> None:
        self.wanted[job_dir] = time.monotonic()

    def wrap(self, command: str) -> tuple[str, str, list[str]]:
        """(the command with the listing after it, its mark, the folders listed in order)."""
        now = time.monotonic()
        self.wanted = {d: t for d, t in self.wanted.items() if now - t < GENERATIONS_KEEP_S}
        dirs = sorted(self.wanted)
        mark = "gpu-router-gens-" + secrets.token_hex(16)
        if not dirs:
            return command, mark, dirs
        listing = (f"for d in {' '.join(quote(d) for d in dirs)}; do g=; "
                   'for f in "$d"/ckpt-gens/[0-9]*; do [ -d "$f" ] && g=${f##*/}; done; '
                   'printf \'%s\\n\' "$g"; done')
        return f"{command}\ns=$?; printf '\\n%s\\n' {mark}; {listing}; exit $s", mark, dirs

    def read(self, out: str, mark: str, dirs: list[str]) -> str:
        """The scheduler's own output; the generations listed after `mark` are kept."""
        head, found, tail = out.partition(f"\n{mark}\n")
        if not found:
            return out
        for d, line in zip(dirs, tail.splitlines()):
            if line.strip().isdigit():
                self.newest[d] = int(line.strip())
            else:
                self.newest.pop(d, None)
        return head

    def on_poll(self, provider: Any, job: Any, poll: Poll) -> Poll:
        """A scheduler target's poll with the job's newest generation: the job's folder is
        listed by the next query (a cycle later at most); a host never reached has no folder."""
        if provider._remote is None:
            return poll
        self.want(provider.job_dir(job))
        return self.attach(poll, provider.job_dir(job))

    def attach(self, poll: Poll, job_dir: str) -> Poll:
        """The poll with the newest generation the last query saw in `job_dir`, if any."""
        gen = self.newest.get(job_dir)
        return dataclasses.replace(poll, checkpoint=gen) if gen is not None else poll


# "NAME base64" lines on stdin become the scheduler command's environment: secrets never sit
# in a file we write or on a command line
SECRETS_FROM_STDIN = ('while read -r k v; do [ -n "$k" ] || continue; '
                      'v=$(printf %s "$v" | base64 -d); export "$k=$v"; done; ')
PROVISIONING_GRACE_S = 30  # a job the scheduler does not list yet this soon after its submit is still starting


class SchedulerProvider(RemoteProvider):
    """A target whose attempts are batch jobs of a scheduler (Slurm, PBS) on a login node.

    A subclass names its scheduler (`scheduler`, the handle's `id_key`, the `submit` and
    `cancel` counters of `stats`), writes its directives, submits the script and reads the
    id it is given (`submit`), reads its queue (`_fetch_queue`) and one job's state in it
    (`queue_poll`), and says how to cancel (`cancel_command`)."""

    scheduler = ""  # in messages: "Slurm", "PBS"
    id_key = ""  # the attempt handle's key for the scheduler's job id
    script_name = ""  # the batch script's file name in the attempt folder
    stores_env = ""  # where the scheduler keeps a submitted job's environment (why secrets wait)
    timer = False  # no --signal before the time limit: the script starts its own timer
    cancel_stat = ""  # the `stats` counter of the cancel command

    def __init__(self, name: str, transport: Any, **kw) -> None:
        super().__init__(name, transport, **kw)
        self.queue = QueueCache(self._fetch_queue)
        self.gens = Generations()  # newest checkpoint generations, answered by the queue query

    @abstractmethod
    async def _fetch_queue(self) -> dict:
        ...

    def _env(self) -> str:
        """`env` option exported for the scheduler's commands (e.g. SLURM_CONF); over the local
        transport the transport already carries it."""
        if self.options.get("local"):
            return ""
        return "".join(f"export {k}={quote(v)}; " for k, v in (self.options.get("env") or {}).items())

    # -- launch -----------------------------------------------------------------------------

    @abstractmethod
    def directives(self, job: Job, res: dict) -> list[str]:
        ...

    def batch_script(self, job: Job, prep: dict, res: dict) -> str:
        minutes = res.get("time_minutes")
        timer = (int(minutes) * 60 - signal_lead_s(minutes, self.options)) if self.timer and minutes else None
        cmd = [prep["python"], f"{prep['runtime']}/launch.py", "--foreground", prep["spec"]]
        return script(job, directives=self.directives(job, res), adir=prep["adir"], jdir=prep["jdir"],
                      launcher_cmd=cmd, modules=res["modules"], container=res.get("container"),
                      options=self.options, timer_s=timer)

    @abstractmethod
    async def submit(self, job: Job, prep: dict, secrets_in: str, secrets_input: bytes | None) -> str:
        """Submits the attempt's script (already in its folder): the scheduler's job id."""
        ...

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        if env_secrets and not self.options.get("pass_secrets"):
            raise RuntimeError(
                f"{self.name} is a {self.scheduler} target, and {self.scheduler} {self.stores_env}: "
                f"secrets are not sent there unless the target has pass_secrets: true "
                f"(gpu targets add ... or edit {self.name} in your config)")
        started = time.monotonic()
        res = resources(job, self.options)
        base_python = (self.options.get("container_python") or "python3") if res.get("container") else None
        prep = await self.prepare_attempt(job, env_secrets, base_python=base_python)
        text = self.batch_script(job, prep, res)
        await self.transport.put_bytes(text.encode(), f"{prep['adir']}/{self.script_name}")
        given = "".join(f"{k} {base64.b64encode(v.encode()).decode()}\n" for k, v in env_secrets.items())
        sid = await self.submit(job, prep, SECRETS_FROM_STDIN if env_secrets else "",
                                given.encode() if env_secrets else None)
        return {"attempt": job.attempt, "attempt_dir": prep["adir"], "launched_at": time.time(),
                self.id_key: sid, "uploaded_bytes": prep["sent"] + len(text),
                "launch_s": round(time.monotonic() - started, 3), "launch_steps": prep["steps"],
                "notes": prep["notes"], "wheelhouse_bytes": prep["wheelhouse_bytes"]}

    # -- status -----------------------------------------------------------------------------

    async def poll(self, job: Job) -> Poll:
        """Where the job stands, from the one shared queue query, with the newest checkpoint
        generation the same command listed (the mirror takes it at once)."""
        return self.gens.on_poll(self, job, await self._poll_state(job))

    async def _poll_state(self, job: Job) -> Poll:
        sid = job.handle.get(self.id_key)
        if not sid:
            return Poll("lost", detail=f"no {self.scheduler} job id was recorded for this attempt")
        try:
            await self.remote()
            return await self.queue_poll(job, sid)
        except TransportError as exc:
            return Poll("unreachable", detail=str(exc).splitlines()[0])

    @abstractmethod
    async def queue_poll(self, job: Job, sid: str) -> Poll:
        """The job's state from the scheduler's queue (and, once it ended, its files)."""
        ...

    async def attempt_files(self, job: Job) -> tuple[dict | None, bool]:
        """The attempt's exit record, and whether the time-limit signal reached it."""
        doc = await self.read_exit(job)
        marker = await self._read_small(f"{self._adir(job)}/time-signal")
        return doc, marker is not None

    async def from_files(self, job: Job, sid: str) -> Poll:
        """A job the scheduler no longer knows: what its attempt folder recorded."""
        doc, marker = await self.attempt_files(job)
        if doc is not None:
            if marker and doc.get("code") == 0:
                return Poll("session_ended", detail="saved its checkpoint and stopped before the time limit")
            return exited_poll(doc)
        if time.time() - job.handle.get("launched_at", 0) < PROVISIONING_GRACE_S:
            return Poll("provisioning", detail="submitted")
        # forgotten (a controller that lost its state, a purge) with no exit record: the session
        # ended, not the script, so it resumes from its checkpoint (jobmoves._launcher_gone)
        return Poll("lost", vanished=True, detail=f"{self.scheduler} no longer knows job {sid} and it "
                    "recorded no exit status: the session ended")

    # -- control ----------------------------------------------------------------------------

    @abstractmethod
    def cancel_command(self, sid: str, force: bool) -> str:
        ...

    async def cancel(self, job: Job, force: bool = False) -> None:
        sid = job.handle.get(self.id_key)
        if not sid:
            return
        self.stats[self.cancel_stat] += 1
        await self.remote()
        # the scheduler ends the job's steps; the launcher's kill routine then ends what left
        # them (a `setsid` child) where the job runs on this host; on a compute node the
        # launcher's own sweep does, when the job's main process ends
        await self.transport.run(self._env() + self.cancel_command(sid, force) + "\n"
                                 + self.kill_script(job, force), timeout=60)
        self.queue.value = None  # the next poll asks again

    async def signal_checkpoint(self, job: Job) -> None:
        """After the control file: the scheduler's own way to wake the job, where it has one."""

    async def request_checkpoint(self, job: Job) -> None:
        await self.remote()
        await self.transport.run(f": > {quote(self.job_dir(job) + '/ctl/checkpoint')}", timeout=60)
        await self.signal_checkpoint(job)
