"""A job that does not start where it was placed is planned again elsewhere.

Two waits count against the target's `queue_timeout_s` (core/config/targetopts.QUEUE_TIMEOUT_S
gives each kind's default): a placed job waiting for a free slot (the target's `max_jobs` full,
the job still `routing`), and an attempt waiting in the target's own queue (Slurm PENDING, PBS
Q, Kaggle QUEUED: `Poll.queued`). Past it, the job is routed again without that target (and
without every target it timed out on before: `queue_excluded`, kept from attempt to attempt),
under the approval rules again; a launched attempt is cancelled on the target first, and only
once another target is known to fit, so a job with nowhere else to go keeps its place in the
queue instead of losing it. A request pinned with `provider` always waits. (A job waiting for
a slot moves sooner, once another target can start it now: core/engine/reroute.py.)

Bounded: each move counts as a migration (`rules.max_migrations`), and a target the job timed
out on is never tried again for it, so the moves end after as many targets as there are.
A mixin of `core.engine.supervisor.Supervisor`, beside jobsteps.py and jobmoves.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from core.engine.doors import replan
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.packaging import checkpoints
from core.providers.base import Poll

log = logging.getLogger("gpu-router.supervisor")

QUEUE_RETRY_S = 60.0  # a job past its queue timeout with nowhere else to go looks again this often


def queue_timeout(provider: Any) -> float:
    """The target's queue timeout in seconds (0: wait however long)."""
    return float(getattr(provider, "queue_timeout_s", 0) or 0)


