"""Waiting on a job: until it is placed, until its state changes, or until it ends.

A submit's grace (`gpu submit --wait`, compute_job's start), `gpu wait` and the MCP tools
`gpu_wait` / compute_job's `wait` all block here, reading the store the supervisor writes from
its own process, so every front wakes on the same rule (`woken`) and polls at the same pace.
"""

from __future__ import annotations

import time
from typing import Callable

from core.errors import UserError
from core.jobs.states import TERMINAL, State
from core.jobs.store import Job, Store


def wait_placed(store: Store, job_id: str, wait_s: float) -> Job:
    """Wait until the job is placed, needs approval, ends, or waits for a slot."""
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        job = store.get(job_id)
        placed = job.state not in (State.QUEUED, State.ROUTING) or job.reason.startswith("waiting")
        if placed or time.monotonic() >= deadline:
            return job
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


WAIT_UNTIL = ("change", "end")
WAIT_POLL_S = 0.2  # one indexed read of the store each time
WAIT_TICK_S = 5.0  # how often a long wait tells its caller it is alive
# told (seconds waited, the job as it is now) every WAIT_TICK_S of a wait
Tick = Callable[[float, Job], None]


def woken(job: Job, start: State, until: str) -> bool:
    """Whether a wait that began at state `start` is over. "change": the job is in another
    state or ended. "end": the job ended, or it waits for a person's approval (then nothing
    moves until someone acts, and the agent has to tell its person), not every step between."""
    if job.state in TERMINAL:
        return True
    if until == "end":
        return job.state == State.AWAITING_APPROVAL
    return job.state != start


def wait_job(store: Store, job_id: str, *, until: str = "change", timeout_s: float,
             since: State | None = None, cancelled: Callable[[], bool] | None = None,
             tick: Tick | None = None) -> Job:
    """Block until `woken` (from state `since`, default the job's state now), `timeout_s`
    passes or `cancelled()` turns true; return the job as it is then. The supervisor runs as
    its own process and writes the store: this reads it, one row every WAIT_POLL_S."""
    if until not in WAIT_UNTIL:
        raise UserError(f"until must be one of {', '.join(WAIT_UNTIL)} (got {until!r})",
                        fix="until=\"end\" waits for the job to end; \"change\" for any change of state")
    began = told = time.monotonic()
    job = store.get(job_id)
    start = since or job.state
    while not woken(job, start, until):
        now = time.monotonic()
        if now - began >= timeout_s or (cancelled is not None and cancelled()):
            break
        if tick is not None and now - told >= WAIT_TICK_S:
            told = now
            tick(now - began, job)
        time.sleep(min(WAIT_POLL_S, max(0.0, timeout_s - (now - began))))
        job = store.get(job_id)
    return job
