"""The supervisor: one asyncio loop per user and machine that drives every live job.

It holds an flock on `supervisor.lock` (so there is never a second one), is started on demand
by the commands that need it and detaches from them, and exits after a quiet spell. All it
knows is in the store and in the providers' own records, so after a `kill -9` a new one
re-adopts what is running (by the provider-side tag of job id and attempt), launches nothing
twice, and records the exit of a job that ended while it was down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from core import paths
from core.config.user import Rules, load
from core.display.sanitize import printable
from core.engine.daemon import try_lock
from core.engine import storage
from core.engine.metricfile import parse_metrics, parse_rows  # noqa: F401 - parse_metrics lived here
from core.packaging import checkpoints
from core.engine.service import bring_home, hold, replan, write_job_json
from core.jobs.states import ACTIVE, LAUNCHED, SUPERVISED, State
from core.engine.looplag import LagWatch
from core.jobs.store import Job, Store
from core.jobs.storethread import StoreThread
from core.engine import strays
from core.errors import DiskFull, IllegalTransition, UserError, disk_full_guard
from core.config import killrules
from core.planning import killjudge
from core.planning.plan import digest
from core.planning.usage import job_hours
from core.providers import registry
from core.providers.base import Poll
from core.runtime.diskspace import says_disk_full
from core.runtime.gpuutil import interval_s
from core.runtime import workdir
from core.secrets.launch import secrets_for_launch

log = logging.getLogger("gpu-router.supervisor")

CANCEL_GRACE_S = 10.0
UNREACHABLE_GRACE_S = 600.0  # a host away longer than this has lost the job's session
MAX_RESUMES = 3  # session ends (time limits, preemption) resumed on the same target
IDLE_EXIT_S = 60.0
MIGRATE_RETRY_S = 15.0  # a moving job with no target that fits plans again this often
RULES_EVERY_S = 5.0  # kill rules that read a metric's history look this often
# Jobs that simply run are looked at this many a tick at most, the ones looked at longest ago
# first: with hundreds of jobs each is then seen every few seconds instead of every one of
# them every second in one burst that would hold the loop (bench/supervise.py measures it).
# Jobs with something to do (placing, starting, cancelling, moving) are stepped every tick.
STEADY_PER_TICK = int(os.environ.get("GPU_ROUTER_STEADY_PER_TICK", 150))
# what a job's handle keeps from one attempt to the next (counters, and where it came from)
CARRIED = ("resumes", "retries", "migrations", "migrated_from", "restore_checkpoint", "log_base")


# -- the loop ------------------------------------------------------------------------------


class Supervisor:
    def __init__(self, store: Store | None = None, providers: dict[str, Any] | None = None,
                 tick_s: float = 1.0, idle_exit_s: float = IDLE_EXIT_S) -> None:
        self.store = store or Store()
        self.db = StoreThread()  # every store call from the loop runs on the store's own thread
        self.lag = LagWatch(paths.home() / "supervisor-lag.json")
        self._providers = providers
        self._own_providers = providers is None
        self._config_stamp: int | None = None
        self._rules = None
        self.tick_s = tick_s
        self.idle_exit_s = idle_exit_s
        self.wakeup = asyncio.Event()
        self.busy: set[str] = set()
        self.verified: set[str] = set()
        self.stopping = False
        self._gc_task: asyncio.Task | None = None
        self._stepped: dict[str, float] = {}  # job id -> when it was last stepped
        self._live: dict[str, Job] = {}  # the live jobs as of revision _rev
        self._rev: int | None = None
        self._mirrored: dict[str, float] = {}  # job id -> the window its checkpoint was last looked at in
        self._rules_at: dict[str, float] = {}  # job id -> when its kill rules last read history
        self._sweep: asyncio.Task | None = None

    @property
    def providers(self) -> dict[str, Any]:
        if self._providers is None:
            self._providers = registry.build()
        return self._providers

    def reload_providers(self) -> None:
        self._providers = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop)
        loop.add_signal_handler(signal.SIGUSR2, self.wakeup.set)
        log.info("supervisor %d started", os.getpid())
        watch = asyncio.create_task(self.lag.run())  # logs any stall of the loop over 100 ms
        quiet_since = time.monotonic()
        tasks: set[asyncio.Task] = set()
        while not self.stopping:
            try:
                live = await self.tick(tasks)
            except Exception:  # noqa: BLE001 - one bad tick must not end supervision
                log.exception("tick failed")
                live = True
            if live:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > self.idle_exit_s:
                log.info("no live jobs for %.0fs: exiting", self.idle_exit_s)
                break
            try:
                await asyncio.wait_for(self.wakeup.wait(), self.tick_s)
            except TimeoutError:
                pass
            self.wakeup.clear()
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        if self._sweep is not None:
            self._sweep.cancel()  # its rows stay: the next supervisor sweeps them
        watch.cancel()
        self.lag._write()

    def _stop(self) -> None:
        self.stopping = True
        self.wakeup.set()

    def _config_changed(self) -> bool:
        try:
            stamp = paths.user_config_file().stat().st_mtime_ns
        except OSError:
            stamp = 0
        changed = stamp != self._config_stamp
        self._config_stamp = stamp
        return changed

    async def tick(self, tasks: set[asyncio.Task] | None = None) -> bool:
        """Start one step for each live job that is not mid-step; True if any job is live."""
        tasks = tasks if tasks is not None else set()
        if self._config_changed():
            self._providers = None if self._own_providers else self._providers
            self._rules = None
        jobs = await self._live_jobs()
        load: dict[str, int] = {}
        for job in jobs:
            if job.state in LAUNCHED:
                load[job.provider or ""] = load.get(job.provider or "", 0) + 1
        for job in self._this_tick(jobs):
            if job.state == State.ROUTING:
                provider = self.providers.get(job.provider or "")
                if provider is None or not getattr(provider, "enabled", True):
                    await self.db(self._replan, job, f"target {job.provider!r} is no longer "
                                      + ("configured" if provider is None else "enabled"))
                    continue
                if load.get(job.provider, 0) >= provider.max_jobs:
                    await self.db(self._note_waiting, job, provider, load.get(job.provider, 0))
                    continue
                load[job.provider] = load.get(job.provider, 0) + 1
            elif job.state not in LAUNCHED and job.state != State.MIGRATING:
                continue
            self.busy.add(job.id)
            task = asyncio.create_task(self._step_guarded(job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        self._sweep_strays()
        if tasks:
            await asyncio.wait(set(tasks), timeout=self.tick_s)
        return bool(jobs) or strays.keeps_alive(await self.db(self.store.strays), time.time())

    async def _live_jobs(self) -> list[Job]:
        """The live jobs, oldest first (first come, first placed). Only the rows written since
        the last tick are read again (each write takes the next revision number): with a
        thousand jobs a full read each second would cost the loop more than the jobs do."""
        if self._rev is None:
            rev = await self.db(self.store.last_rev)
            self._live = {j.id: j for j in await self.db(self.store.jobs, states=ACTIVE)}
            self._rev = rev
        else:
            for job in await self.db(self.store.jobs_after, self._rev):
                self._rev = max(self._rev, job.rev)
                if job.state in ACTIVE:
                    self._live[job.id] = job
                else:
                    self._live.pop(job.id, None)
        return sorted(self._live.values(), key=lambda j: (j.created_at, j.id))

    def _this_tick(self, jobs: list[Job]) -> list[Job]:
        """The jobs to step now: every one with something to do, and of those that simply run,
        the STEADY_PER_TICK looked at longest ago (first come, first placed kept)."""
        free = [j for j in jobs if j.id not in self.busy]
        steady = [j for j in free if j.state == State.RUNNING and not j.cancel_requested
                  and not j.handle.get("unreachable_since")]
        if len(steady) > STEADY_PER_TICK:
            steady.sort(key=lambda j: self._stepped.get(j.id, 0.0))
            skipped = {j.id for j in steady[STEADY_PER_TICK:]}
            free = [j for j in free if j.id not in skipped]
        now = time.monotonic()
        for job in free:
            self._stepped[job.id] = now
        if len(self._stepped) > 2 * len(jobs) + 100:  # ended jobs leave
            live = {j.id for j in jobs}
            self._stepped = {k: v for k, v in self._stepped.items() if k in live}
        return free

    def _note_waiting(self, job: Job, provider: Any, running: int) -> None:
        reason = f"waiting for a free slot on {provider.name} ({running} of {provider.max_jobs} in use)"
        if job.reason != reason:
            self.store.update(job.id, reason=reason)

    async def _step_guarded(self, job: Job) -> None:
        try:
            with disk_full_guard(paths.home()):
                await self.step(job)
        except IllegalTransition as exc:  # another process moved it first (cancel, say)
            log.info("job %s: %s", job.short_id, exc)
        except DiskFull as exc:  # gpu-router's home filled up: say so where the user looks
            log.warning("job %s: %s", job.short_id, exc.what)
            await self.db(self._say_disk_full, job, exc)
        except Exception as exc:  # noqa: BLE001
            log.exception("job %s: step failed", job.short_id)
            try:
                fresh = await self.db(self.store.get, job.id)
                if fresh.state not in LAUNCHED:
                    await self.db(self._fail, fresh, f"gpu-router could not start it: {exc}")
            except Exception:  # noqa: BLE001
                log.exception("job %s: could not record the failure", job.short_id)
        finally:
            self.busy.discard(job.id)

    def _say_disk_full(self, job: Job, exc: DiskFull) -> None:
        """A job not started yet fails with the message; one that runs keeps running (on a
        remote target it is not affected) and shows the message as its reason until the disk
        has room again (the store's reserve makes room for this write)."""
        try:
            fresh = self.store.get(job.id)
            if fresh.state not in LAUNCHED:
                self._fail(fresh, exc.what)
            elif fresh.reason != exc.what:
                self.store.update(job.id, reason=exc.what)
        except UserError:
            log.exception("job %s: could not record the full disk", job.short_id)

    async def step(self, job: Job) -> None:
        job = await self.db(self.store.get, job.id)  # the freshest copy: others write too
        if job.state == State.ROUTING:
            await self._launch(job)
            return
        if job.state == State.MIGRATING:
            await self._resume(job)
            return
        if job.state not in LAUNCHED:
            return
        provider = self.providers.get(job.provider or "")
        if provider is None:
            await self.db(self._fail, job, f"target {job.provider!r} is no longer configured")
            return
        if job.state == State.PROVISIONING and not job.handle.get("launched_at"):
            # the supervisor died between placing the job and starting it: start it now
            # (the launcher's O_EXCL claim makes a second start of one attempt a no-op)
            await self._start_attempt(job, provider)
            return
        if job.cancel_requested:
            await self._cancel(job, provider)
        if job.id not in self.verified:
            if hasattr(provider, "is_ours"):
                poll = await provider.poll(job)
                if poll.phase in ("running", "provisioning") and not await asyncio.to_thread(provider.is_ours, job) \
                        and job.handle.get("launched_at", 0) < time.time() - 30:
                    await self._finish(job, provider, Poll("lost", detail="its process id now belongs to another program"))
                    return
            self.verified.add(job.id)
        await self._ingest_metrics(job, provider)
        if hasattr(provider, "sync_log"):  # remote targets mirror the log into the job folder
            await provider.sync_log(job)
        if job.state in (State.RUNNING, State.CHECKPOINTING):
            await self._mirror(job, provider)
        poll = await provider.poll(job)
        if poll.phase == "unreachable":
            await self._unreachable(job, poll, provider)
            return
        if job.handle.get("unreachable_since"):
            await self.db(self.store.update, job.id, handle={k: v for k, v in job.handle.items() if k != "unreachable_since"},
                              reason=f"{provider.name} is reachable again")
            job = await self.db(self.store.get, job.id)
        if poll.phase == "session_ended":
            await self._session_ended(job, provider, poll)
            return
        if poll.phase == "running" and job.state == State.PROVISIONING:
            await self.db(self.store.usage_start, job.id, job.attempt, provider.name,
                                   float(job.plan.get("price_per_hour") or 0))
            await self.db(self.store.transition, job.id, State.RUNNING, "started", expect=[State.PROVISIONING])
        elif poll.phase == "provisioning" and poll.detail and poll.detail != job.reason:
            await self.db(self.store.update, job.id, reason=poll.detail)  # why it waits: "queued: Resources"
        elif poll.phase in ("exited", "lost", "cancelled"):
            if hasattr(provider, "sync_log"):  # what it wrote between the mirror above and its end
                await provider.sync_log(job)
            await self._ingest_metrics(await self.db(self.store.get, job.id), provider)
            await self._finish(await self.db(self.store.get, job.id), provider, poll)
        elif poll.phase == "running":
            await self._check_kill_rules(await self.db(self.store.get, job.id), provider)
            await self._check_overrun(await self.db(self.store.get, job.id), provider)

    async def _mirror(self, job: Job, provider: Any, force: bool = False) -> None:
        """Bring the job's last complete checkpoint home (rate-limited; never fails the job)."""
        if not checkpoints.due(job.id, self._mirrored, force):
            return
        async def say(text: str) -> None:  # once per fact (checkpoints.mirror keeps count)
            log.info("job %s: %s", job.short_id, text)
            await self.db(self.store.add_event, job.id, text)

        try:
            doc = await checkpoints.mirror(job, provider, say=say)
        except Exception as exc:  # noqa: BLE001 - the host may be away: the next look retries
            log.info("job %s: checkpoint not mirrored: %s", job.short_id, exc)
            return
        if doc is not None:
            log.info("job %s: checkpoint %s came home (%d bytes moved)", job.short_id,
                     doc.get("generation"), doc.get("last_moved", 0))

    async def _unreachable(self, job: Job, poll: Poll, provider: Any) -> None:
        """A dropped connection is not a failed job: wait, and only after the grace call the
        session lost (the job then waits in `migrating`, saying why)."""
        since = job.handle.get("unreachable_since") or time.time()
        grace = float(getattr(provider, "unreachable_grace_s", None) or UNREACHABLE_GRACE_S)
        waited = time.time() - since
        if waited > grace and job.state != State.MIGRATING:
            await self.db(self.store.usage_end, job.id, job.attempt)
            why = f"{job.provider} unreachable for {_ago(waited)} ({poll.detail})"
            await self.db(self.store.transition, job.id, State.MIGRATING,
                                  f"session lost: {why}; moving it to another target",
                                  handle={**job.handle, "unreachable_since": since, "session_lost": True,
                                          "resume_same_target": False, "move_why": why,
                                          "lost_target": job.provider})
            return
        reason = f"{job.provider} unreachable for {waited:.0f}s ({poll.detail}); retrying"
        await self.db(self.store.update, job.id, handle={**job.handle, "unreachable_since": since}, reason=reason)

    async def _session_ended(self, job: Job, provider: Any, poll: Poll) -> None:
        """The target ended the session (a time limit, preemption): resume from the checkpoint."""
        await self.db(self.store.usage_end, job.id, job.attempt)
        resumes = int(job.handle.get("resumes", 0))
        if job.cancel_requested:
            await self._finish(job, provider, Poll("exited", exit_code=None, detail=poll.detail))
            return
        limit = int(getattr(provider, "max_resumes", MAX_RESUMES))
        # the target is still there: its newest checkpoint comes home before anything moves
        await self._mirror(job, provider, force=True)
        requeue = (getattr(provider, "options", None) or {}).get("requeue", True)
        same = bool(requeue) and resumes < limit
        why = f"session ended on {provider.name}: {poll.detail}"
        if not same:
            why += (f" ({provider.name} is set not to requeue)" if not requeue
                    else f" (resumed there {resumes} times already)")
        await self.db(self.store.transition, job.id, State.MIGRATING, why + ("" if same else "; moving it to another target"),
                              handle={**job.handle, "resume_same_target": same, "resumes": resumes,
                                      "max_resumes": limit, "move_why": why,
                                      "lost_target": provider.name})

    async def _resume(self, job: Job) -> None:
        """A migrating job whose target can take it back starts its next attempt there."""
        if job.cancel_requested:
            await self.db(self.store.transition, job.id, State.CANCELLED, "cancelled while between sessions")
            return
        if not job.handle.get("resume_same_target"):
            await self._migrate(job)
            return
        provider = self.providers.get(job.provider or "")
        if provider is None:
            return
        retry = job.handle.get("retry_exit")
        carried = _carried(job.handle)
        carried.pop("restore_checkpoint", None)  # the target's own ckpt/ is the newest
        if retry is not None:
            carried["retries"] = int(job.handle.get("retries", 0)) + 1
            text = f"retrying on {provider.name} after exit status {retry} (retry {carried['retries']})"
        else:
            carried["resumes"] = int(job.handle.get("resumes", 0)) + 1
            text = f"resuming on {provider.name} from its last checkpoint"
        job = await self.db(self.store.transition, job.id, State.PROVISIONING, text,
                                    expect=[State.MIGRATING], attempt=job.attempt + 1,
                                    handle=carried, exit_code=None)
        await self._start_attempt(job, provider)

    async def _migrate(self, job: Job) -> None:
        """Move a job whose session ended to another target: plan again without the lost one,
        under the approval rules again, and resume it there from the checkpoint at home."""
        if time.time() < float(job.handle.get("migrate_retry_at") or 0):
            return
        rules = self.rules()
        moves = int(job.handle.get("migrations", 0))
        src = job.handle.get("lost_target") or job.provider or "?"
        why = job.handle.get("move_why") or f"its session on {src} ended"
        if moves >= rules.max_migrations:
            await self.db(self._fail, job, f"{why}; it was moved {moves} times already (rules.max_migrations), "
                            "not moving it again")
            return
        ckpt = checkpoints.summary(job.id)
        restart = job.request.get("restart", "never")
        if ckpt is None and restart != "allow":
            await self.db(self._fail, job, f"{why}; no complete checkpoint came home, and it would start again "
                            "from the beginning, which its request does not allow "
                            "(set restart: allow in gpu.yaml to allow it)")
            return
        exclude = {src: f"{src} lost the job's session ({why})"} if src else {}
        try:
            moved = await asyncio.to_thread(replan, self.store, job, why, exclude)
        except UserError as exc:
            wait = f"{why}; waiting for a target that fits: {exc.what}"
            await self.db(self.store.update, job.id, reason=wait[:2000], handle={
                **job.handle, "migrate_retry_at": time.time() + MIGRATE_RETRY_S})
            return
        if moved.state == State.AWAITING_APPROVAL:
            # the hold keeps where it came from; the approval resumes it through _launch
            await self.db(self.store.update, job.id, handle={**_carried(job.handle), "migrations": moves + 1,
                                              "migrated_from": src, "moving": True,
                                              "restore_checkpoint": ckpt is not None})
            return
        if moved.cancel_requested or (await self.db(self.store.get, job.id)).cancel_requested:
            await self.db(self.store.transition, job.id, State.CANCELLED, "cancelled while it was moving")
            return
        provider = self.providers.get(moved.provider or "")
        if provider is None:
            self.reload_providers()
            provider = self.providers.get(moved.provider or "")
        if provider is None:
            return  # the next tick tries again
        await self._abandon(job, src)
        start = "from " + checkpoints.describe(ckpt) if ckpt else "from the beginning (restart: allow)"
        text = f"migrating from {src} to {provider.name}: {why}, {start}"
        job = await self.db(self.store.transition,
            job.id, State.PROVISIONING, text, expect=[State.MIGRATING], attempt=job.attempt + 1,
            exit_code=None, metrics_offset=0,  # the new target's metrics file starts empty
            data={"from": src, "to": provider.name, "why": why, "checkpoint": ckpt},
            handle={**_carried(job.handle), "migrations": moves + 1, "migrated_from": src,
                    "restore_checkpoint": ckpt is not None, "resumes": 0,
                    "log_base": _log_mark(job, f"moved from {src} to {provider.name}: {why}")})
        await self._start_attempt(job, provider)

    async def _abandon(self, job: Job, target: str) -> None:
        """The attempt left behind on the lost target is stopped where that target answers,
        now or whenever it comes back (core/engine/strays.py sweeps it)."""
        if target in self.providers and job.handle.get("attempt_dir"):
            await self.db(self.store.add_stray, job.id, job.attempt, target, job.handle)
            self._sweep_strays()

    def _sweep_strays(self) -> None:
        """One sweep of the due strays in the background (a target away must not hold a tick)."""
        if self._sweep is None or self._sweep.done():
            self._sweep = asyncio.get_running_loop().create_task(
                strays.sweep(self.db, self.store, self.providers))

    async def _launch(self, job: Job) -> None:
        provider = self.providers[job.provider]
        if job.plan.get("holds") and job.approved_digest != job.digest:
            await self.db(hold, self.store, job, job.plan["holds"], kind=job.plan.get("hold_kind", "rules"))
            return
        carried = _carried(job.handle)  # a job moved here after an approval keeps its counters
        text = f"placed on {provider.name}"
        if job.handle.get("moving"):
            ckpt = checkpoints.summary(job.id) if carried.get("restore_checkpoint") else None
            text = (f"migrating from {carried['migrated_from']} to {provider.name} (approved), from "
                    + (checkpoints.describe(ckpt) if ckpt else "the beginning"))
        moved = {}
        if job.handle.get("moving"):  # held while it moved, now approved: it starts afresh there
            moved = {"metrics_offset": 0}
            carried["log_base"] = _log_mark(job, f"moved from {carried['migrated_from']} to {provider.name}")
        job = await self.db(self.store.transition, job.id, State.PROVISIONING, text, expect=[State.ROUTING],
                                    attempt=job.attempt + 1, handle=carried, exit_code=None, **moved)
        await self._start_attempt(job, provider)

    async def _start_attempt(self, job: Job, provider: Any) -> None:
        try:
            env_secrets = secrets_for_launch(job)
        except UserError as exc:
            await self.db(self._fail, job, exc.message())
            return
        try:
            handle = await provider.launch(job, env_secrets)
        except DiskFull as exc:
            await self.db(self._fail, job, exc.what)
            return
        except Exception as exc:  # noqa: BLE001
            log.exception("job %s: launch failed", job.short_id)
            await self.db(self._fail, job, f"could not start on {provider.name}: {exc}")
            return
        await self.db(self.store.update, job.id, handle={**_carried(job.handle), **handle})
        await self.db(self.store.add_event, job.id, f"attempt {job.attempt} started on {provider.name}",
                             data={"attempt": job.attempt})

    async def _cancel(self, job: Job, provider: Any) -> None:
        sent = job.handle.get("cancel_sent_at")
        now = time.time()
        if sent is None:
            await provider.cancel(job)
            await self.db(self.store.update, job.id, handle={**job.handle, "cancel_sent_at": now})
        elif now - sent > CANCEL_GRACE_S and not job.handle.get("cancel_forced"):
            await provider.cancel(job, force=True)
            await self.db(self.store.update, job.id, handle={**job.handle, "cancel_forced": True})

    async def _ingest_metrics(self, job: Job, provider: Any) -> None:
        data, offset = await provider.read_metrics(job, job.metrics_offset)
        if offset == job.metrics_offset and not data:
            return
        parsed = parse_rows(data)
        await self.db(self.store.add_metrics, job.id, parsed.rows, offset,
                               {**job.last_metric, **parsed.last} if parsed.last else {},
                               config=parsed.config, final=parsed.final)
        if parsed.nonfinite:  # kept for the nan_metric rule: NaN is never stored as a number
            seen = dict(job.handle.get("nonfinite") or {})
            for key, ts in parsed.nonfinite.items():
                if len(seen) < 20:
                    seen.setdefault(key, ts)
            fresh = await self.db(self.store.get, job.id)
            await self.db(self.store.update, job.id, handle={**fresh.handle, "nonfinite": seen})

    async def _check_overrun(self, job: Job, provider: Any) -> None:
        """Past hours x overrun_factor: ask for a checkpoint, then stop it, then hold it."""
        hours = job.plan.get("hours")
        rules = self.rules()
        if job.state == State.RUNNING and hours:
            used = await self.db(job_hours, self.store, job.id)
            if used > hours * rules.overrun_factor:
                await provider.request_checkpoint(job)
                await self.db(self.store.transition,
                    job.id, State.CHECKPOINTING,
                    f"ran {used:.3g} h, past its {hours:g} h estimate (x{rules.overrun_factor:g}): "
                    f"asked to checkpoint and stop", expect=[State.RUNNING],
                    handle={**job.handle, "overrun_at": time.time()})
        elif job.state == State.CHECKPOINTING and (job.handle.get("overrun_at") or job.handle.get("kill")):
            asked = job.handle.get("overrun_at") or job.handle["kill"]["at"]
            waited = time.time() - asked
            if waited > rules.checkpoint_grace_s and not job.handle.get("overrun_stop_sent"):
                await provider.cancel(job)
                await self.db(self.store.update, job.id, handle={**job.handle, "overrun_stop_sent": time.time()})
            elif waited > rules.checkpoint_grace_s + CANCEL_GRACE_S and not job.handle.get("cancel_forced"):
                await provider.cancel(job, force=True)
                await self.db(self.store.update, job.id, handle={**job.handle, "cancel_forced": True})

    async def _check_kill_rules(self, job: Job, provider: Any) -> None:
        """The user's kill rules and the job's own: the first that fires asks the job to
        checkpoint; after the checkpoint grace it is stopped (`_check_overrun`'s second half),
        its outputs come home and it ends failed with the rule as its reason (`_finish`)."""
        if job.state != State.RUNNING or job.handle.get("kill"):
            return
        rules = self.rules()
        try:
            own = killrules.parse(job.request.get("kill_rules") or [])
        except ValueError:
            own = []
        active = killrules.combined(rules.kill_rules, own)
        if not active:
            return
        now = time.time()
        facts = killjudge.Facts(now=now, nonfinite=dict(job.handle.get("nonfinite") or {}),
                                budget_per_job=rules.budget_per_job)
        wanted = killjudge.needs_series(active)
        slow = bool(wanted) or any(r.kind == "over_budget" for r in active)
        if slow:
            if now - self._rules_at.get(job.id, 0.0) < RULES_EVERY_S and not facts.nonfinite:
                return
            self._rules_at[job.id] = now
            if any(r.kind == "over_budget" for r in active):
                facts.spent = await self.db(job_hours, self.store, job.id) * float(job.plan.get("price_per_hour") or 0)
            points = await asyncio.to_thread(self._series, job.id, wanted)
            facts.series = points
            if killrules.UTIL_METRIC in wanted and not points.get(killrules.UTIL_METRIC):
                await self._note_no_util(job, active, now)
        fired = killjudge.evaluate(active, facts)
        if fired is None:
            return
        rule, why = fired
        try:
            await provider.request_checkpoint(job)
        except Exception as exc:  # noqa: BLE001 - it is stopped after the grace all the same
            log.info("job %s: checkpoint request failed: %s", job.short_id, exc)
        await self.db(self.store.transition, job.id, State.CHECKPOINTING,
                              f"kill rule {rule.text()} fired: {why}; asked to checkpoint, then it stops",
                              expect=[State.RUNNING], data={"rule": rule.text(), "why": why},
                              handle={**job.handle, "kill": {"rule": rule.text(), "why": why, "at": now}})

    async def _note_no_util(self, job: Job, active: list, now: float) -> None:
        """Once per attempt, in the job's events: a gpu_util_below rule that has had no gpu/util
        figure for its whole window (and two sampling intervals more) cannot fire, because the
        target has no working nvidia-smi (its job log says why) and the job logs none."""
        rule = next(r for r in active if r.kind == "gpu_util_below")
        since = job.handle.get("launched_at")
        wait = rule.minutes * 60 + 2 * interval_s(os.environ)
        if not since or now - since < wait or job.handle.get("util_note") == job.attempt:
            return
        fresh = await self.db(self.store.get, job.id)
        await self.db(self.store.update, job.id, handle={**fresh.handle, "util_note": job.attempt})
        await self.db(self.store.add_event, job.id,
                      f"kill rule {rule.text()} has had no gpu/util figure in the "
                      f"{_ago(now - since)} since attempt {job.attempt} started: this target has no "
                      "working nvidia-smi (the job log says why) and the job logs no gpu/util, "
                      "so the rule cannot fire unless one arrives", actor="supervisor")

    def _series(self, job_id: str, keys: set[str]) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {}
        for key in keys:
            rows = self.store.metrics(job_id, key).get(key, [])
            out[key] = [(ts, value) for _step, value, ts in rows]
        return out

    def rules(self):
        """The user's rules, read once per change of the config file (not once per job)."""
        if self._rules is None:
            try:
                self._rules = load().rules
            except UserError:
                log.exception("the user config is invalid: using the default rules")
                self._rules = Rules()
        return self._rules

    async def _finish(self, job: Job, provider: Any, poll: Poll) -> None:
        if job.handle.get("launched_at"):
            # an attempt that ended before a poll saw it run still ran: count it from its
            # launch (a no-op when its usage row exists), so its hours and cost are not zero
            await self.db(self.store.usage_start, job.id, job.attempt, provider.name,
                                   float(job.plan.get("price_per_hour") or 0),
                                   at=job.handle["launched_at"])
        await self.db(self.store.usage_end, job.id, job.attempt)
        if job.handle.get("overrun_at") and not job.cancel_requested and (
                poll.exit_code == 0 or job.handle.get("overrun_stop_sent")):
            # what it wrote so far comes home now: a person may deny it and never resume it
            notes = await bring_home(self.store, job, provider)
            await self.db(self._hold_overrun, job, notes)
            return
        kill = job.handle.get("kill")
        if job.cancel_requested:
            dst, reason = State.CANCELLED, "cancelled by request"
            await self._final_sweep(job, provider)
        elif kill:
            dst, reason = State.FAILED, f"stopped by kill rule {kill['rule']}: {kill['why']}"
            await self._final_sweep(job, provider)
        elif self._retry_wanted(job, poll):
            await self._retry(job, provider, poll)
            return
        elif says_disk_full(poll.detail):  # said by the launcher, or the disk checked after a loss
            dst, reason = State.FAILED, poll.detail
        elif poll.phase == "lost":
            dst, reason = State.FAILED, f"lost: {poll.detail}"
        elif poll.phase == "cancelled":  # stopped on the target's side (its own web page, say)
            dst, reason = State.CANCELLED, poll.detail or f"cancelled on {provider.name}"
        elif poll.exit_code == 0:
            dst, reason = State.DONE, "exited with status 0"
        else:
            dst, reason = State.FAILED, (f"exited with status {poll.exit_code}"
                                         + (f": {poll.detail}" if poll.detail else ""))
        notes = await bring_home(self.store, job, provider)
        await self._mirror(job, provider, force=True)  # its last checkpoint, kept as an output
        kept = await asyncio.to_thread(checkpoints.settle, job.id, Path(job.outputs_dir))
        if kept:
            notes = [*notes, kept]
        stayed = await self._stayed(job, provider)
        await self.db(self.store.transition, job.id, dst, reason, expect=LAUNCHED, exit_code=poll.exit_code,
                              data={"notes": notes} if notes else None)
        if stayed:
            await self.db(self.store.update, job.id, handle={**(await self.db(self.store.get, job.id)).handle, "stayed": stayed})
            await self.db(self.store.add_event, job.id, stayed, actor="supervisor")
        await asyncio.to_thread(write_job_json, self.store, await self.db(self.store.get, job.id))
        self._enforce_caps(provider)

    def _retry_wanted(self, job: Job, poll: Poll) -> bool:
        """A non-zero exit the request lists in retry_on_exit_codes, with retries left."""
        codes = job.request.get("retry_on_exit_codes") or []
        if poll.phase != "exited" or poll.exit_code in (None, 0) or poll.exit_code not in codes:
            return False
        return int(job.handle.get("retries", 0)) < int(job.request.get("max_retries") or 1)

    async def _retry(self, job: Job, provider: Any, poll: Poll) -> None:
        await self.db(self.store.transition,
            job.id, State.MIGRATING,
            f"exited with status {poll.exit_code}, which its request lists in retry_on_exit_codes: "
            f"trying again ({int(job.handle.get('retries', 0)) + 1} of {int(job.request.get('max_retries') or 1)})",
            expect=LAUNCHED, exit_code=poll.exit_code,
            handle={**job.handle, "resume_same_target": True, "retry_exit": poll.exit_code})

    async def _stayed(self, job: Job, provider: Any) -> str | None:
        """What the launcher counted of the job's undeclared work, as a sentence, or None."""
        try:
            doc = await provider.read_exit(job) if hasattr(provider, "read_exit") else None
        except Exception:  # noqa: BLE001 - a note, never a reason to fail the ending
            return None
        return workdir.stayed_text((doc or {}).get("outputs") or {}, job.short_id)

    def _enforce_caps(self, provider: Any) -> None:
        """After a job ends, free caches over their caps, here and on the job's target, in the
        background: a slow host never holds up the loop, a failure is logged, never raised."""
        if self._gc_task is not None and not self._gc_task.done():
            return  # one at a time; the next ending job runs it again

        async def run() -> None:
            try:
                cfg = load()
                limits = storage.caps(cfg)
                await asyncio.to_thread(storage.home, self.store, limits["home"])
                if provider.name in limits and hasattr(provider, "cache_scan"):
                    loc = await storage.target(self.store, provider.name, provider, limits[provider.name])
                    if loc.error:
                        log.warning("caches on %s: %s", provider.name, loc.error)
            except Exception:  # noqa: BLE001 - storage upkeep must never stop the supervisor
                log.exception("freeing caches failed")

        self._gc_task = asyncio.get_running_loop().create_task(run())

    async def _final_sweep(self, job: Job, provider: Any) -> None:
        """Cancel is final: whatever of the job still runs (a process that ignored SIGTERM, one
        its launcher could not stop) is killed before the job is recorded cancelled."""
        try:
            await provider.cancel(job, force=True)
        except Exception:  # noqa: BLE001 - the host may be gone; the job still ends cancelled
            log.exception("job %s: final kill failed", job.short_id)

    def _hold_overrun(self, job: Job, notes: list[str] | None = None) -> None:
        """The job stopped past its hours: wait for a person, offering another estimate's worth."""
        used = job_hours(self.store, job.id)
        original = job.plan.get("original_hours") or job.plan["hours"]
        plan = {**job.plan, "original_hours": original,
                "hours": round(job.plan["hours"] + original, 6)}
        plan["digest"] = digest(plan)
        plan["estimated_price"] = round(original * float(plan.get("price_per_hour") or 0), 4)
        holds = [{"rule": "overrun",
                  "reason": f"it ran {used:.3g} h, well past its {job.plan['hours']:g} h estimate, "
                            f"and was stopped after saving a checkpoint; approving resumes it from "
                            f"that checkpoint for up to {original:g} more hours"}]
        hold(self.store, job, holds, kind="overrun", plan=plan, exit_code=None)
        for note in notes or []:
            self.store.add_event(job.id, note, actor="supervisor")

    def _replan(self, job: Job, why: str) -> None:
        """The job's target went away before it started: route it again, and re-ask if held."""
        try:
            replan(self.store, job, why)
        except UserError as exc:
            self._fail(job, f"{why}, and no other target fits: {exc.what}")

    def _fail(self, job: Job, reason: str) -> None:
        try:
            self.store.transition(job.id, State.FAILED, reason)
        except IllegalTransition:
            log.info("job %s: could not fail it from %s", job.short_id, job.state)


def _carried(handle: dict) -> dict:
    return {k: handle[k] for k in CARRIED if k in handle}


def _log_mark(job: Job, text: str) -> int:
    """A line in the job's log saying it moved; returns the log's size after it, where the
    new target's own log begins in the local mirror (RemoteProvider.sync_log)."""
    path = paths.jobs_dir() / job.id / "job.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(f"\n[gpu-router] {printable(text)}\n".encode())
        return f.tell()


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class _PrintableFormatter(logging.Formatter):
    """Log lines quote jobs, hosts and errors; `gpu daemon` shows them on a terminal and its
    log is read with cat, so they pass the terminal filter (tracebacks keep their lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def main() -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(_PrintableFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    idle = float(os.environ.get("GPU_ROUTER_IDLE_EXIT_S", IDLE_EXIT_S))
    tick = float(os.environ.get("GPU_ROUTER_TICK_S", 1.0))
    while True:
        fd = _take_lock()
        if fd is None:
            return 0  # another supervisor runs: it will do the work
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        sup = Supervisor(tick_s=tick, idle_exit_s=idle)
        asyncio.run(sup.run())
        os.close(fd)
        # A job committed while this one decided to leave found the lock held and only woke
        # it: with the lock released, look once more, so no job waits for a supervisor.
        if sup.stopping or not sup.store.jobs(states=SUPERVISED, limit=1):
            return 0
        log.info("a job arrived while exiting: supervising again")


def _take_lock(wait_s: float = 1.0) -> int | None:
    """The supervisor lock; a command probing for a running supervisor holds it for an
    instant, so a new supervisor tries for a moment before concluding another one runs."""
    deadline = time.monotonic() + wait_s
    while True:
        fd = try_lock()
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