def _secs(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class QueueWait:
    """The supervisor's queue timeouts (see the module's docstring)."""

    # -- waiting for a free slot (state routing) -------------------------------------------

    def _note_waiting(self, job: Job, provider: Any, running: int) -> bool:
        """On the store thread: say the job waits for a slot, from when; True when it has
        waited past the target's queue_timeout_s and should be planned again now."""
        now = time.time()
        since = float(job.handle.get("waiting_since") or now)
        reason = f"waiting for a free slot on {provider.name} ({running} of {provider.max_jobs} in use)"
        timeout = queue_timeout(provider)
        due = bool(timeout) and now - since > timeout and now >= float(job.handle.get("queue_retry_at") or 0)
        handle = {**job.handle, "waiting_since": since}
        if due and job.request.get("provider"):
            due = False
            if not job.handle.get("queue_stuck"):
                handle["queue_stuck"] = (
                    f"waited {_secs(now - since)} for a free slot on {provider.name}, past its "
                    f"queue_timeout_s ({_secs(timeout)}); the request pins it to {provider.name}, so it "
                    "keeps waiting there (cancel it, or submit it again without provider to let it move)")
                self.store.add_event(job.id, handle["queue_stuck"])
        if handle.get("queue_stuck"):
            reason = handle["queue_stuck"][:2000]  # says more than "waiting for a free slot"
        if job.reason != reason or handle != job.handle:
            self.store.update(job.id, reason=reason, handle=handle)
        return due

    async def _slot_timeout(self, job: Job, provider: Any) -> None:
        """A routing job waited past its target's queue_timeout_s for a slot: route it again."""
        job = await self.db(self.store.get, job.id)
        if job.state != State.ROUTING or job.provider != provider.name:
            return
        waited = time.time() - float(job.handle.get("waiting_since") or time.time())
        why = (f"waited {_secs(waited)} for a free slot on {provider.name}, past its queue_timeout_s "
               f"({_secs(queue_timeout(provider))})")
        await self._requeue(job, provider, why)

    # -- waiting in the target's own queue (state provisioning) ----------------------------

    async def _queued(self, job: Job, provider: Any, poll: Poll) -> Job | None:
        """A launched attempt the target holds in its queue: clock it; past the timeout, move
        it. Returns None when the job moved (the step ends there), else the job as stored now."""
        now = time.time()
        since = job.handle.get("queued_since")
        if since is None:  # from the submission, when this attempt never ran; else from now
            since = float(job.handle.get("launched_at") or now) if job.state == State.PROVISIONING else now
            job = await self.db(self.store.update, job.id, handle={**job.handle, "queued_since": since})
        timeout = queue_timeout(provider)
        if not timeout or now - since <= timeout or now < float(job.handle.get("queue_retry_at") or 0):
            return job
        why = (f"not started on {provider.name} within its queue_timeout_s ({_secs(timeout)}): "
               f"{poll.detail or 'queued'} for {_secs(now - since)}")
        if job.request.get("provider"):
            return await self._stuck(job, f"{why}; the request pins it to {provider.name}, so it keeps "
                                          "waiting there (cancel it, or submit it again without provider "
                                          "to let it move)")
        return await self._requeue(job, provider, why)

    # -- the move ----------------------------------------------------------------------------

    async def _requeue(self, job: Job, provider: Any, why: str) -> Job | None:
        """Plan the job again without this target (and those it timed out on before), under
        the approval rules; a launched attempt is cancelled on the target once another fits.
        None: it moved; else the job, staying (and saying why), as stored now."""
        src = provider.name
        moves = int(job.handle.get("migrations", 0))
        limit = self.rules().max_migrations
        if moves >= limit:
            return await self._stuck(job, f"{why}; it was moved {moves} times already "
                                          f"(rules.max_migrations), so it keeps waiting on {src}")
        excluded = {**(job.handle.get("queue_excluded") or {}),
                    src: "the job did not start there within its queue_timeout_s"}
        launched = job.state != State.ROUTING
        if launched:
            never_ran = not await self.db(self.store.usage_rows, job_id=job.id)
            if never_ran or checkpoints.summary(job.id) is not None or job.request.get("restart") == "allow":
                try:
                    dest = await asyncio.to_thread(self._route_elsewhere, job, excluded)
                except UserError as exc:
                    return await self._stuck(job, f"{why}; no other target fits ({exc.what}), so it "
                                                  f"keeps waiting on {src}")
            else:
                return await self._stuck(job, f"{why}; it ran before and no complete checkpoint came "
                                              f"home, so it keeps waiting on {src} rather than start "
                                              "again (restart: allow in gpu.yaml lets it)")
            try:
                await provider.cancel(job)
            except Exception as exc:  # noqa: BLE001 - the stray sweep stops it when it answers
                log.info("job %s: cancel on %s failed: %s", job.short_id, src, exc)
            note = f"{why}; cancelled there, planned again elsewhere ({dest} fits)"
            await self.db(self.store.transition, job.id, State.MIGRATING, f"{why}; cancelled on {src}, "
                          "moving it to another target", expect=[State.PROVISIONING, State.RUNNING,
                                                                  State.CHECKPOINTING],
                          handle={**{k: v for k, v in job.handle.items() if not k.startswith("queue_stuck")},
                                  "resume_same_target": False, "move_why": why, "lost_target": src,
                                  "queue_moved": True, "never_ran": never_ran, "queue_excluded": excluded,
                                  "queue_note": note})
            return None
        try:
            moved = await asyncio.to_thread(replan, self.store, job, why, excluded)
        except UserError as exc:
            return await self._stuck(job, f"{why}; no other target fits ({exc.what}), so it keeps "
                                          f"waiting on {src}")
        note = f"{why}; planned again elsewhere: {moved.provider}" + (
            " (held for approval)" if moved.state == State.AWAITING_APPROVAL else "")
        await self.db(self.store.update, job.id, handle={
            **{k: v for k, v in moved.handle.items() if k not in ("waiting_since", "queue_stuck")},
            "migrations": moves + 1, "queue_excluded": excluded, "queue_note": note})
        return None

    def _route_elsewhere(self, job: Job, excluded: dict[str, str]) -> str:
        """Which target would take the job without `excluded` (raises UserError: none)."""
        from core.config import user as userconfig
        from core.engine import targets
        from core.engine.service import request_from_json
        from core.planning.router import route

        cfg, req = userconfig.load(), request_from_json(job.request)
        infos = targets.for_request(req, self.store, cfg)
        for name, reason in excluded.items():
            if name in infos:
                infos[name].available = False
                infos[name].why_unavailable = reason
        return route(req, infos, targets.kinds(cfg)).target

    async def _stuck(self, job: Job, text: str) -> Job:
        """Past the timeout with nowhere to go: say so once (an event, the reason, guidance) and
        look again in QUEUE_RETRY_S. Returns the job as stored now."""
        fresh = await self.db(self.store.get, job.id)
        handle = {**fresh.handle, "queue_retry_at": time.time() + QUEUE_RETRY_S, "queue_stuck": text}
        if not fresh.handle.get("queue_stuck"):  # once: the reason keeps the newest words
            await self.db(self.store.add_event, job.id, text)
        return await self.db(self.store.update, job.id, handle=handle, reason=text[:2000])
