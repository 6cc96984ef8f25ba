"""`gpu cost`: what jobs cost, estimated and actual, and the GPU hours, free quota and budget
they used (the figures come from core.engine.spend; this module only prints them).

    gpu cost [--since 7d] [--by target|day|job] [--json]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

JSON_HELP = ("print {since, until, by, rows: [{key, hours, gpu_hours, cost, estimate, jobs, running"
             "[, id, name, target]}], total, quota: [{target, kind, allowed_hours, used_hours, "
             "left_hours, reported}], credits: [{target, credits, spent, left}], budget: "
             "{week_spend, weekly, left, per_job}}")


def add_cost_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("cost", cmd_cost, "spend and GPU hours, estimated and actual, by target, day or job; "
                              "free quota used and this week's spend against your budget")
    p.add_argument("--since", default="7d", metavar="WHEN",
                   help="from when: 24h, 7d, 2w back from now, or a date (2026-05-01 or "
                        "2026-05-01T09:00, local time); default 7d")
    p.add_argument("--by", default="target", choices=("target", "day", "job"),
                   help="one row per target (default), per day (local dates) or per job")
    p.add_argument("--json", action="store_true", help=JSON_HELP)


def cmd_cost(args: argparse.Namespace) -> int:
    from core.engine import spend
    from tui.cli.common import open_store
    from tui.show.output import emit_json

    since = spend.parse_since(args.since)
    doc = spend.cost_report(open_store(), since=since, by=args.by)
    if args.json:
        emit_json(doc)
        return 0
    for line in report_lines(doc, args.since):
        from tui.show.output import say

        say(line)
    return 0


def _h(hours: float) -> str:
    """Hours to two places; a few seconds' run is "<0.01", not a 0.00 that reads as nothing."""
    return "<0.01" if 0 < hours < 0.005 else f"{hours:.2f}"


def _usd(value: float | None) -> str:
    """Dollars to the cent: "free" only when nothing was charged, "<$0.01" for a priced moment."""
    if value is None:
        return "-"
    if value == 0:
        return "free"
    return "<$0.01" if value < 0.005 else f"${value:.2f}"


def cost_table(doc: dict[str, Any]) -> Any:
    """The rows and their total as one table whose cells are never cut (piped, rows stay whole:
    tui.show.output.console)."""
    from rich.table import Table

    from tui.show.output import safe

    by = doc["by"]
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    heads = [by.upper()] + (["NAME", "TARGET"] if by == "job" else []) + \
        ["JOBS", "HOURS", "GPU HOURS", "ESTIMATE", "ACTUAL"]
    for i, head in enumerate(heads):
        table.add_column(head, no_wrap=True, justify="left" if i < heads.index("JOBS") else "right")
    for row in doc["rows"]:
        jobs = f"{row['jobs']}" + (f" ({row['running']} running)" if row["running"] else "")
        cells = [safe(row["key"], single_line=True)]
        if by == "job":
            cells += [safe(row["name"], single_line=True), safe(row["target"] or "-", single_line=True)]
        cells += [jobs, _h(row["hours"]), _h(row["gpu_hours"]), _usd(row["estimate"]), _usd(row["cost"])]
        table.add_row(*cells)
    t = doc["total"]
    table.add_row(*(["total"] + (["", ""] if by == "job" else [])
                    + [str(t["jobs"]), _h(t["hours"]), _h(t["gpu_hours"]), _usd(t["estimate"]),
                       _usd(t["cost"])]), style="bold")
    return table


def report_lines(doc: dict[str, Any], since_text: str) -> list[Any]:
    """What `gpu cost` prints: a heading, the table, then quota, credits and budget lines."""
    from tui.show.output import markup, safe

    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(_ts(doc["since"])))
    out: list[Any] = [markup("[bold]spend since {since}[/] ({span}), by {by}", since=since,
                             span=safe(since_text, single_line=True), by=doc["by"])]
    if not doc["rows"]:
        out.append("no job ran in this period")
    else:
        out.append(cost_table(doc))
        if any(r["running"] for r in doc["rows"]):
            out.append("running jobs count up to now")
    for target, rep in (doc.get("skypilot") or {}).items():
        out.append(markup("{target}: SkyPilot's cost report says {usd} for {n} cluster(s) up {hours} h "
                          "(from its start until it was down; ACTUAL counts from asking for each launch to the job's end)",
                          target=safe(target, single_line=True), usd=_usd(rep["reported"]),
                          n=rep["clusters"], hours=_h(rep["hours_up"])))
    for q in doc["quota"]:
        line = (f"{q['used_hours']:.2f} of {q['allowed_hours']:g} free hours used in the last 7 days, "
                f"{q['left_hours']:.2f} left")
        rep = q.get("reported")
        if rep and rep.get("used_hours") is not None:
            line += (f"; Kaggle counted {rep['used_hours']:g} of {rep['allowed_hours']:g} h "
                     f"(read {rep['read_at'][:16].replace('T', ' ')}"
                     + (f", resets {str(rep['resets_at'])[:16].replace('T', ' ')}" if rep.get("resets_at") else "")
                     + ")")
        out.append(markup("[bold]quota[/] {target}: {line}", target=safe(q["target"], single_line=True), line=line))
    for c in doc["credits"]:
        out.append(markup("[bold]credits[/] {target}: {line}", target=safe(c["target"], single_line=True),
                          line=f"${c['spent']:.2f} of ${c['credits']:.2f} spent, ${c['left']:.2f} left"))
    out.append(markup("[bold]budget[/]: {line}", line=budget_text(doc["budget"])))
    if doc.get("agent_day"):
        out.append(markup("[bold]agent's day[/]: {line}", line=agent_day_text(doc["agent_day"])))
    return out


def agent_day_text(day: dict[str, Any]) -> str:
    """"1.50 of 12 h and $3.00 of $25.00 started by agents without you in the last 24 hours (2
    starts)": the estimates the approval rules count against approvals.agent_daily_hours and
    agent_daily_usd (core/engine/agentday.py); the dashboard header says it shorter."""
    starts = int(day.get("starts") or 0)
    return (f"{day['hours']:.2f} of {day['hours_limit']:g} h and ${day['usd']:.2f} of "
            f"${day['usd_limit']:.2f} started by agents without you in the last 24 hours "
            f"({starts} start{'s' * (starts != 1)}; past either limit an agent's job waits for you)")


def budget_text(budget: dict[str, Any]) -> str:
    """"$5.00 of $20.00 spent in the last 7 days, $15.00 left", or the spend alone with how to
    set a budget; the same figures the dashboard header shows."""
    spent = f"${budget['week_spend']:.2f}"
    if budget["weekly"] is None:
        return f"{spent} spent in the last 7 days; no weekly budget set (budget: {{weekly: 20}} in your config)"
    return f"{spent} of ${budget['weekly']:.2f} spent in the last 7 days, ${budget['left']:.2f} left"


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
