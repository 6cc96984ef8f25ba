"""A job waiting for a free slot moves to another target that can start it now.

A job placed on a target whose `max_jobs` are all taken waits there (`routing`, "waiting for a
free slot on local (1 of 1 in use)"). When a slot frees on another target, or a target is added
or its config changes (`gpu targets add`: the supervisor reads the user config again when it
changes), the supervisor routes each such job again, oldest first. If the router now chooses
another target that can start it now, the job moves there, and its event says from where and
why ("local is busy (1 of 1 in use) and box has a free slot: routed again to box"). The move is
a door into running like any re-route (core/engine/doors.replan, judged by the approval rules
against the job's whole history): where the new target needs a person (it costs money past a
limit, its rules hold agents' jobs, a person approved the plan for the old target), the job is
held for one rather than started.

Not moved: a request pinned to a target by name (`provider`) waits for that target; one pinned
to a kind moves among the targets of that kind only. A sweep's points move one by one, each
judged with its group's totals. No thrash: a job moves only to a target that can start it now
(the router's count of running and placed jobs), never back to a target it left for a slot
(`slot_left` in its handle) or timed out on (`queue_excluded`), and in one tick at most as many
jobs are looked at as there are free slots elsewhere, one at a time, so two waiting jobs do not
both take the one slot that freed. A job looked at and left waiting is looked at again when the
free targets or the config change, or after RECHECK_S (a target that did not answer may now).

A mixin of `core.engine.supervisor.Supervisor`, beside queuewait.py (which moves a job that
waited past its target's queue_timeout_s, whether or not another target is free).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from core.engine.doors import MIGRATION, replan
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.planning.router import PIN_KINDS

log = logging.getLogger("gpu-router.supervisor")

RECHECK_S = 30.0  # a job left waiting is routed again this often while a target has a free slot
# what a handle says while the job waits for a slot (queuewait.py), dropped when it moves
SLOT_WAIT = ("waiting_since", "queue_stuck", "queue_retry_at")


class SlotMoves:
    """The supervisor's moves of jobs waiting for a slot (see the module's docstring)."""

    def _move_waiting(self, tasks: set[asyncio.Task], waiting: list[Job], load: dict[str, int],
                      placed: dict[str, int]) -> None:
        """Once a tick, after the placing: start a look at the jobs in `waiting` (oldest first,
        each waiting for a slot on its target) that another target might start now. `load` is
        each target's launched jobs, `placed` its routing jobs not started this tick."""
        kinds = {name: getattr(p, "kind", "") for name, p in self.providers.items()}
        free = {name: p.max_jobs - load.get(name, 0) - placed.get(name, 0)
                for name, p in self.providers.items() if getattr(p, "enabled", True)}
        free = {name: n for name, n in free.items() if n > 0}
        if len(self._slot_looked) > 2 * len(waiting) + 100:  # ended and started jobs leave
            ids = {j.id for j in waiting}
            self._slot_looked = {k: v for k, v in self._slot_looked.items() if k in ids}
        budget = sum(free.values()) - len(self._slot_moving)
        now = time.monotonic()
        for job in waiting:
            if budget <= 0:
                return
            pin = job.request.get("provider")
            if job.cancel_requested or (pin and (pin in kinds or pin not in PIN_KINDS)):
                continue  # pinned to its target by name: it waits there
            left = {*(job.handle.get("slot_left") or []), *(job.handle.get("queue_excluded") or {})}
            elsewhere = frozenset(n for n in free if n != job.provider and n not in left
                                  and (not pin or kinds[n] == pin))
            if not elsewhere:
                continue
            mark = (self._config_stamp, elsewhere)
            looked = self._slot_looked.get(job.id)
            if looked is not None and looked[0] == mark and now - looked[1] < RECHECK_S:
                continue  # nothing changed since the last look
            self._slot_looked[job.id] = (mark, now)
            budget -= 1
            self._slot_moving.add(job.id)
            self._spawn(tasks, job, self._slot_move(job))

    async def _slot_move(self, job: Job) -> None:
        try:
            async with self._slot_lock:  # one at a time: each sees the slots the one before took
                outcome = await asyncio.to_thread(self._move_if_free, job.id, job.provider)
            if outcome == "again":  # a slot freed where it waits: look again next tick if it stays
                self._slot_looked.pop(job.id, None)
            elif outcome == "moved":
                self.wakeup.set()  # the next tick starts it there now, not a tick later
        except Exception:  # noqa: BLE001 - a look that fails (a config being edited, say) leaves
            # the job waiting where it is; the move is all or nothing (one write), and never its end
            log.exception("job %s: could not route it again for a free slot", job.short_id)
        finally:
            self._slot_moving.discard(job.id)

    def _move_if_free(self, job_id: str, src: str) -> str:
        """On a worker thread: route the job again; move it when the router chooses another
        target that can start it now. Returns "moved", "stay", or "again" (its own target has
        a free slot now, so it stays; looked at again should it still wait)."""
        from core.config import user as userconfig
        from core.engine import targets
        from core.engine.service import request_from_json
        from core.planning.router import route

        job = self.store.get(job_id)
        if job.state != State.ROUTING or job.provider != src or job.cancel_requested:
            return "stay"
        cfg, req = userconfig.load(), request_from_json(job.request)
        try:
            infos = targets.for_request(req, self.store, cfg)
        except UserError:
            return "stay"
        left = {**{n: "it left there for a free slot elsewhere" for n in job.handle.get("slot_left") or []},
                **(job.handle.get("queue_excluded") or {})}
        for name, reason in left.items():
            if name in infos and name != src:
                infos[name].available = False
                infos[name].why_unavailable = reason
        here = infos.get(src)
        if here is not None:
            if here.running < here.max_jobs:
                return "again"  # it starts where it is (or the job ahead of it does)
            here.waiting = max(here.waiting - 1, 0)  # routed as a submit would be: not yet there
        try:
            chosen = route(req, infos, targets.kinds(cfg))
        except UserError:
            return "stay"
        if chosen.target == src or chosen.info is None or chosen.info.free_slots <= 0:
            return "stay"
        dest = chosen.target
        busy = f"{here.running} of {here.max_jobs} in use" if here is not None else "busy"
        why = f"{src} is busy ({busy}) and {dest} has a free slot"
        with self.store.write():  # a cancel from another process between the look and the move wins
            fresh = self.store.get(job_id)
            if fresh.state != State.ROUTING or fresh.provider != src or fresh.cancel_requested:
                return "stay"
            moved = replan(self.store, fresh, why, door=MIGRATION, chosen=chosen)
            held = moved.state == State.AWAITING_APPROVAL
            note = f"moved from {src} ({busy}) to {dest}: {dest} has a free slot" + (
                " (held for approval)" if held else "")
            handle = {k: v for k, v in moved.handle.items() if k not in SLOT_WAIT}
            handle["slot_left"] = sorted({*(fresh.handle.get("slot_left") or []), src})
            handle["queue_note"] = note
            self.store.update(job_id, handle=handle, **({} if held else {"reason": note}))
        log.info("job %s: %s", job.short_id, note)
        return "moved"
