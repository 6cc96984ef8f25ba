"""Attempts left behind when a job moved: stopped when their target answers again.

A target declared lost may only have been cut off: its copy of the job can still be running,
using the GPU and writing to its own folder, while the job goes on elsewhere. A single stop at
the moment of the move fails exactly when it matters (the target is away: that is why the job
moved). So each attempt left behind is a row in the store (`strays`) that every supervisor
sweeps, waiting longer between looks, until the target says the attempt no longer runs; the
job's events then say what happened to it. Rows outlive the supervisor that wrote them and the
job's own end; a target that stays away for GIVE_UP_S is given up on, and the events say that.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable

from core.jobs.store import NotFound, Store, Stray

log = logging.getLogger("gpu-router.supervisor")

FIRST_RETRY_S = 5.0  # an unreachable target is asked again after this, doubling each time
MAX_RETRY_S = 120.0
CONFIRM_S = 3.0  # after a stop is sent, look again this soon
GIVE_UP_S = 7 * 86400.0
KEEP_ALIVE_S = 3600.0  # a supervisor with no live job keeps sweeping this long after a move
ASK_TIMEOUT_S = 60.0
STILL_RUNNING = ("running", "provisioning")

Call = Callable[..., Awaitable[Any]]


async def sweep(db: Call, store: Store, providers: dict[str, Any], now: float | None = None) -> None:
    """One look at every stray attempt that is due, all at once (each bounded in time)."""
    now = time.time() if now is None else now
    due = await db(store.strays, due_by=now)
    await asyncio.gather(*(_look(db, store, providers, s, now) for s in due))


def pending(store: Store) -> list[dict[str, Any]]:
    """The attempts still to be stopped, for `gpu daemon --status`."""
    now = time.time()
    return [{"job": s.job_id, "attempt": s.attempt, "target": s.target, "since": s.since,
             "stop_sent": s.stop_sent is not None, "looks": s.tries,
             "next_look_in_s": round(max(0.0, s.next_try - now), 1)} for s in store.strays()]


def keeps_alive(strays: list[Stray], now: float) -> bool:
    """A supervisor with nothing else to do stays for strays moved away from recently."""
    return any(now - s.since < KEEP_ALIVE_S for s in strays)


async def _look(db: Call, store: Store, providers: dict[str, Any], stray: Stray, now: float) -> None:
    where = f"attempt {stray.attempt} left on {stray.target} when the job moved"
    try:
        job = await db(store.get, stray.job_id)
    except NotFound:  # the job was removed: its rows went with it
        return
    provider = providers.get(stray.target)
    if provider is None:
        await _wait(db, store, stray, now, f"target {stray.target!r} is no longer configured")
        return
    old = dataclasses.replace(job, attempt=stray.attempt, handle=stray.handle, provider=stray.target)
    try:
        poll = await asyncio.wait_for(provider.poll(old), ASK_TIMEOUT_S)
        phase, detail = poll.phase, poll.detail
    except Exception as exc:  # noqa: BLE001 - a target that cannot answer is asked again later
        phase, detail = "unreachable", str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if phase in STILL_RUNNING:
        try:
            await asyncio.wait_for(provider.cancel(old, force=True), ASK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            await _wait(db, store, stray, now, f"it still runs, and stopping it failed: {exc}")
            return
        log.info("job %s: %s still ran there; stopped it", job.short_id, where)
        await db(store.stray_tried, stray.job_id, stray.attempt, now + CONFIRM_S, stop_sent=now)
        return
    if phase == "unreachable":
        await _wait(db, store, stray, now, detail)
        return
    note = (f"{where} was stopped once {stray.target} answered again" if stray.stop_sent
            else f"{where} had already ended there ({phase})")
    log.info("job %s: %s", job.short_id, note)
    await db(store.drop_stray, stray.job_id, stray.attempt, note)


async def _wait(db: Call, store: Store, stray: Stray, now: float, why: str) -> None:
    if now - stray.since > GIVE_UP_S:
        note = (f"gave up stopping attempt {stray.attempt} on {stray.target} after "
                f"{GIVE_UP_S / 86400:.0f} days ({why}); if that target comes back, its copy "
                f"may still run: stop it there by hand")
        await db(store.drop_stray, stray.job_id, stray.attempt, note)
        return
    pause = min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** min(stray.tries, 16))
    await db(store.stray_tried, stray.job_id, stray.attempt, now + pause)
