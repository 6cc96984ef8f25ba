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
from typing import Any

from core import paths
from core.display.sanitize import printable
from core.engine import strays
from core.engine.ckptcopy import CheckpointCopies, Copy
from core.engine.daemon import try_lock
from core.engine.jobmoves import JobMoves
from core.engine.jobsteps import JobSteps
from core.engine.jobwatch import JobWatch
from core.engine.queuewait import QueueWait
from core.engine.reroute import SlotMoves
from core.engine.looplag import LagWatch
from core.engine.notify import Notifier
from core.errors import DiskFull, IllegalTransition, UserError, disk_full_guard
from core.jobs.states import ACTIVE, LAUNCHED, SUPERVISED, State
from core.jobs.store import Job, Store
from core.jobs.storethread import StoreThread
from core.providers import registry

log = logging.getLogger("gpu-router.supervisor")

IDLE_EXIT_S = 60.0
# a launched job's steps may raise this many times in a row, for this long, before it is stopped
STEP_ERRORS_MAX, STEP_ERRORS_FOR_S = 30, float(os.environ.get("GPU_ROUTER_STEP_ERRORS_FOR_S", 300))
# Jobs that simply run are looked at this many a tick at most, the ones looked at longest ago
# first: with hundreds of jobs each is then seen every few seconds instead of every one of
# them every second in one burst that would hold the loop (bench/supervise.py measures it).
# Jobs with something to do (placing, starting, cancelling, moving) are stepped every tick.
STEADY_PER_TICK = int(os.environ.get("GPU_ROUTER_STEADY_PER_TICK", 150))


# -- the loop ------------------------------------------------------------------------------


