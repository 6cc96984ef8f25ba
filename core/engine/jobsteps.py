"""One job's step, as the supervisor takes it each tick: poll it and act on what the target says.

Placing and starting an attempt, a dropped connection and a session the target ended, a
cancel (then a forced one), the job's end (its outputs home, its last checkpoint settled, a
retry when its exit code asks for one) and the hold of a job stopped past its hours. A mixin
of `core.engine.supervisor.Supervisor`, which holds the store, the store thread (`self.db`)
and the providers; moving a job is in jobmoves.py, metrics and kill rules in jobwatch.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

from core import paths
from core.config.user import load
from core.display.sanitize import printable
from core.engine import storage
from core.engine.failure import failed_reason
from core.engine.cancelling import CHECKPOINT_GRACE_S, MAX_CHECKPOINT_GRACE_S
from core.engine.jobfiles import bring_home, outputs_where, settle_checkpoint
from core.engine.jobreport import end_warnings, write_job_json
from core.engine.service import hold
from core.engine import doors
from core.engine.doors import replan
from core.errors import DiskFull, IllegalTransition, UserError
from core.jobs.states import LAUNCHED, State
from core.jobs.store import Job
from core.packaging import checkpoints
from core.planning.usage import job_hours
from core.providers.base import Poll
from core.runtime import workdir
from core.runtime.diskspace import says_disk_full
from core.secrets.launch import secrets_for_launch

log = logging.getLogger("gpu-router.supervisor")

CANCEL_GRACE_S = 10.0
UNREACHABLE_GRACE_S = 600.0  # a host away longer than this has lost the job's session
MAX_RESUMES = 3  # session ends (time limits, preemption) resumed on the same target
# what a job's handle keeps from one attempt to the next (counters, and where it came from)
CARRIED = ("resumes", "retries", "migrations", "migrated_from", "restore_checkpoint", "log_base",
           "queue_excluded", "queue_note", "metrics_offsets")
# what a handle says while an attempt waits in a queue (core/engine/queuewait.py), dropped once it runs
QUEUE_WAIT = ("queued_since", "queue_stuck", "queue_retry_at")


class JobSteps:
    """The per-job half of the supervisor (see the module's docstring)."""

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
        elif job.cancel_checkpoint:
            await self._checkpoint_then_cancel(job, provider)
            job = await self.db(self.store.get, job.id)
        if job.id not in self.verified:
            if hasattr(provider, "is_ours"):
                poll = await provider.poll(job)
                if poll.phase in ("running", "provisioning") and not await asyncio.to_thread(provider.is_ours, job) \
                        and job.handle.get("launched_at", 0) < time.time() - 30:
                    # a reboot, say: the launcher is gone and its pid went to another program
                    await self._launcher_gone(job, provider, Poll(
                        "lost", vanished=True, detail=f"the launcher on {provider.name} is gone (its process "
                        "id now belongs to another program) and left no exit record: the session ended"))
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
        if poll.checkpoint is not None and poll.phase == "running" \
                and job.state in (State.RUNNING, State.CHECKPOINTING):
            await self._mirror_new_generation(job, provider, poll.checkpoint)
        if job.handle.get("unreachable_since"):
            await self.db(self.store.update, job.id, handle={k: v for k, v in job.handle.items() if k != "unreachable_since"},
                              reason=f"{provider.name} is reachable again")
            job = await self.db(self.store.get, job.id)
        if poll.phase == "session_ended":
            await self._session_ended(job, provider, poll)
            return
        if poll.phase == "running" and any(k in job.handle for k in QUEUE_WAIT):
            job = await self.db(self.store.update, job.id, handle={
                k: v for k, v in job.handle.items() if k not in QUEUE_WAIT})
        if poll.queued and poll.phase == "provisioning":
            job = await self._queued(job, provider, poll)  # core/engine/queuewait.py
            if job is None:
                return  # waited past the target's queue_timeout_s: moving elsewhere
            if job.handle.get("queue_stuck"):  # keep saying why it stays
                poll = Poll(poll.phase, poll.exit_code, job.handle["queue_stuck"][:2000], poll.queued)
        if poll.phase == "running" and job.state == State.PROVISIONING:
            await self.db(self.store.usage_start, job.id, job.attempt, provider.name,
                                   float(job.plan.get("price_per_hour") or 0), at=poll.started_at)
            await self.db(self.store.transition, job.id, State.RUNNING, "started", expect=[State.PROVISIONING])
        elif poll.phase == "provisioning" and poll.detail and poll.detail != job.reason:
            await self.db(self.store.update, job.id, reason=poll.detail)  # why it waits: "queued: Resources"
        elif poll.phase in ("exited", "lost", "cancelled"):
            if hasattr(provider, "sync_log"):  # what it wrote between the mirror above and its end
                await provider.sync_log(job)
            await self._ingest_metrics(await self.db(self.store.get, job.id), provider)
            if poll.vanished:  # the session ended, not the script: it resumes (jobmoves.py)
                await self._launcher_gone(await self.db(self.store.get, job.id), provider, poll)
                return
            await self._finish(await self.db(self.store.get, job.id), provider, poll)
        elif poll.phase == "running":
            await self._check_kill_rules(await self.db(self.store.get, job.id), provider)
            await self._check_overrun(await self.db(self.store.get, job.id), provider)

    async def _unreachable(self, job: Job, poll: Poll, provider: Any) -> None:
        """A dropped connection is not a failed job: wait, and only after the grace call the
        session lost (the job then waits in `migrating`, saying why). The grace counts from
        when the host stopped answering (the start of the first call it left unanswered, as
        the transport saw it), not from when that call finally gave up: a silent host is lost
        within its grace plus a tick or two."""
        now = time.time()
        since = job.handle.get("unreachable_since") or min(now, silent_since(provider) or now)
        grace = float(getattr(provider, "unreachable_grace_s", None) or UNREACHABLE_GRACE_S)
        waited = time.time() - since
        if waited > grace and job.state != State.MIGRATING:
            await self._stop_copy(job.id)  # what still comes from the lost host is not kept
            await self.db(self.store.usage_end, job.id, job.attempt)
            why = f"{job.provider} unreachable for {ago(waited)} ({poll.detail})"
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
        if job.cancel_requested or job.cancel_checkpoint:
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

    async def _launch(self, job: Job) -> None:
        provider = self.providers[job.provider]
        # the last door of every other: the job's history and its plan's holds judged once more
        # (core/engine/doors.py), so no door that forgot can run what a rule would hold
        try:
            verdict = await self.db(doors.judge, self.store, job, job.plan, door=doors.LAUNCH,
                                    interactive=job.plan.get("submitted_by") == "person",
                                    cfg=SimpleNamespace(rules=self.rules()))
        except UserError as exc:  # denied: never run
            await self.db(self._fail, job, f"not started: {exc.what}")
            return
        if verdict.held:
            await self.db(hold, self.store, job, verdict.holds, kind=verdict.kind, plan=verdict.plan)
            return
        carried = carried_over(job.handle)  # a job moved here after an approval keeps its counters
        text = f"placed on {provider.name}"
        if job.handle.get("moving"):
            ckpt = checkpoints.summary(job.id) if carried.get("restore_checkpoint") else None
            text = (f"migrating from {carried['migrated_from']} to {provider.name} (approved), from "
                    + (checkpoints.describe(ckpt) if ckpt else "the beginning"))
        moved = {}
        if job.handle.get("moving"):  # held while it moved, now approved: it starts afresh there
            moved = {"metrics_offset": metrics_offset_for(
                job, self.providers.get(carried["migrated_from"] or ""), provider, carried)}
            carried["log_base"] = log_mark(job, f"moved from {carried['migrated_from']} to {provider.name}")
        data = None
        if job.handle.get("resuming"):  # gpu resume: its checkpoint comes back home first
            resumed = await self._resumed(job, provider, carried)
            if resumed is None:
                return
            text, data, more = resumed
            moved.update(more)
        job = await self.db(self.store.transition, job.id, State.PROVISIONING, text, expect=[State.ROUTING],
                                    attempt=job.attempt + 1, handle=carried, exit_code=None, data=data, **moved)
        await self._start_attempt(job, provider)

    async def _resumed(self, job: Job, provider: Any, carried: dict) -> tuple[str, dict, dict] | None:
        """A resumed job (core/engine/resume.py) is placed: its settled checkpoint moves back
        home for the launch to restore, and its log says so. Returns (the event's text, its
        data, fields to set), or None when the checkpoint no longer checks out (then it failed
        again, saying why)."""
        res = job.handle["resuming"]
        try:
            ckpt = await asyncio.to_thread(checkpoints.reclaim, job.id, outputs_where(job))
        except UserError as exc:
            await self.db(self._fail, job, f"not resumed: {exc.what}")
            return None
        carried["restore_checkpoint"] = ckpt is not None
        start = ("from " + checkpoints.describe(ckpt)) if ckpt else "from the beginning (restart: allow)"
        text = f"resuming on {provider.name} (resumed by {res.get('by')}) {start}"
        log = paths.jobs_dir() / job.id / "job.log"
        before = log.stat().st_size if log.exists() else 0
        mark = log_mark(job, f"resumed by {res.get('by')} on {provider.name}, {start}")
        fields: dict = {}
        if res.get("from_target") == provider.name:  # the target's own log goes on after the mark
            carried["log_base"] = int(carried.get("log_base") or 0) + (mark - before)
        else:  # a new target's log starts empty; its metrics file may not (metrics_offset_for)
            carried["log_base"] = mark
            fields["metrics_offset"] = metrics_offset_for(
                job, self.providers.get(res.get("from_target") or ""), provider, carried)
        return text, {"by": res.get("by"), "checkpoint": ckpt, "to": provider.name}, fields

    async def _start_attempt(self, job: Job, provider: Any) -> None:
        try:
            env_secrets = secrets_for_launch(job)
        except UserError as exc:
            await self.db(self._fail, job, exc.message())
            return
        donor = await self.db(self.store.code_donor, job)
        if donor:  # for this launch only (not carried): whose ended code folder it may reuse
            job.handle = {**job.handle, "code_from": donor}
        try:
            handle = await provider.launch(job, env_secrets)
        except DiskFull as exc:
            await self.db(self._fail, job, exc.what)
            return
        except Exception as exc:  # noqa: BLE001
            log.exception("job %s: launch failed", job.short_id)
            await self.db(self._fail, job, f"could not start on {provider.name}: {exc}")
            return
        notes = handle.pop("notes", None) or []  # what the provider did to start it (its dependencies)
        await self.db(self.store.update, job.id, handle={**carried_over(job.handle), **handle})
        for note in notes:
            await self.db(self.store.add_event, job.id, note, actor="supervisor")
        await self.db(self.store.add_event, job.id, f"attempt {job.attempt} started on {provider.name}",
                             data={"attempt": job.attempt})

    async def _checkpoint_then_cancel(self, job: Job, provider: Any) -> None:
        """`gpu cancel --checkpoint` (cancelling.cancel): ask the job to save, as before a
        session's end (gpu.should_checkpoint()); once a checkpoint newer than the one home had
        came home, or after the grace, ask for the stop (`cancel_requested`: `_cancel`)."""
        req = dict(job.handle.get("cancel_checkpoint") or {})  # defaults if a racing write lost it
        now = time.time()
        grace = min(float(req.get("grace_s") or CHECKPOINT_GRACE_S), MAX_CHECKPOINT_GRACE_S)
        if not req.get("asked_at"):
            try:
                await provider.request_checkpoint(job)
            except Exception as exc:  # noqa: BLE001 - it is stopped after the grace all the same
                log.info("job %s: checkpoint request failed: %s", job.short_id, exc)
            home = checkpoints.summary(job.id)
            req = {"by": "?", "grace_s": grace, "home_generation": home and home["generation"],
                   **req, "asked_at": now}
            text = (f"asked to checkpoint before it is cancelled (by {req['by']}); stopped once the "
                    f"checkpoint is home, or after {grace:g} s")
            if job.state == State.RUNNING:
                await self.db(self.store.transition, job.id, State.CHECKPOINTING, text, expect=[State.RUNNING],
                              handle={**job.handle, "cancel_checkpoint": req})
            else:
                await self.db(self.store.update, job.id, handle={**job.handle, "cancel_checkpoint": req})
                await self.db(self.store.add_event, job.id, text)
            return
        await self._mirror(job, provider, force=True)
        home = checkpoints.summary(job.id)
        before = req.get("home_generation")
        if home is not None and home.get("generation") is not None and (
                before is None or int(home["generation"]) > int(before)):
            text = f"{checkpoints.describe(home)} came home: stopping it (cancel)"
        elif now - float(req["asked_at"]) > grace:
            text = (f"no newer checkpoint came home within {grace:g} s: stopping it (cancel); "
                    f"home keeps {checkpoints.describe(home)}")
        else:
            past = await self._past_overrun(job)  # a grace never outlives the overrun rule
            if past is None:
                return
            text = (f"{past} during its checkpoint grace: stopping it now (cancel); "
                    f"home keeps {checkpoints.describe(home)}")
        await self.db(self.store.update, job.id, cancel_requested=1)
        await self.db(self.store.add_event, job.id, text, data={"checkpoint": home})

    async def _past_overrun(self, job: Job) -> str | None:
        """Why the job is past the overrun rule (hours x overrun_factor), or None."""
        hours = job.plan.get("hours")
        if not hours:
            return None
        factor = self.rules().overrun_factor
        used = await self.db(job_hours, self.store, job.id)
        if used <= float(hours) * factor:
            return None
        return f"ran {used:.3g} h, past its {float(hours):g} h estimate (x{factor:g})"

    async def _cancel(self, job: Job, provider: Any) -> None:
        sent = job.handle.get("cancel_sent_at")
        now = time.time()
        if sent is None:
            await provider.cancel(job)
            await self.db(self.store.update, job.id, handle={**job.handle, "cancel_sent_at": now})
        elif now - sent > CANCEL_GRACE_S and not job.handle.get("cancel_forced"):
            await provider.cancel(job, force=True)
            await self.db(self.store.update, job.id, handle={**job.handle, "cancel_forced": True})

    async def _finish(self, job: Job, provider: Any, poll: Poll) -> None:
        if job.handle.get("launched_at"):
            # an attempt that ended before a poll saw it run still ran: count it from its
            # launch (a no-op when its usage row exists), so its hours and cost are not zero
            await self.db(self.store.usage_start, job.id, job.attempt, provider.name,
                                   float(job.plan.get("price_per_hour") or 0),
                                   at=job.handle.get("billed_from") or job.handle["launched_at"])
        await self.db(self.store.usage_end, job.id, job.attempt)
        if job.handle.get("overrun_at") and not job.cancel_requested and (
                poll.exit_code == 0 or job.handle.get("overrun_stop_sent")):
            # what it wrote so far comes home now: a person may deny it and never resume it
            notes = await bring_home(self.store, job, provider)
            await self.db(self._hold_overrun, job, notes)
            return
        kill = job.handle.get("kill")
        if job.cancel_requested or job.cancel_checkpoint:
            dst, reason = State.CANCELLED, "cancelled by request" + (
                " after it was asked to checkpoint" if job.handle.get("cancel_checkpoint") else "")
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
            # its own error (the traceback's last line) from the log's end: core/engine/failure.py
            reason = await asyncio.to_thread(failed_reason, job, poll.exit_code, poll.detail)
            dst = State.FAILED
        notes = await bring_home(self.store, job, provider)
        # its last checkpoint, kept as an output; a job that exited 0 by itself wrote its last
        # save whole, so an unmarked folder's one look after its end counts (checkpoints.mirror)
        await self._mirror(job, provider, force=True, ended=poll.exit_code == 0)
        kept = await asyncio.to_thread(settle_checkpoint, self.store, job)
        if kept:
            notes = [*notes, kept]
        stayed = await self._stayed(job, provider)
        # a job that ended before a poll saw it run (provisioning -> done) still ran: its time
        # counts from its launch (ELAPSED, cost), not "-"
        began = {} if job.started_at is not None else {
            "started_at": job.handle.get("launched_at") or job.updated_at}
        if stayed:  # kept with the ending itself: whoever sees the job ended (gpu cancel) sees it
            began["handle"] = {**(await self.db(self.store.get, job.id)).handle, "stayed": stayed}
        await self.db(self.store.transition, job.id, dst, reason, expect=LAUNCHED, exit_code=poll.exit_code,
                              data={"notes": notes} if notes else None, **began)
        await self._say_end_warnings(job)
        if stayed:
            await self.db(self.store.add_event, job.id, stayed, actor="supervisor")
        await asyncio.to_thread(write_job_json, self.store, await self.db(self.store.get, job.id))
        self._enforce_caps(provider)

    async def _say_end_warnings(self, job: Job) -> None:
        """Declared outputs it did not write, no metric logged: kept for status and job.json,
        and each a warning event (jobreport.end_warnings); the job's end stays what it is."""
        fresh = await self.db(self.store.get, job.id)
        tracked = bool(fresh.final) or bool(await self.db(self.store.metrics_summary, job.id))
        fields, texts = await asyncio.to_thread(end_warnings, fresh, tracked)
        await self.db(self.store.update, job.id, handle={**fresh.handle, "ended": fields})
        for text in texts:
            await self.db(self.store.add_event, job.id, text, actor="supervisor", data=fields)

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
        history = doors.past(self.store, job)  # the hours granted so far, not the plan's alone
        history.granted = history.granted or job.plan["hours"]
        plan = doors.offer(job.plan, history)
        hold(self.store, job, [doors.overrun_hold(history, stopped=True)], kind="overrun", plan=plan,
             exit_code=None)
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


def silent_since(provider: Any) -> float | None:
    """When the provider's host stopped answering, where its transport tracks it (SSH)."""
    ask = getattr(getattr(provider, "transport", None), "silent_since", None)
    return ask() if callable(ask) else None


def carried_over(handle: dict) -> dict:
    """What a job's handle keeps from one attempt to the next (CARRIED)."""
    return {k: handle[k] for k in CARRIED if k in handle}


HOME_METRICS = "home"  # the job's own jobs/<id>/metrics.jsonl, read where a target says metrics_at_home


def metrics_stream(provider: Any) -> str | None:
    """Which file a target's `read_metrics` reads for a job: HOME_METRICS for the job's own
    metrics.jsonl at home (the local target's job appends to it; Kaggle, Modal and SkyPilot
    join their attempts' rows into it: core/providers/logmirror.py), else the target's name
    (a remote host's own file in its root). None for a target no longer configured."""
    if provider is None:
        return None
    return HOME_METRICS if getattr(provider, "metrics_at_home", False) else provider.name


def metrics_offset_for(job: Job, src: Any, dst: Any, carried: dict) -> int:
    """Where the read of the job's metrics begins on `dst`, its new target, after an attempt
    on `src` (providers; None for one no longer configured). The offset is a byte offset into
    the one file `dst` reads, which only grows, so it may not start at 0 after a move: home's
    file holds the rows of every attempt at home (the local target's, a mirrored target's), a
    host's file those of its own earlier attempts, and a read from the top stored them all
    again. So the offset each file was read to is kept in `carried["metrics_offsets"]` (saved
    in the same write as the move: a supervisor restarted after it reads on from there), and
    the read goes on where that file's read stopped (rows written there after the last read
    are not lost); a home file never read under this rule (a job moved before it, or from a
    target since removed) at its end now, where every row came from an attempt already read;
    a host's file never read at 0 (it starts empty)."""
    offsets = dict(carried.get("metrics_offsets") or {})
    old, new = metrics_stream(src), metrics_stream(dst)
    if old is not None:
        offsets[old] = job.metrics_offset
    carried["metrics_offsets"] = offsets
    if new in offsets:  # the file it was read from last (the same one, where `new` is `old`)
        return int(offsets[new])
    if new == HOME_METRICS:
        try:
            return (paths.jobs_dir() / job.id / "metrics.jsonl").stat().st_size
        except OSError:
            return 0
    return 0


def log_mark(job: Job, text: str) -> int:
    """A line in the job's log saying it moved; returns the log's size after it, where the
    new target's own log begins in the local mirror (RemoteProvider.sync_log)."""
    path = paths.jobs_dir() / job.id / "job.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(f"\n[gpu-router] {printable(text)}\n".encode())
        return f.tell()


def ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
