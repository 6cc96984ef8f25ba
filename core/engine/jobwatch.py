"""Watching a running job: its metrics read into the store, its hours against the estimate
(past hours x overrun_factor: checkpoint, stop, hold), and the kill rules (the user's and the
job's own, judged by core.planning.killjudge). A mixin of `core.engine.supervisor.Supervisor`,
beside jobsteps.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from core.config import killrules
from core.config.user import Rules, load
from core.engine.jobsteps import CANCEL_GRACE_S, ago
from core.engine.metricfile import MAX_KEYS, cap_keys, parse_rows
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Job
from core.planning import killjudge
from core.planning.usage import job_hours
from core.runtime.gpuutil import interval_s

log = logging.getLogger("gpu-router.supervisor")

RULES_EVERY_S = 5.0  # kill rules that read a metric's history look this often


class JobWatch:
    """The supervisor's watch over a running job (see the module's docstring)."""

    async def _ingest_metrics(self, job: Job, provider: Any) -> None:
        data, offset = await provider.read_metrics(job, job.metrics_offset)
        if offset == job.metrics_offset and not data:
            return
        parsed = parse_rows(data)
        if cap_keys(parsed, {k for k in job.last_metric if k != "_step"}) and not job.handle.get("keys_capped"):
            await self.db(self.store.add_event, job.id,
                          f"metrics: more than {MAX_KEYS} distinct names; rows of further names are not kept")
            job = await self.db(self.store.update, job.id, handle={**job.handle, "keys_capped": True}) or job
        await self.db(self.store.add_metrics, job.id, parsed.rows, offset,
                               {**job.last_metric, **parsed.last} if parsed.last else {},
                               config=parsed.config, final=parsed.final)
        if parsed.nonfinite:  # kept for the nan_metric rule: NaN is never stored as a number
            seen = dict(job.handle.get("nonfinite") or {})
            for key, ts in parsed.nonfinite.items():
                if len(seen) < 20:
                    seen.setdefault(key, ts)
            fresh = await self.db(self.store.get, job.id)
            await self.db(self.store.update, job.id, handle={**fresh.handle, "nonfinite": seen})

    async def _check_overrun(self, job: Job, provider: Any) -> None:
        """Past hours x overrun_factor: ask for a checkpoint, then stop it, then hold it."""
        hours = job.plan.get("hours")
        rules = self.rules()
        if job.state == State.RUNNING and hours:
            used = await self.db(job_hours, self.store, job.id)
            if used > hours * rules.overrun_factor:
                await provider.request_checkpoint(job)
                await self.db(self.store.transition,
                    job.id, State.CHECKPOINTING,
                    f"ran {used:.3g} h, past its {hours:g} h estimate (x{rules.overrun_factor:g}): "
                    f"asked to checkpoint and stop", expect=[State.RUNNING],
                    handle={**job.handle, "overrun_at": time.time()})
        elif job.state == State.CHECKPOINTING and (job.handle.get("overrun_at") or job.handle.get("kill")):
            asked = job.handle.get("overrun_at") or job.handle["kill"]["at"]
            waited = time.time() - asked
            if waited > rules.checkpoint_grace_s and not job.handle.get("overrun_stop_sent"):
                await provider.cancel(job)
                await self.db(self.store.update, job.id, handle={**job.handle, "overrun_stop_sent": time.time()})
            elif waited > rules.checkpoint_grace_s + CANCEL_GRACE_S and not job.handle.get("cancel_forced"):
                await provider.cancel(job, force=True)
                await self.db(self.store.update, job.id, handle={**job.handle, "cancel_forced": True})

    async def _check_kill_rules(self, job: Job, provider: Any) -> None:
        """The user's kill rules and the job's own: the first that fires asks the job to
        checkpoint; after the checkpoint grace it is stopped (`_check_overrun`'s second half),
        its outputs come home and it ends failed with the rule as its reason (`_finish`)."""
        if job.state != State.RUNNING or job.handle.get("kill"):
            return
        rules = self.rules()
        if job.plan.get("smoke") and await self._smoke_cap(job, provider, rules):
            return
        try:
            own = killrules.parse(job.request.get("kill_rules") or [])
        except ValueError:
            own = []
        active = killrules.combined(rules.kill_rules, own)
        if not active:
            return
        now = time.time()
        facts = killjudge.Facts(now=now, nonfinite=dict(job.handle.get("nonfinite") or {}),
                                budget_per_job=rules.budget_per_job)
        wanted = killjudge.needs_series(active)
        slow = bool(wanted) or any(r.kind == "over_budget" for r in active)
        if slow:
            if now - self._rules_at.get(job.id, 0.0) < RULES_EVERY_S and not facts.nonfinite:
                return
            self._rules_at[job.id] = now
            if any(r.kind == "over_budget" for r in active):
                facts.spent = await self.db(job_hours, self.store, job.id) * float(job.plan.get("price_per_hour") or 0)
            points = await asyncio.to_thread(self._series, job.id, wanted)
            facts.series = points
            if killrules.UTIL_METRIC in wanted and not points.get(killrules.UTIL_METRIC):
                await self._note_no_util(job, active, now)
        fired = killjudge.evaluate(active, facts)
        if fired is None:
            return
        rule, why = fired
        try:
            await provider.request_checkpoint(job)
        except Exception as exc:  # noqa: BLE001 - it is stopped after the grace all the same
            log.info("job %s: checkpoint request failed: %s", job.short_id, exc)
        await self.db(self.store.transition, job.id, State.CHECKPOINTING,
                              f"kill rule {rule.text()} fired: {why}; asked to checkpoint, then it stops",
                              expect=[State.RUNNING], data={"rule": rule.text(), "why": why},
                              handle={**job.handle, "kill": {"rule": rule.text(), "why": why, "at": now}})

    async def _smoke_cap(self, job: Job, provider: Any, rules: Rules) -> bool:
        """A smoke run past rules.smoke_max_minutes is stopped like a kill rule that fired
        (asked to checkpoint, stopped after the grace, ends failed saying why): the cap is what
        lets an agent's smoke run go without an hours estimate (core.planning.policy)."""
        used_min = await self.db(job_hours, self.store, job.id) * 60
        cap = rules.smoke_max_minutes
        if used_min <= cap:
            return False
        why = (f"a smoke run is stopped after {cap:g} minutes (rules.smoke_max_minutes) and this "
               f"one ran {used_min:.1f}; submit it without smoke, with hours, for a longer run")
        try:
            await provider.request_checkpoint(job)
        except Exception as exc:  # noqa: BLE001 - it is stopped after the grace all the same
            log.info("job %s: checkpoint request failed: %s", job.short_id, exc)
        await self.db(self.store.transition, job.id, State.CHECKPOINTING,
                      f"smoke cap: {why}; asked to checkpoint, then it stops", expect=[State.RUNNING],
                      data={"rule": "smoke_max_minutes", "why": why},
                      handle={**job.handle, "kill": {"rule": "smoke_max_minutes", "why": why,
                                                     "at": time.time()}})
        return True

    async def _note_no_util(self, job: Job, active: list, now: float) -> None:
        """Once per attempt, in the job's events: a gpu_util_below rule that has had no gpu/util
        figure for its whole window (and two sampling intervals more) cannot fire, because the
        target has no working nvidia-smi (its job log says why) and the job logs none."""
        rule = next(r for r in active if r.kind == "gpu_util_below")
        since = job.handle.get("launched_at")
        wait = rule.minutes * 60 + 2 * interval_s(os.environ)
        if not since or now - since < wait or job.handle.get("util_note") == job.attempt:
            return
        fresh = await self.db(self.store.get, job.id)
        await self.db(self.store.update, job.id, handle={**fresh.handle, "util_note": job.attempt})
        await self.db(self.store.add_event, job.id,
                      f"kill rule {rule.text()} has had no gpu/util figure in the "
                      f"{ago(now - since)} since attempt {job.attempt} started: this target has no "
                      "working nvidia-smi (the job log says why) and the job logs no gpu/util, "
                      "so the rule cannot fire unless one arrives", actor="supervisor")

    def _series(self, job_id: str, keys: set[str]) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {}
        for key in keys:
            rows = self.store.metrics(job_id, key).get(key, [])
            out[key] = [(ts, value) for _step, value, ts in rows]
        return out

    def rules(self):
        """The user's rules, read once per change of the config file (not once per job)."""
        if self._rules is None:
            try:
                self._rules = load().rules
            except UserError:
                log.exception("the user config is invalid: using the default rules")
                self._rules = Rules()
        return self._rules