class Supervisor(JobSteps, JobMoves, JobWatch, QueueWait, SlotMoves, CheckpointCopies):
    """The loop: each tick reads the live jobs that changed and starts one step for each that is
    not mid-step (jobsteps.py: one job's step; jobmoves.py: moving it; jobwatch.py: metrics,
    hours and kill rules; queuewait.py: a job that does not start within queue_timeout_s;
    reroute.py: a job waiting for a slot that another target can start now)."""

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
        self._copies: dict[str, Copy] = {}  # job id -> its checkpoint copy home in flight (ckptcopy.py)
        self._ckpt_asked: dict[str, int] = {}  # "job id:attempt" -> the newest frozen generation a poll showed
        self._rules_at: dict[str, float] = {}  # job id -> when its kill rules last read history
        self._step_errors: dict[str, tuple[int, float]] = {}  # job id -> steps that raised in a row, since
        self._sweep: asyncio.Task | None = None
        self._slot_looked: dict[str, tuple] = {}  # job id -> (what was free, when) at its last look (reroute.py)
        self._slot_moving: set[str] = set()  # job ids being routed again for a free slot elsewhere
        self._slot_lock = asyncio.Lock()
        self.notifier = Notifier()  # tells the person (notify: in the user config); notify.py

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
        await self._notify()  # the moves of the last steps too
        await asyncio.to_thread(self.notifier.drain)
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
            self._configure_notify()
        jobs = await self._live_jobs()
        load: dict[str, int] = {}
        placed: dict[str, int] = {}  # routing jobs not started this tick: each takes a slot there
        waiting: list[Job] = []  # jobs waiting for a slot on their target (reroute.py)
        group_load: dict[str, int] = {}  # a sweep's points started: at most its max_parallel
        for job in jobs:
            if job.state in LAUNCHED:
                load[job.provider or ""] = load.get(job.provider or "", 0) + 1
            elif job.state == State.ROUTING:
                placed[job.provider or ""] = placed.get(job.provider or "", 0) + 1
            if job.group_id and (job.state in LAUNCHED or (job.state == State.ROUTING and job.id in self.busy
                                                            and job.id not in self._slot_moving)):
                group_load[job.group_id] = group_load.get(job.group_id, 0) + 1  # mid-start counts
        for job in self._this_tick(jobs):
            if job.state == State.ROUTING:
                most = (job.plan.get("group") or {}).get("max_parallel") if job.group_id else None
                if most is not None and group_load.get(job.group_id or "", 0) >= most:
                    continue  # its sweep runs max_parallel points already: it waits its turn
                provider = self.providers.get(job.provider or "")
                if provider is None or not getattr(provider, "enabled", True):
                    await self.db(self._replan, job, f"target {job.provider!r} is no longer "
                                      + ("configured" if provider is None else "enabled"))
                    continue
                if load.get(job.provider, 0) >= provider.max_jobs:
                    if await self.db(self._note_waiting, job, provider, load.get(job.provider, 0)):
                        self._spawn(tasks, job, self._slot_timeout(job, provider))  # waited too long
                    else:
                        waiting.append(job)
                    continue
                load[job.provider] = load.get(job.provider, 0) + 1
                placed[job.provider] = placed.get(job.provider, 1) - 1
                if job.group_id:
                    group_load[job.group_id] = group_load.get(job.group_id, 0) + 1
            elif job.state not in LAUNCHED and job.state != State.MIGRATING:
                continue
            self._spawn(tasks, job, self.step(job))
        if waiting:
            self._move_waiting(tasks, waiting, load, placed)  # another target may start them now
        self._sweep_strays()
        if tasks:
            await asyncio.wait(set(tasks), timeout=self.tick_s)
        await self._notify()
        return bool(jobs) or strays.keeps_alive(await self.db(self.store.strays), time.time())

    def _configure_notify(self) -> None:
        from core.config.user import load

        try:
            self.notifier.configure(load().notify)
        except UserError:  # said by the rules' reader too; nobody is told until it is fixed
            log.warning("the user config is invalid: no notifications until it is fixed")
            self.notifier.configure([])

    async def _notify(self) -> None:
        """Tell the person about the state moves since the last look (core/engine/notify.py):
        one range read on the store thread; the sending runs on threads of its own."""
        if not self.notifier.urls:
            return
        try:
            moves = await self.db(self.notifier.collect, self.store)
        except Exception:  # noqa: BLE001 - telling must never stop supervising
            log.exception("could not read what to notify")
            return
        if moves:
            self.notifier.dispatch(moves)

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
        steady = [j for j in free if j.state == State.RUNNING and not j.cancel_requested and not j.cancel_checkpoint
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

    def _spawn(self, tasks: set[asyncio.Task], job: Job, work: Any) -> None:
        """Run one job's `work` (a coroutine) as a task, the job marked busy until it ends."""
        self.busy.add(job.id)
        task = asyncio.create_task(self._step_guarded(job, work))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _step_guarded(self, job: Job, work: Any) -> None:
        try:
            with disk_full_guard(paths.home()):
                await work
            self._step_errors.pop(job.id, None)
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
                else:
                    await self._failing_watch(fresh, exc)
            except Exception:  # noqa: BLE001
                log.exception("job %s: could not record the failure", job.short_id)
        finally:
            self.busy.discard(job.id)

    async def _failing_watch(self, job: Job, exc: Exception) -> None:
        """A launched job whose every step raises (something it wrote that gpu-router cannot
        read, say) would hold its target's slot forever, uncancellable: after STEP_ERRORS_MAX in
        a row over STEP_ERRORS_FOR_S (a passing fault is outlasted) it is stopped and fails,
        saying why."""
        errors, since = self._step_errors.get(job.id, (0, time.time()))
        self._step_errors[job.id] = (errors := errors + 1, since)
        if errors < STEP_ERRORS_MAX or time.time() - since < STEP_ERRORS_FOR_S:
            return
        self._step_errors.pop(job.id, None)
        provider = self.providers.get(job.provider or "")
        if provider is not None:
            try:
                await provider.cancel(job, force=True)
            except Exception:  # noqa: BLE001 - it fails all the same; the target may be gone
                log.exception("job %s: could not stop it", job.short_id)
        await self.db(self._fail, job, f"gpu-router could not follow it: {STEP_ERRORS_MAX} steps in a row "
                                       f"failed ({type(exc).__name__}: {str(exc)[:300]}); it was stopped")

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
