"""Moving a job: resuming it on the target that ended its session, or migrating it to another
(planned again without the lost one, under the approval rules again, from the checkpoint at
home), and stopping the attempt left behind (core/engine/strays.py). A mixin of
`core.engine.supervisor.Supervisor`, beside jobsteps.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

from core.engine import agentday, strays
from core.engine.jobsteps import carried_over, log_mark, metrics_offset_for
from core.engine import doors
from core.engine.doors import replan
from core.engine.service import hold
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.packaging import checkpoints
from core.providers.base import Poll

log = logging.getLogger("gpu-router.supervisor")

MIGRATE_RETRY_S = 15.0  # a moving job with no target that fits plans again this often
STOP_LEFTOVERS_S = 60.0  # the kill of what a vanished launcher left running, at most


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
        gone = job.handle.get("launcher_gone")
        if gone and (await provider.poll(job)).phase == "unreachable":
            # the launcher vanished and now the host is away too: elsewhere, from home's checkpoint
            job = await self.db(self.store.update, job.id, handle={
                **job.handle, "resume_same_target": False,
                "move_why": f"{gone}, and {provider.name} no longer answers"})
            await self._migrate(job)
            return
        retry = job.handle.get("retry_exit")
        carried = carried_over(job.handle)
        carried.pop("restore_checkpoint", None)  # the target's own ckpt/ is the newest
        if gone:  # each resume after a vanished launcher counts as a move (rules.max_migrations)
            carried["migrations"] = int(job.handle.get("migrations", 0)) + 1
            text = f"resuming on {provider.name} from its last checkpoint (its launcher there was gone)"
        elif retry is not None:
            carried["retries"] = int(job.handle.get("retries", 0)) + 1
            text = f"retrying on {provider.name} after exit status {retry} (retry {carried['retries']})"
        else:
            carried["resumes"] = int(job.handle.get("resumes", 0)) + 1
            text = f"resuming on {provider.name} from its last checkpoint"
        if await self._held_at_door(job, doors.RETRY if retry is not None else doors.REQUEUE, carried):
            return
        if retry is not None:  # a retry is new work of the agent's: its day (core/engine/agentday.py)
            over = await self.db(agentday.retry_start, self.store, job, self.rules(),
                                 why=f"retry {carried['retries']} after exit status {retry}")
            if over:
                from core.engine.service import hold

                await self.db(hold, self.store, job, over, kind="rules",
                              handle={**carried, "restore_checkpoint": True})  # this retry counted
                return
        job = await self.db(self.store.transition, job.id, State.PROVISIONING, text,
                                    expect=[State.MIGRATING], attempt=job.attempt + 1,
                                    handle=carried, exit_code=None)
        await self._start_attempt(job, provider)

    async def _held_at_door(self, job: Job, door: str, carried: dict) -> bool:
        """A retry or a requeue on the same target is a door into running too: its history is
        judged (core/engine/doors.py): a job past its granted hours is held as an overrun, a
        denied one ends. A held one keeps this move's counters (`carried`), as a held retry
        of the agent's day does. True when it did not go on."""
        try:
            verdict = await self.db(doors.judge, self.store, job, job.plan, door=door,
                                    interactive=job.plan.get("submitted_by") == "person",
                                    cfg=SimpleNamespace(rules=self.rules()))
        except UserError as exc:
            await self.db(self._fail, job, f"not {door} : {exc.what}".replace(" :", ":"))
            return True
        if not verdict.held:
            return False
        await self.db(hold, self.store, job, verdict.holds, kind=verdict.kind, plan=verdict.plan,
                      handle={**carried, "restore_checkpoint": True})
        return True

    async def _migrate(self, job: Job) -> None:
        """Move a job whose session ended to another target: plan again without the lost one,
        under the approval rules again, and resume it there from the checkpoint at home."""
        await self._stop_copy(job.id)  # a copy still coming from the target it left
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
        carried = carried_over(job.handle)
        offset = metrics_offset_for(job, self.providers.get(src or ""), provider, carried)
        job = await self.db(self.store.transition,
            job.id, State.PROVISIONING, text, expect=[State.MIGRATING], attempt=job.attempt + 1,
            exit_code=None, metrics_offset=offset,
            data={"from": src, "to": provider.name, "why": why, "checkpoint": ckpt},
            handle={**carried, "migrations": moves + 1, "migrated_from": src,
                    "restore_checkpoint": ckpt is not None, "resumes": 0,
                    "log_base": log_mark(job, f"moved from {src} to {provider.name}: {why}")})
        await self._start_attempt(job, provider)

    async def _launcher_gone(self, job: Job, provider: Any, poll: Poll) -> None:
        """The attempt's launcher vanished from a host that answers (a reboot, an OOM kill of
        the launcher, an admin's kill -9) and left no exit record: the session ended, not the
        script, so the job resumes from its last checkpoint, on the same target while it
        answers (elsewhere if not: `_resume`), each time counted against rules.max_migrations.

        Whatever of the attempt outlived its launcher (the job itself, when only the launcher
        was killed) is stopped first: two copies must never write one job's folders."""
        if job.cancel_requested or job.cancel_checkpoint:
            await self._finish(job, provider, Poll("exited", exit_code=None, detail=poll.detail))
            return
        try:
            await asyncio.wait_for(provider.cancel(job, force=True), STOP_LEFTOVERS_S)
        except Exception as exc:  # noqa: BLE001 - not resumed while a copy may run: look again
            log.info("job %s: could not stop what its vanished launcher left: %s", job.short_id, exc)
            return
        moves = int(job.handle.get("migrations", 0))
        limit = self.rules().max_migrations
        if moves >= limit:
            await self._finish(job, provider, Poll("lost", detail=(
                f"{poll.detail}; it was moved or resumed {moves} times already "
                "(rules.max_migrations), not again")))
            return
        await self._mirror(job, provider, force=True)  # the host answers: its newest checkpoint home
        if checkpoints.summary(job.id) is None and job.request.get("restart", "never") != "allow":
            await self._finish(job, provider, Poll("lost", detail=(
                f"{poll.detail}; no complete checkpoint came home, and it would start again from "
                "the beginning, which its request does not allow (set restart: allow in gpu.yaml "
                "to allow it)")))
            return
        await self.db(self.store.usage_end, job.id, job.attempt)
        await self.db(self.store.transition, job.id, State.MIGRATING,
                      f"{poll.detail}; resuming it from its last checkpoint",
                      handle={**job.handle, "resume_same_target": True, "launcher_gone": poll.detail,
                              "move_why": poll.detail, "lost_target": provider.name})

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
