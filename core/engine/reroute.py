"""A job waiting for a free slot moves to another target that can start it now.

A job placed on a target whose `max_jobs` are all taken waits there (`routing`, "waiting for a
free slot on local (1 of 1 in use)"). When a slot frees on another target, or a target is added
or its config changes (`gpu targets add`: the supervisor reads the user config again when it
changes), the supervisor routes each such job again, oldest first. If the router now chooses
another target that can start it now, the job moves there, and its event says from where and
why ("local is busy (1 of 1 in use) and box has a free slot: routed again to box").

It moves only where it starts without a new hold. The approval rules are judged first, as the
move would judge them against the job's whole history (core/engine/doors.rejudge), and nothing
is written: where the chosen target would hold the job for a person (it costs money past a
limit, its rules hold agents' jobs, a person approved the plan for the old target), the router
is asked again without it, and with no other target free the job stays waiting where it is, to
start there once its slot frees, as it would have. Its handle says so (`slot_held`, read as
`guidance.queue` while it waits there): "box has a free slot but would need your approval there
(<the hold's reason>): it waits for local". No event, no move, no hold: a person's no is final,
and a job that would have run without one must not come to need one by being moved. That
target is not looked at again for the job until the config or the free targets change.

Not moved: a request pinned to a target by name (`provider`) waits for that target; one pinned
to a kind moves among the targets of that kind only. A sweep's points move one by one, each
judged with its group's totals. No thrash: a job moves only to a target that can start it now
(the router's count of running and placed jobs), never back to a target it left for a slot
(`slot_left` in its handle) or timed out on (`queue_excluded`), and in one tick at most as many
jobs are looked at as there are free slots elsewhere, one at a time, so two waiting jobs do not
both take the one slot that freed. A job looked at and left waiting is looked at again when the
free targets or the config change, or after RECHECK_S (a target that did not answer may now);
one a target would hold, only when the free targets or the config change.

A mixin of `core.engine.supervisor.Supervisor`, beside queuewait.py (which moves a job that
waited past its target's queue_timeout_s, whether or not another target is free).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from core.engine.doors import MIGRATION, rejudge, replan
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.planning.router import PIN_KINDS

log = logging.getLogger("gpu-router.supervisor")

RECHECK_S = 30.0  # a job left waiting is routed again this often while a target has a free slot
# what a handle says while the job waits for a slot (queuewait.py), dropped when it moves
# a target with a free slot that would hold the job ({at, note}: see _note_held); not carried
# into an attempt (jobsteps.CARRIED), so it goes once the job starts
SLOT_HELD = "slot_held"
SLOT_WAIT = ("waiting_since", "queue_stuck", "queue_retry_at", SLOT_HELD)


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
            elif outcome == "held" and job.id in self._slot_looked:  # no look again after RECHECK_S:
                # only once the config or the free targets change (no thrash, no words again)
                self._slot_looked[job.id] = (self._slot_looked[job.id][0], math.inf)
            elif outcome == "moved":
                self.wakeup.set()  # the next tick starts it there now, not a tick later
        except Exception:  # noqa: BLE001 - a look that fails (a config being edited, say) leaves
            # the job waiting where it is; the move is all or nothing (one write), and never its end
            log.exception("job %s: could not route it again for a free slot", job.short_id)
        finally:
            self._slot_moving.discard(job.id)

    def _move_if_free(self, job_id: str, src: str) -> str:
        """On a worker thread: route the job again; move it when the router chooses another
        target that can start it now without a new hold. Returns "moved", "stay", "held" (a
        target with a free slot would hold it for a person: it stays, and its handle says why),
        or "again" (its own target has a free slot now, so it stays; looked at again should it
        still wait)."""
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
        busy = f"{here.running} of {here.max_jobs} in use" if here is not None else "busy"
        held: dict[str, str] = {}  # target -> the holds it would put on the job there
        chosen = None
        for _ in range(len(infos)):  # each target that would hold it is passed over, once
            try:
                chosen = route(req, infos, targets.kinds(cfg))
            except UserError:
                chosen = None
            if chosen is None or chosen.target == src or chosen.info is None or chosen.info.free_slots <= 0:
                chosen = None
                break
            holds = self._holds_on(job, chosen, src, cfg)
            if holds is None:
                return "stay"  # denied: never its to move (the launch says so)
            if not holds:
                break
            held[chosen.target] = holds
            infos[chosen.target].available = False
            infos[chosen.target].why_unavailable = f"it would need your approval there ({holds})"
            chosen = None
        with self.store.write():  # a cancel from another process between the look and the move wins
            fresh = self.store.get(job_id)
            if fresh.state != State.ROUTING or fresh.provider != src or fresh.cancel_requested:
                return "stay"
            if chosen is not None:  # judged again inside the write: what it judges is what it writes
                holds = self._holds_on(fresh, chosen, src, cfg)
                if holds is None:
                    return "stay"
                if holds:
                    held[chosen.target] = holds
                    chosen = None
            if chosen is None:
                return self._note_held(fresh, src, held)
            dest = chosen.target
            why = f"{src} is busy ({busy}) and {dest} has a free slot"
            moved = replan(self.store, fresh, why, door=MIGRATION, chosen=chosen)
            note = f"moved from {src} ({busy}) to {dest}: {dest} has a free slot"
            handle = {k: v for k, v in moved.handle.items() if k not in SLOT_WAIT}
            handle["slot_left"] = sorted({*(fresh.handle.get("slot_left") or []), src})
            handle["queue_note"] = note
            self.store.update(job_id, handle=handle, reason=note)
        log.info("job %s: %s", job.short_id, note)
        return "moved"

    def _holds_on(self, job: Job, chosen: Any, src: str, cfg: Any) -> str | None:
        """The reasons a move to `chosen` would hold the job for a person ("" for none), judged
        as the move would judge them and written nowhere; None for a denied job."""
        text = f"a person approved it for {src}, and a move to {chosen.target} is a new plan"
        try:
            verdict = rejudge(self.store, job, chosen, text, door=MIGRATION, cfg=cfg)
        except UserError:
            return None
        return "; ".join(h["reason"] for h in verdict.holds)

    def _note_held(self, job: Job, src: str, held: dict[str, str]) -> str:
        """Inside the store's write: the job stays on `src`. Its handle says which target with
        a free slot would hold it and why (`guidance.queue`, until it starts or moves), or drops
        that word once no target would; never an event (no move was made). Returns "held" or
        "stay"."""
        note = None
        if held:
            note = ", and ".join(f"{name} has a free slot but would need your approval there ({why})"
                                 for name, why in held.items()) + f": it waits for {src}"
        was = job.handle.get(SLOT_HELD)
        now = {"at": src, "note": note} if note else None
        if now != was:
            handle = {k: v for k, v in job.handle.items() if k != SLOT_HELD}
            self.store.update(job.id, handle={**handle, **({SLOT_HELD: now} if now else {})})
            if note:
                log.info("job %s: %s", job.short_id, note)
        return "held" if held else "stay"
