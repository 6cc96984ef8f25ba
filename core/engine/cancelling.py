"""Cancelling a job, at once or after it saved a checkpoint, with the grace's bounds.

`gpu cancel`, the dashboard, the MCP tools and a sweep's cancel all stop a job here: the
request is recorded in the store for the supervisor to act on (core/engine/jobsteps.py), so
the grace a job gets to checkpoint is bounded and never started over, whichever front asks.
"""

from __future__ import annotations

import time

from core.errors import UserError
from core.jobs.records import CANCEL_AFTER_CHECKPOINT
from core.jobs.states import LAUNCHED, TERMINAL, State
from core.jobs.store import Job, Store
from core.packaging import checkpoints


CHECKPOINT_GRACE_S = 60.0  # `gpu cancel --checkpoint`: how long the job has to save
# The most a cancel's checkpoint grace may be, at every front. A job asked to save goes on
# running (and costing) meanwhile: a grace of a day was a way round the overrun rule.
MAX_CHECKPOINT_GRACE_S = 300.0


def cancel(store: Store, ref: str, *, actor: str = "cli", wait_s: float = 15.0,
           checkpoint: bool = False, grace_s: float = CHECKPOINT_GRACE_S) -> Job:
    """Stop a job and record it cancelled; waits up to `wait_s` for it to end.

    With `checkpoint`, a running job is first asked to save (the request
    gpu.should_checkpoint() sees when a session nears its end); the supervisor stops it once
    a checkpoint newer than the one home held came home, or after `grace_s` (jobsteps.py
    `_checkpoint_then_cancel`). A job not running yet has nothing to save: it is cancelled.

    The grace is bounded (MAX_CHECKPOINT_GRACE_S, and the overrun rule: the supervisor stops a
    job that runs past its hours x overrun_factor in its grace), and asking again keeps the
    grace first asked for: a repeated request never starts it over."""
    job, wait_s = record(store, ref, actor=actor, wait_s=wait_s, checkpoint=checkpoint, grace_s=grace_s)
    if job.state in TERMINAL:
        return job
    from core.engine.daemon import ensure_running

    ensure_running()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        job = store.get(job.id)
        if job.state in TERMINAL:
            break
        time.sleep(0.1)
    return job


def check_grace(grace_s: float) -> None:
    if not 0 <= grace_s <= MAX_CHECKPOINT_GRACE_S:
        raise UserError(f"a checkpoint grace of {grace_s:g} s is out of range: at most "
                        f"{MAX_CHECKPOINT_GRACE_S:g} s", fix=f"pass --grace between 0 and {MAX_CHECKPOINT_GRACE_S:g}")


def record(store: Store, ref: str, *, actor: str, wait_s: float, checkpoint: bool,
           grace_s: float) -> tuple[Job, float]:
    """Record the cancel in the store without starting the supervisor: (job, how long to wait).

    A sweep records every point's cancel before the supervisor starts: started after the first,
    it once failed the others (their target gone) before their cancel was recorded."""
    check_grace(grace_s)
    job = store.resolve(ref)
    if job.state in TERMINAL:
        raise UserError(f"job {job.short_id} already ended ({job.state.value})",
                        fix="nothing to cancel")
    with store.write():
        job = store.get(job.id)
        if job.state not in LAUNCHED:
            return store.transition(job.id, State.CANCELLED, f"cancelled by {actor}", actor=actor), 0.0
        asked = job.handle.get("cancel_checkpoint") or {}
        if checkpoint and (job.cancel_requested or job.cancel_checkpoint):  # being stopped: no fresh grace
            started = float(asked.get("asked_at") or asked.get("at") or time.time())
            kept = (f"the grace asked for at {time.strftime('%H:%M:%S', time.localtime(started))} "
                    f"({float(asked.get('grace_s') or CHECKPOINT_GRACE_S):g} s) is kept, not started over"
                    if job.cancel_checkpoint else "it is already being stopped")
            store.add_event(job.id, f"cancel with a checkpoint asked again by {actor}: {kept}", actor=actor)
            wait_s = max(0.0, min(wait_s, started + float(asked.get("grace_s") or 0) + 30.0 - time.time()))
        elif checkpoint and job.state in (State.RUNNING, State.CHECKPOINTING):
            ckpt = checkpoints.summary(job.id)
            store.update(job.id, cancel_requested=CANCEL_AFTER_CHECKPOINT, handle={**job.handle, "cancel_checkpoint": {
                "by": actor, "at": time.time(), "grace_s": grace_s,
                "home_generation": ckpt["generation"] if ckpt else None}})
            store.add_event(job.id, f"cancel requested by {actor}: asking it to checkpoint first "
                                    f"(stopped once the checkpoint is home, or after {grace_s:g} s)",
                            actor=actor, data={"grace_s": grace_s, "checkpoint": ckpt})
            wait_s = max(wait_s, grace_s + 30.0)
        else:
            store.update(job.id, cancel_requested=1)
            store.add_event(job.id, f"cancel requested by {actor}" + (
                f" ({job.state.value}: not running yet, so nothing to checkpoint)" if checkpoint else ""),
                actor=actor)
    return job, wait_s
