"""Counting an agent's rolling day (issue 37, item 3) where its work starts.

Each agent job under an hour and under `approvals.agent_max_usd` runs without a person, so
twenty small jobs could be the ten-hour job nobody saw. Every door that lets an agent's work go
on without a person's yes (a submit, a resume, a retry, each point of a sweep) leaves one event
that holds the start's estimate (core.planning.usage.AGENT_START); the day is the sum of those
of the last 24 hours (core.planning.usage.agent_day), and a start that would take the day past
`approvals.agent_daily_hours` or `approvals.agent_daily_usd` is held instead
(core.planning.policy.agent_day_hold).

"Counted when they start" is when the door lets the work go on, not when a target begins to
run it: a queue of small jobs admitted at once must not slip under the limit because none has
begun yet. What a person approved is not counted (it ran with their yes), and neither is a
migration or a move out of a queue (the same work, counted at the start it continues).

The check and the count are one step: `admit` runs inside the caller's write transaction
(BEGIN IMMEDIATE), so two agents submitting at the same moment see each other's starts.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from core.config.user import Rules
from core.jobs.store import Store
from core.planning.policy import Hold, agent_day_hold, rule_hours
from core.planning.usage import AGENT_START, AgentDay, agent_day


def is_agents(plan: dict[str, Any]) -> bool:
    """Whether the rules judged this plan as an agent's (service.apply_rules records it)."""
    return plan.get("submitted_by") == "agent"


def estimate(plan: dict[str, Any], rules: Rules) -> tuple[float, float]:
    """What one start of this plan counts: (hours as the rules judge them, its estimated price).
    A plan with no hours and no smoke cap counts 0 hours (agent_hours holds such a job anyway)."""
    hours = rule_hours(plan.get("hours"), bool(plan.get("smoke")), rules)
    return float(hours or 0.0), float(plan.get("estimated_price") or 0.0)


def mark(hours: float, usd: float, **more: Any) -> dict[str, Any]:
    """An event's data that counts one start against the agent's day."""
    return {AGENT_START: {"hours": round(hours, 6), "usd": round(usd, 6), **more}}


def count(store: Store, db: sqlite3.Connection, job_id: str, hours: float, usd: float, *,
          actor: str, why: str = "started") -> None:
    """Record one start of an agent's work (inside the caller's write transaction)."""
    store.note_in(db, job_id, f"counted against the agent's day: {hours:g} h, ${usd:.2f} ({why})",
                  actor=actor, data=mark(hours, usd, why=why))


def retry_start(store: Store, job: Any, rules: Rules, *, why: str) -> list[dict[str, Any]]:
    """The retry door (a non-zero exit its request lists in retry_on_exit_codes), for a job
    still `migrating`: an agent's retry is new work, judged against its day and counted in one
    transaction. Returns the holds when it would pass a limit (the caller holds the job: approving
    it launches it from its last checkpoint at home, like any held move), else []."""
    from core.jobs.states import State

    if not is_agents(job.plan) or (job.approved_digest and job.approved_digest == job.digest):
        return []  # a person's job, or a plan a person approved (its retries with it)
    with store.write() as db:
        fresh = store.get(job.id)
        if fresh.state != State.MIGRATING:
            return []  # cancelled meanwhile: the caller's transition says so
        return admit(store, db, job.id, {**fresh.plan, "holds": []}, rules, actor="supervisor", why=why)


def admit(store: Store, db: sqlite3.Connection, job_id: str, plan: dict[str, Any], rules: Rules, *,
          actor: str, why: str = "started") -> list[dict[str, Any]]:
    """At a door, inside its write transaction: an agent's plan that no other rule holds is
    judged against the day as it is now (the totals read in this transaction) and counted if it
    goes on. Returns the holds to apply ([] when it goes on, or when it is not an agent's, or
    already held: a held job counts nothing until a person's yes, which is not the agent's)."""
    if not is_agents(plan) or plan.get("holds"):
        return []
    hours, usd = estimate(plan, rules)
    over = agent_day_hold(agent_day(store), hours, usd, rules)
    if over is not None:
        return [over.to_json()]
    count(store, db, job_id, hours, usd, actor=actor, why=why)
    return []


def day_hold(store: Store, estimates: list[tuple[float, float]], rules: Rules) -> Hold | None:
    """The hold for several starts that go on together (a sweep's points: one approval for all),
    judged on their sum against the day as it is now; None if they fit."""
    return agent_day_hold(agent_day(store), sum(h for h, _ in estimates),
                          sum(d for _, d in estimates), rules)


def day_doc(store: Store, rules: Rules, now: float | None = None) -> dict[str, Any]:
    """The agent's day against its limits, as `gpu cost --json` and the dashboard show it:
    {hours, usd, starts, since, hours_limit, usd_limit, hours_left, usd_left}."""
    day: AgentDay = agent_day(store, now)
    return {**day.to_json(), "hours_limit": rules.agent_daily_hours, "usd_limit": rules.agent_daily_usd,
            "hours_left": round(max(0.0, rules.agent_daily_hours - day.hours), 4),
            "usd_left": round(max(0.0, rules.agent_daily_usd - day.usd), 4)}
