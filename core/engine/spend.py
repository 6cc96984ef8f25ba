"""`gpu cost` and the dashboard header's spend: what jobs cost, estimated and actual, by target,
day or job, the free quota they used and the weekly budget, all read from the store.

The actual figures are the usage rows the supervisor writes (one per attempt: target, price
per hour, start and end; core/engine/jobsteps.py), clipped to the period asked for, so an
attempt that began before `--since` counts only its hours after it and one still running counts
up to now. GPU hours are those hours times the GPUs the plan gave the job ("4x A100": 4; a cpu
plan: 0). The estimate is each job's plan (core.planning.usage.planned), counted once, in the
group of its first attempt inside the period. Free quota and the budget use the same rolling
7 days the approval rules judge by (core.planning.policy), not the calendar week.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from core import paths
from core.config.user import UserConfig, load
from core.errors import UserError
from core.jobs.store import Job, Store
from core.planning.usage import WEEK_S, planned, quota_left, spend

BY = ("target", "day", "job")
_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$", re.IGNORECASE)
_UNIT_S = {"h": 3600, "d": 86400, "w": WEEK_S}
SINCE_FIX = "give a span back from now (24h, 7d, 2w) or a date (2026-05-01, 2026-05-01T09:00)"


def parse_since(text: str, now: float | None = None) -> float:
    """`--since` as a timestamp: `24h`, `7d`, `2w` back from now, or an ISO date or date-time
    (local time unless it names its zone). Anything else, or a time in the future, is an error
    that says what is taken."""
    now = time.time() if now is None else now
    m = _AGO.match(text or "")
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    try:
        at = datetime.fromisoformat((text or "").strip()).timestamp()
    except ValueError:
        raise UserError(f"--since {text!r} is neither a span nor a date", fix=SINCE_FIX) from None
    if at > now:
        raise UserError(f"--since {text!r} is in the future", fix=SINCE_FIX)
    return at


def gpu_count(job: Job) -> int:
    """The GPUs a job's plan gave it: "4x A100" is 4, "cpu" (or nothing) is 0."""
    label = str(job.plan.get("gpu") or "")
    m = re.match(r"^\s*(\d+)\s*x\b", label)
    if m:
        return int(m.group(1))
    return 0 if label.strip().lower() in ("", "cpu") else 1


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def _next_midnight(ts: float) -> float:
    d = datetime.fromtimestamp(ts)
    midnight = d.replace(hour=0, minute=0, second=0, microsecond=0)
    return datetime.fromtimestamp(midnight.timestamp() + 36 * 3600).replace(
        hour=0, minute=0, second=0, microsecond=0).timestamp()  # safe across a DST change


def _pieces(start: float, end: float, by_day: bool) -> list[tuple[float, float]]:
    """[start, end) cut at local midnights when grouping by day, else whole."""
    if not by_day:
        return [(start, end)]
    out = []
    while start < end:
        cut = min(end, _next_midnight(start))
        out.append((start, cut))
        start = cut
    return out


def _group_key(by: str, row: Any, job: Job, start: float) -> str:
    if by == "target":
        return row["target"]
    if by == "day":
        return _day(start)
    return job.short_id


def cost_report(store: Store, cfg: UserConfig | None = None, *, since: float,
                by: str = "target", now: float | None = None) -> dict[str, Any]:
    """`gpu cost --json`: {since, until, by, rows, total, quota, credits, budget, agent_day}.

    rows: one per target, day (local date) or job, biggest cost first for targets and jobs,
    in date order for days: {key, hours, gpu_hours, cost, estimate, jobs, running} (a job's
    row adds id, name and target: the targets its attempts in the period ran on). quota: each target with weekly free hours (its
    `hours_per_week`, or Kaggle's) and what the last 7 days used of them, with Kaggle's own
    count where a probe remembered one. credits: targets with `credits`. budget: the weekly
    budget against the last 7 days' spend. agent_day: the agent's rolling day against its
    limits (`agent_day_doc`), whatever the period asked for."""
    if by not in BY:
        raise UserError(f"--by {by!r} is not a grouping", fix=f"use one of: {', '.join(BY)}")
    now = time.time() if now is None else now
    cfg = cfg or load()
    groups: dict[str, dict[str, Any]] = {}
    jobs: dict[str, Job] = {}
    first: dict[str, tuple[float, str]] = {}  # job id -> (start of its first attempt here, group)
    members: dict[str, set[str]] = defaultdict(set)
    running: dict[str, set[str]] = defaultdict(set)
    where: dict[str, set[str]] = defaultdict(set)  # job id -> the targets its attempts here ran on
    for row in store.usage_rows(since=since):
        start, end = max(row["started_at"], since), min(row["ended_at"] or now, now)
        if end < start or (end == start and row["ended_at"] is not None):
            continue  # ended exactly at `since`, or a clock that moved back
        job = jobs.get(row["job_id"]) or jobs.setdefault(row["job_id"], store.get(row["job_id"]))
        gpus = gpu_count(job)
        where[job.id].add(row["target"])
        for a, b in _pieces(start, end, by == "day") or [(start, start)]:
            key = _group_key(by, row, job, a)
            g = groups.setdefault(key, {"key": key, "hours": 0.0, "gpu_hours": 0.0, "cost": 0.0,
                                        "estimate": 0.0})
            hours = (b - a) / 3600
            g["hours"] += hours
            g["gpu_hours"] += hours * gpus
            g["cost"] += hours * float(row["price_per_hour"] or 0)
            members[key].add(job.id)
            if row["ended_at"] is None:
                running[key].add(job.id)
        key = _group_key(by, row, job, start)
        if job.id not in first or start < first[job.id][0]:
            first[job.id] = (start, key)
    for job_id, (_, key) in first.items():
        groups[key]["estimate"] += planned(jobs[job_id])[1] or 0.0
    rows = []
    for key, g in groups.items():
        row = {"key": key, "hours": round(g["hours"], 4), "gpu_hours": round(g["gpu_hours"], 4),
               "cost": round(g["cost"], 4), "estimate": round(g["estimate"], 4),
               "jobs": len(members[key]), "running": len(running[key])}
        if by == "job":
            job = next(jobs[j] for j in members[key])
            row.update(id=job.id, name=job.name, target=", ".join(sorted(where[job.id])))
        rows.append(row)
    rows.sort(key=(lambda r: r["key"]) if by == "day" else (lambda r: (-r["cost"], -r["hours"], r["key"])))
    total = {k: round(sum(r[k] for r in rows), 4) for k in ("hours", "gpu_hours", "cost", "estimate")}
    total["jobs"] = len(first)
    doc = {"since": _iso(since), "until": _iso(now), "by": by, "rows": rows, "total": total,
           "quota": quota_doc(store, cfg, now), "credits": credits_doc(store, cfg),
           "budget": budget_doc(store, cfg), "agent_day": agent_day_doc(store, cfg, now)}
    reported = skypilot_doc(cfg, jobs.values())
    if reported:
        doc["skypilot"] = reported
    return doc


