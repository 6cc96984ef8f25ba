"""The words of the dashboard's header about money: this week's spend against the budget,
and the agent's day against its limits.

Plain functions of the budget document the feed reads (core.engine.spend), kept apart from
the app so each sentence can be checked without a screen.
"""

from __future__ import annotations


def spend_text(budget: dict | None) -> str | None:
    """The header's spend: "$3.20 of $20.00 this week" against a weekly budget, "$3.20 this
    week" without one, nothing when there is neither a budget nor any spend."""
    if not budget or (budget.get("weekly") is None and not budget.get("week_spend")):
        return agent_day_text(budget)
    spent = f"${budget['week_spend']:.2f}"
    if budget.get("weekly") is None:
        return f"{spent} this week"
    over = " (over budget)" if budget["week_spend"] > budget["weekly"] else ""
    text = f"{spent} of ${budget['weekly']:.2f} this week{over}"
    day = agent_day_text(budget)
    return f"{text} · {day}" if day else text


def agent_day_text(budget: dict | None) -> str | None:
    """The header's agent's day (issue 37): "agent's day 1.5 of 12 h, $3.00 of $25.00", the
    estimates of the agent's work that went on without a person in the last 24 hours against
    approvals.agent_daily_hours and agent_daily_usd, with "(limit reached)" once either is
    spent (an agent's next job then waits, a free one too once the hours are); nothing when no
    agent started anything in the last 24 hours."""
    day = (budget or {}).get("agent_day")
    if not day or not day.get("starts"):
        return None
    full = day["hours"] >= day["hours_limit"] - 1e-9 or day["usd"] >= day["usd_limit"] - 1e-9
    return (f"agent's day {day['hours']:g} of {day['hours_limit']:g} h, ${day['usd']:.2f} of "
            f"${day['usd_limit']:.2f}" + (" (limit reached)" if full else ""))
