"""Each approval rule trips, and its twin just under the threshold passes (issue 40).

core/planning/policy.evaluate is the one place the rules are; each case here sets up a plan
that exactly one rule holds, asserts that rule (its name and the words of its reason), and a
twin just under the rule's threshold that no rule holds. A rule dropped from `evaluate`, or a
threshold moved (`>` for `>=`, a fraction changed), fails its pair.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.config.user import Rules
from core.planning.policy import agent_day_hold, evaluate
from core.planning.usage import AgentDay
from core.providers.base import TargetInfo

EPS = 1e-6


def info(**kw) -> TargetInfo:
    return TargetInfo(name=kw.pop("name", "box"), kind=kw.pop("kind", "local"), available=True, **kw)


def judge(*, hours=0.5, secrets=(), price=0.0, target=None, rules=None, weekly=0.0,
          interactive=True, smoke=False, day=None, not_secret=()):
    return evaluate(hours=hours, secrets=list(secrets), price=price, info=target or info(),
                    rules=rules or Rules(), weekly_spend=weekly, interactive=interactive, smoke=smoke,
                    day=day, not_secret=list(not_secret))


def rules_of(holds) -> list[str]:
    return [h.rule for h in holds]


# (name, kwargs that trip exactly this rule, kwargs just under its threshold, words of the reason)
CASES = [
    ("everything", dict(rules=Rules(approve_everything=True)), dict(rules=Rules(approve_everything=False)),
     "your config asks for approval of every job"),
    ("agent_money", dict(interactive=False, price=5.0 + 0.01, target=info(price_per_hour=10.02)),
     dict(interactive=False, price=5.0, target=info(price_per_hour=10.0)),
     "is over the $5.00 an agent may spend without you"),
    ("agent_hours", dict(interactive=False, hours=1.0 + 0.01), dict(interactive=False, hours=1.0),
     "over the 1-hour limit for unattended jobs"),
    ("agent_hours (no estimate)", dict(interactive=False, hours=None), dict(interactive=True, hours=None),
     "gives no hours estimate"),
    ("agent_day (hours)", dict(interactive=False, hours=0.5, day=AgentDay(hours=11.5 + 0.01, usd=0, starts=3)),
     dict(interactive=False, hours=0.5, day=AgentDay(hours=11.5, usd=0, starts=3)),
     "the 12-hour daily limit (approvals.agent_daily_hours)"),
    ("agent_day (dollars)", dict(interactive=False, price=1.0, day=AgentDay(hours=0, usd=24.0 + 0.01, starts=2)),
     dict(interactive=False, price=1.0, day=AgentDay(hours=0, usd=24.0, starts=2)),
     "the $25.00 daily limit (approvals.agent_daily_usd)"),
    ("sandbox (local)", dict(interactive=False, target=info(unsandboxed_why="bubblewrap is not installed")),
     dict(interactive=True, target=info(unsandboxed_why="bubblewrap is not installed")),
     "without a sandbox, where it could reach your keychain"),
    ("sandbox (host)", dict(interactive=False, target=info(kind="ssh", unsandboxed_why="no bwrap on the host")),
     dict(interactive=False, target=info(kind="ssh", unsandboxed_why="no bwrap on the host",
                                         details={"sandbox": {"agents_without_sandbox": True}})),
     "set targets.box.agents_without_sandbox: true"),
    ("secrets", dict(secrets=["HF_TOKEN"]), dict(secrets=[]), "it reads HF_TOKEN from your keychain"),
    ("not_secret", dict(interactive=False, not_secret=["EPOCHS"]), dict(interactive=True, not_secret=["EPOCHS"]),
     "passes EPOCHS in env as not secret"),
    ("quota (hours)", dict(hours=5.0 + 0.01, target=info(quota_hours_left=10.0)),
     dict(hours=5.0, target=info(quota_hours_left=10.0)), "of the 10 h left this week on box"),
    ("quota (hours unknown)", dict(hours=None, target=info(quota_hours_left=10.0)),
     dict(hours=0.1, target=info(quota_hours_left=10.0)), "an unknown number of hours"),
    ("quota (credits)", dict(price=5.0 + 0.01, target=info(credits_left=10.0)),
     dict(price=5.0, target=info(credits_left=10.0)), "of the $10.00 of credits left on box"),
    ("budget_job", dict(price=3.0 + 0.01, rules=Rules(budget_per_job=3.0)),
     dict(price=3.0, rules=Rules(budget_per_job=3.0)), "over your per-job budget of $3.00"),
    ("budget_week", dict(price=1.0 + 0.01, weekly=9.0, rules=Rules(budget_weekly=10.0)),
     dict(price=1.0, weekly=9.0, rules=Rules(budget_weekly=10.0)), "would pass your weekly budget of $10.00"),
]


@pytest.mark.parametrize("name, trips, under, words", CASES, ids=[c[0] for c in CASES])
def test_each_rule_trips_and_its_twin_under_the_threshold_passes(name, trips, under, words) -> None:
    rule = name.split(" ")[0]
    held = judge(**trips)
    assert rules_of(held) == [rule], f"{name}: expected exactly [{rule}], got {[(h.rule, h.reason) for h in held]}"
    assert words in held[0].reason, held[0].reason
    passed = judge(**under)
    assert passed == [], f"{name}: the twin under the threshold was held: {[(h.rule, h.reason) for h in passed]}"


def test_the_credits_rule_names_the_price_and_the_credits() -> None:
    """The mutation experiment's case: the credits rule deleted from evaluate passed every test."""
    [hold] = judge(price=7.5, target=info(credits_left=10.0))
    assert hold.rule == "quota"
    assert hold.reason == "it would spend $7.50 of the $10.00 of credits left on box"


