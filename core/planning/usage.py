"""Runtime and spend figures from the store's usage rows: quota left, weekly spend, cost so far."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from core.jobs.store import Store

WEEK_S = 7 * 24 * 3600
DAY_S = 24 * 3600
# the key of an event's data that counts an agent's start against its rolling day: written by
# core.engine.agentday when a door lets an agent's work go on without a person, read below
AGENT_START = "agent_start"


def _hours(row, now: float, since: float | None = None) -> float:
    start = max(row["started_at"], since) if since else row["started_at"]
    end = row["ended_at"] or now
    return max(0.0, end - start) / 3600


def target_hours(store: Store, target: str, since: float | None = None) -> float:
    now = time.time()
    return sum(_hours(r, now, since) for r in store.usage_rows(target=target, since=since))


def job_hours(store: Store, job_id: str) -> float:
    now = time.time()
    return sum(_hours(r, now) for r in store.usage_rows(job_id=job_id))


def job_cost(store: Store, job_id: str) -> float:
    now = time.time()
    return sum(_hours(r, now) * r["price_per_hour"] for r in store.usage_rows(job_id=job_id))


def spend(store: Store, since: float | None = None, target: str | None = None) -> float:
    now = time.time()
    return sum(_hours(r, now, since) * r["price_per_hour"]
               for r in store.usage_rows(target=target, since=since))


def weekly_spend(store: Store) -> float:
    return spend(store, since=time.time() - WEEK_S)


def quota_left(store: Store, target) -> dict:
    """{"hours": left this week or None, "credits": dollars left or None} for a TargetConfig."""
    out: dict = {"hours": None, "credits": None}
    if target.hours_per_week is not None:
        used = target_hours(store, target.name, since=time.time() - WEEK_S)
        out["hours"] = round(max(0.0, target.hours_per_week - used), 4)
    if target.credits is not None:
        out["credits"] = round(max(0.0, target.credits - spend(store, target=target.name)), 4)
    return out


def planned(job) -> tuple[float | None, float | None]:
    """What the plan expected of a job: (hours, cost), either None where it gave none. The
    plan's own estimated price, else its hours times the target's price per hour."""
    hours = job.plan.get("hours", job.request.get("hours"))
    price = float(job.plan.get("price_per_hour") or 0)
    cost = job.plan.get("estimated_price")
    if cost is None and hours is not None:
        cost = hours * price
    return hours, None if cost is None else round(float(cost), 4)


def estimate_and_actual(store: Store, job) -> dict:
    """What the plan expected of a job against what it took: {"estimate": {"hours", "cost"},
    "actual": {"hours", "cost"}}. Cost is the target's price per hour times the hours its
    attempts ran (from the usage rows, so a resumed job counts every attempt)."""
    hours, estimate_cost = planned(job)
    return {"estimate": {"hours": hours, "cost": estimate_cost},
            "actual": {"hours": round(job_hours(store, job.id), 6),
                       "cost": round(job_cost(store, job.id), 4)}}


@dataclass(frozen=True)
class AgentDay:
    """An agent's work of the last 24 hours that went on without a person's yes: estimated
    hours and dollars, and how many starts (submits, resumes, retries, sweep points) made them."""
    hours: float = 0.0
    usd: float = 0.0
    starts: int = 0
    since: float = 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "hours": round(self.hours, 4), "usd": round(self.usd, 4)}


def agent_day(store: Store, now: float | None = None) -> AgentDay:
    """The agent's rolling day, from the store's events (no counter of its own that could drift):
    each start an agent caused and no person approved left one event holding its estimate
    (`AGENT_START`), and those of the last 24 hours are summed. Read inside a write transaction
    (`with store.write()`) the sum and the start it lets through are one step, so two agents
    submitting at once cannot both slip under the limit."""
    now = time.time() if now is None else now
    since = now - DAY_S
    hours = usd = 0.0
    starts = 0
    for data in store.event_data_since(since, AGENT_START):
        mark = data.get(AGENT_START) if isinstance(data, dict) else None
        if not isinstance(mark, dict):
            continue  # the word in some other text (a purpose, a reason): not a mark
        h, d = mark.get("hours"), mark.get("usd")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (h, d)):
            continue
        hours += max(0.0, float(h))
        usd += max(0.0, float(d))
        starts += 1
    return AgentDay(hours=hours, usd=usd, starts=starts, since=since)
