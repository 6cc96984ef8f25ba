"""Moving a job: resuming it on the target that ended its session, or migrating it to another
(planned again without the lost one, under the approval rules again, from the checkpoint at
home), and stopping the attempt left behind (core/engine/strays.py). A mixin of
`core.engine.supervisor.Supervisor`, beside jobsteps.py.
"""

from __future__ import annotations

import asyncio
import time

from core.engine import strays
from core.engine.jobsteps import carried_over, log_mark
from core.engine.service import replan
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.packaging import checkpoints

MIGRATE_RETRY_S = 15.0  # a moving job with no target that fits plans again this often


class JobMoves:
    """The supervisor's moves of a job between targets (see the module's docstring)."""

    async def _resume(self, job: Job) -> None:
        """A migrating job whose target can take it back starts its next attempt there."""
        if job.cancel_requested or job.cancel_checkpoint:
            await self.db(self.store.transition, job.id, State.CANCELLED, "cancelled while between sessions")
            return
        if not job.handle.get("resume_same_target"):
            await self._migrate(job)
            return
        provider = self.providers.get(job.provider or "")
        if provider is None:
            return
        retry = job.handle.get("retry_exit")
        carried = carried_over(job.handle)
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
        fresh = bool(job.handle.get("never_ran"))  # moved out of a queue before it ever ran
        if ckpt is None and restart != "allow" and not fresh:
            await self.db(self._fail, job, f"{why}; no complete checkpoint came home, and it would start again "
                            "from the beginning, which its request does not allow "
                            "(set restart: allow in gpu.yaml to allow it)")
            return
        exclude = {src: f"{src} lost the job's session ({why})"} if src else {}
        if job.handle.get("queue_moved"):  # out of a queue: not where it timed out, now or before
            exclude = dict(job.handle.get("queue_excluded") or exclude)
        try:
            moved = await asyncio.to_thread(replan, self.store, job, why, exclude)
        except UserError as exc:
            wait = f"{why}; waiting for a target that fits: {exc.what}"
            await self.db(self.store.update, job.id, reason=wait[:2000], handle={
                **job.handle, "migrate_retry_at": time.time() + MIGRATE_RETRY_S})
            return
        if moved.state == State.AWAITING_APPROVAL:
            # the hold keeps where it came from; the approval resumes it through _launch
            await self.db(self.store.update, job.id, handle={**carried_over(job.handle), "migrations": moves + 1,
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
        start = ("from " + checkpoints.describe(ckpt) if ckpt else
                 "from the beginning (it had not started)" if fresh else "from the beginning (restart: allow)")
        text = f"migrating from {src} to {provider.name}: {why}, {start}"
        job = await self.db(self.store.transition,
            job.id, State.PROVISIONING, text, expect=[State.MIGRATING], attempt=job.attempt + 1,
            exit_code=None, metrics_offset=0,  # the new target's metrics file starts empty
            data={"from": src, "to": provider.name, "why": why, "checkpoint": ckpt},
            handle={**carried_over(job.handle), "migrations": moves + 1, "migrated_from": src,
                    "restore_checkpoint": ckpt is not None, "resumes": 0,
                    "log_base": log_mark(job, f"moved from {src} to {provider.name}: {why}")})
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