def skypilot_doc(cfg: UserConfig, jobs) -> dict[str, dict[str, Any]]:
    """SkyPilot's own cost report of the clusters of the period's jobs, by target, beside
    gpu-router's count (the catalog price from the cluster's launch to the job's end): {target:
    {clusters, reported, hours_up}}. SkyPilot counts on until the cluster is down."""
    kinds = {name for name, t in cfg.targets.items() if t.kind == "skypilot"}
    if not kinds:
        return {}
    from core.providers.skypilot.stream import reported_costs

    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        for doc in reported_costs(paths.jobs_dir() / job.id):
            if doc.get("target") not in kinds:
                continue
            t = out.setdefault(doc["target"], {"clusters": 0, "reported": 0.0, "hours_up": 0.0})
            t["clusters"] += 1
            t["reported"] = round(t["reported"] + float(doc["cost"]), 4)
            t["hours_up"] = round(t["hours_up"] + float(doc.get("duration_s") or 0) / 3600, 4)
    return out


def agent_day_doc(store: Store, cfg: UserConfig | None = None, now: float | None = None) -> dict[str, Any]:
    """The agent's work of the last 24 hours that went on without a person's yes, as the approval
    rules count it (core/engine/agentday.py): {hours, usd, starts, since, hours_limit, usd_limit,
    hours_left, usd_left}; estimates (each start's plan), not what the jobs have run so far."""
    from core.engine.agentday import day_doc

    cfg = cfg or load()
    doc = day_doc(store, cfg.rules, now)
    return {**doc, "since": _iso(doc["since"])}


def quota_doc(store: Store, cfg: UserConfig, now: float | None = None) -> list[dict[str, Any]]:
    """Free weekly hours per target over the last 7 days: {target, kind, allowed_hours,
    used_hours, left_hours, reported}. `reported` is the service's own count (Kaggle counts
    sessions gpu-router never started) from the last probe, with when it was read; None
    where none was remembered. Targets with no weekly hours are left out."""
    from core.providers.kaggle.wire import WEEKLY_HOURS
    from core.providers.service import last_probe
    from core.planning.usage import target_hours

    now = time.time() if now is None else now
    out = []
    for name, t in cfg.targets.items():
        allowed = t.hours_per_week if t.hours_per_week is not None else (
            WEEKLY_HOURS if t.kind == "kaggle" else None)
        if allowed is None:
            continue
        used = target_hours(store, name, since=now - WEEK_S)
        reported = None
        probe = last_probe(t.kind, name) if t.kind == "kaggle" else None
        quota = ((probe or {}).get("details") or {}).get("quota")
        if isinstance(quota, dict):
            reported = {**{k: quota.get(k) for k in ("used_hours", "allowed_hours", "left_hours",
                                                     "resets_at")},
                        "read_at": _iso(float(probe.get("at") or 0))}
        out.append({"target": name, "kind": t.kind, "allowed_hours": round(allowed, 4),
                    "used_hours": round(used, 4), "left_hours": round(max(0.0, allowed - used), 4),
                    "reported": reported})
    return out


def credits_doc(store: Store, cfg: UserConfig) -> list[dict[str, Any]]:
    """Targets given `credits` (dollars): {target, credits, spent, left}, over all time."""
    out = []
    for name, t in cfg.targets.items():
        if t.credits is not None:
            spent = spend(store, target=name)
            out.append({"target": name, "credits": t.credits, "spent": round(spent, 4),
                        "left": quota_left(store, t)["credits"]})
    return out


def budget_doc(store: Store, cfg: UserConfig | None = None) -> dict[str, Any]:
    """This week's spend against the budget: {week_spend, weekly, left, per_job}: the last 7
    days on every target, as the approval rules count it; weekly, left and per_job are None
    where the user config sets no budget."""
    cfg = cfg or load()
    spent = spend(store, since=time.time() - WEEK_S)
    weekly = cfg.rules.budget_weekly
    return {"week_spend": round(spent, 4), "weekly": weekly,
            "left": None if weekly is None else round(max(0.0, weekly - spent), 4),
            "per_job": cfg.rules.budget_per_job}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
