"""A full disk at home pauses a job's checkpoint mirroring, and room at home resumes it.

Why a module of its own: what home takes is bounded before anything moves, and home must keep
RESERVE_BYTES free after a checkpoint (the store, logs, other jobs' outputs live there too). A
full disk at home is said once (an event, and a line in `gpu status`: `paused_note`), and
mirroring pauses: it looks at the free space again after BACKOFF_S, doubling, and says when it
resumes; it never retries into the full disk every tick, and nothing is tried on the full disk
while paused, only its free space looked at.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.jobs.store import Event, Job
from core.packaging.checkpoints.home import home_dir, human_bytes
from core.packaging.checkpoints.looks import Say, save_look, tell
from core.runtime.diskspace import disk_full_text, free_bytes

# what a checkpoint coming home must leave free at home (the store, logs, other jobs' outputs)
RESERVE_BYTES = int(os.environ.get("GPU_ROUTER_CKPT_RESERVE_BYTES", 256 << 20))
BACKOFF_S = (30.0, 600.0)  # a paused mirror looks at the free space again after 30 s, doubling to 10 min
PAUSED = "checkpoint mirroring paused: "
RESUMED = "checkpoint mirroring resumed: "


def paused_note(events: list[Event]) -> str | None:
    """The pause `gpu status` shows: the last mirroring event, when it says paused."""
    for e in reversed(events):
        if e.reason.startswith(PAUSED):
            return e.reason
        if e.reason.startswith(RESUMED):
            return None
    return None


async def pause_if_full(job: Job, look: dict, say: Say | None, need: int, now: float,
                        where: Path) -> bool:
    """True, having paused, when `where` has not `need` bytes free beside the reserve."""
    free = free_bytes(where)
    if free is not None and free < need + RESERVE_BYTES:
        await pause(job, look, say, need, now, disk_full_text(where, free))
        return True
    return False


async def pause(job: Job, look: dict, say: Say | None, need: int, now: float, why: str) -> None:
    """Stop mirroring until home has room again; said once (the caller's event)."""
    first = "paused" not in look
    look["paused"] = {"since": now, "need": need, "wait_s": BACKOFF_S[0], "next_try": now + BACKOFF_S[0]}
    save_look(job.id, look)
    if first:
        await tell(say, f"{PAUSED}{why}; it needs {human_bytes(need + RESERVE_BYTES)} free (with the "
                        f"{human_bytes(RESERVE_BYTES)} reserve) and resumes by itself when there is room "
                        "(free space at home, or set max_output_bytes lower)")


async def still_paused(job: Job, look: dict, say: Say | None, now: float) -> bool:
    """While paused: True until the back-off has passed and home has room again (then it says
    it resumes). Only free space is looked at: nothing is tried on the full disk."""
    held = look["paused"]
    if now < float(held.get("next_try", 0)):
        return True
    where = home_dir(job.id).parent
    free = free_bytes(where)
    if free is not None and free < int(held.get("need", 0)) + RESERVE_BYTES:
        held["wait_s"] = min(float(held.get("wait_s", BACKOFF_S[0])) * 2, BACKOFF_S[1])
        held["next_try"] = now + held["wait_s"]
        save_look(job.id, look)
        return True
    look.pop("paused")
    save_look(job.id, look)
    free_text = f"{human_bytes(free)} free at {where}" if free is not None else f"room at {where}"
    await tell(say, f"{RESUMED}{free_text}")
    return False
