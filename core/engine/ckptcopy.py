"""Copies of a job's checkpoints home, each its own task beside the job's step.

A large checkpoint takes a while to come home; while it streams the job's step goes on (its
log, its metrics, its poll: a silent host is still noticed within its grace). When the poll
shows a newer generation while a copy is in flight, the copy in flight gives way to it if it
has not come half way yet (its partial stream and staging are removed), else it lands and the
next poll asks for the newer one. A copy that took the place of one that gave way never gives
way itself: it lands, then the next poll asks for the newest. Without that, a job that saves
faster than one copy takes (its listing and its stream: two commands on the host, slow on a
busy or distant host, before a byte is counted) had every copy superseded before it came half
way, and no checkpoint came home for as long as it ran. So a job that saves faster than its
checkpoint travels gets one home within two copies' time, and one that saves slowly never
waits behind a stale copy. One job never has
two copies at once: the other looks at its checkpoint (the periodic one skips, the ones at the
end of a session wait for the copy in flight first). A job leaving its target stops a copy
still coming from there. A mixin of `core.engine.supervisor.Supervisor`, beside jobsteps.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from core.jobs.store import Job
from core.packaging import checkpoints
from core.packaging.checkpoints import CopyProgress

log = logging.getLogger("gpu-router.supervisor")

SUPERSEDE_BEFORE = 0.5  # a copy in flight gives way to a newer checkpoint until it is this far


@dataclass
class Copy:
    """One copy home in flight: its task, how far it has come, and whether it took the place of
    one that gave way (then it gives way to none: it lands)."""
    task: asyncio.Task
    progress: CopyProgress
    replaced: bool = False


class CheckpointCopies:
    """The supervisor's copies of checkpoints home (see the module's docstring)."""

    _copies: dict[str, Copy]

    async def _mirror(self, job: Job, provider: Any, force: bool = False, ended: bool = False) -> None:
        """Bring the job's last complete checkpoint home (rate-limited; never fails the job).
        With a copy of this job in flight, the periodic look skips and a forced one (the end of
        a session, of the job) waits for it first, then looks again. `ended`: the attempt
        exited 0 by itself and this is the last look (checkpoints.mirror: a folder without a
        marker is looked at twice, so a job that saved right before it ended brings that home)."""
        copy = self._copies.get(job.id)
        if copy is not None and copy.task is not asyncio.current_task() and not copy.task.done():
            if not force:
                return
            await asyncio.wait([copy.task])
        if not checkpoints.due(job.id, self._mirrored, force):
            return
        await self._mirror_now(job, provider, ended=ended)

    async def _mirror_now(self, job: Job, provider: Any, progress: CopyProgress | None = None,
                          ended: bool = False) -> None:
        async def say(text: str) -> None:  # once per fact (checkpoints.mirror keeps count)
            log.info("job %s: %s", job.short_id, text)
            await self.db(self.store.add_event, job.id, text)

        try:
            doc = await checkpoints.mirror(job, provider, say=say, progress=progress, ended=ended)
        except Exception as exc:  # noqa: BLE001 - the host may be away: the next look retries
            log.info("job %s: checkpoint not mirrored: %s", job.short_id, exc)
            return
        if doc is not None:
            log.info("job %s: checkpoint %s came home (%d bytes moved)", job.short_id,
                     doc.get("generation"), doc.get("last_moved", 0))

    async def _mirror_new_generation(self, job: Job, provider: Any, generation: int) -> None:
        """The poll saw a checkpoint generation frozen on the target that was not asked for
        yet: start bringing it home now, in a task of its own (the newest one there when the
        copy starts; one the job pruned before it was pinned gives way to the next), within
        one poll of its save. A copy in flight not yet half way is superseded by it, unless
        that copy already superseded one (two in a row would let a fast saver starve them all)."""
        key = f"{job.id}:{job.attempt}"  # a moved job numbers on from the checkpoint it resumed
        if generation <= self._ckpt_asked.get(key, 0):
            return
        copy = self._copies.get(job.id)
        replacing = copy is not None and not copy.task.done()
        if copy is not None and replacing:
            if copy.replaced or copy.progress.fraction() >= SUPERSEDE_BEFORE:
                return  # it lands (nearly home, or one gave way for it already): the next poll asks for this one
            await self._stop_copy(job.id)
            log.info("job %s: checkpoint %s superseded by %s (%d of %d bytes had come)", job.short_id,
                     copy.progress.generation, generation, copy.progress.moved, copy.progress.expected)
        self._ckpt_asked[key] = generation
        if len(self._ckpt_asked) > 4 * len(self._stepped) + 100:  # ended jobs leave
            self._ckpt_asked = {k: v for k, v in self._ckpt_asked.items() if k.split(":")[0] in self._stepped}
        progress = CopyProgress(generation=generation)
        checkpoints.due(job.id, self._mirrored, True)  # this window's look is this copy
        task = asyncio.get_running_loop().create_task(self._copy(job, provider, progress))
        self._copies[job.id] = Copy(task, progress, replaced=replacing)

    async def _copy(self, job: Job, provider: Any, progress: CopyProgress) -> None:
        try:
            await self._mirror_now(job, provider, progress)
        finally:
            mine = self._copies.get(job.id)
            if mine is not None and mine.task is asyncio.current_task():
                del self._copies[job.id]

    async def _stop_copy(self, job_id: str) -> None:
        """Stop the job's copy in flight, if any, and wait until its partial files are gone
        (a job that left its target: what still comes from there is not its checkpoint)."""
        copy = self._copies.pop(job_id, None)
        if copy is not None and not copy.task.done():
            copy.task.cancel()
            await asyncio.wait([copy.task])