def test_a_stricter_quota_fraction_moves_both_quota_thresholds() -> None:
    strict = Rules(quota_fraction=0.25)
    assert rules_of(judge(hours=2.5 + 0.01, rules=strict, target=info(quota_hours_left=10.0))) == ["quota"]
    assert judge(hours=2.5, rules=strict, target=info(quota_hours_left=10.0)) == []
    assert rules_of(judge(price=2.5 + 0.01, rules=strict, target=info(credits_left=10.0))) == ["quota"]
    assert judge(price=2.5, rules=strict, target=info(credits_left=10.0)) == []


def test_a_smoke_run_without_hours_is_judged_by_its_cap() -> None:
    """An agent's smoke run with no estimate counts smoke_max_minutes: 90 minutes is over 1 h."""
    assert judge(interactive=False, hours=None, smoke=True) == []
    [hold] = judge(interactive=False, hours=None, smoke=True, rules=Rules(smoke_max_minutes=90))
    assert hold.rule == "agent_hours" and "for 1.5 hours" in hold.reason


def test_a_person_s_job_is_never_held_by_an_agent_s_rule() -> None:
    agent_only = dict(hours=50.0, price=100.0, target=info(price_per_hour=2.0, unsandboxed_why="no bwrap"),
                      day=AgentDay(hours=100, usd=100, starts=9), not_secret=["EPOCHS"])
    assert judge(interactive=True, **agent_only) == []
    assert set(rules_of(judge(interactive=False, **agent_only))) == {
        "agent_money", "agent_hours", "agent_day", "sandbox", "not_secret"}


def test_the_agent_day_hold_at_its_exact_limits() -> None:
    rules = Rules()
    assert agent_day_hold(AgentDay(hours=11.0, usd=20.0, starts=4), 1.0, 5.0, rules) is None
    over = agent_day_hold(AgentDay(hours=11.0, usd=20.0, starts=4), 1.01, 5.0, rules)
    assert over.rule == "agent_day" and "the 12-hour daily limit" in over.reason and "$25.00" not in over.reason
    over = agent_day_hold(AgentDay(hours=11.0, usd=20.0, starts=4), 1.0, 5.01, rules)
    assert "the $25.00 daily limit" in over.reason and "12-hour" not in over.reason
    lower = replace(rules, agent_daily_hours=6.0)
    assert "the 6-hour daily limit" in agent_day_hold(AgentDay(hours=5.5, usd=0, starts=1), 0.6, 0, lower).reason
