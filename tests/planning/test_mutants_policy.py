"""The approval rules' words and edges (issue 40: survivors of `python bench/mutation.py --module
policy`).

tests/planning/test_choke_policy.py trips each rule with a twin just under it. These pin what a person
reads before saying yes (each hold's whole reason, the paragraph an agent relays, the cost line,
a plan's note about a host without a sandbox) and the edges the twins leave open: the agent's day
exactly at its limits, a negative or missing estimate, a job in a container judged as run without
the sandbox.
"""

from __future__ import annotations

from core.config.user import Rules
from core.planning.policy import agent_day_hold, as_run, describe_cost, evaluate, plan_notes, tell_user
from core.planning.usage import AgentDay
from core.providers.base import CONTAINER_NOTE, TargetInfo


def info(**kw) -> TargetInfo:
    return TargetInfo(name=kw.pop("name", "box"), kind=kw.pop("kind", "local"), available=True, **kw)


def test_every_rule_at_once_in_its_own_words() -> None:
    holds = evaluate(hours=3.0, secrets=["WANDB_API_KEY", "HF_TOKEN"], price=12.5,
                     info=info(price_per_hour=4.1666, quota_hours_left=4.0, credits_left=10.0,
                               unsandboxed_why="bubblewrap is not installed"),
                     rules=Rules(approve_everything=True, budget_per_job=1.0, budget_weekly=2.0),
                     weekly_spend=1.5, interactive=False, day=AgentDay(hours=10, usd=20, starts=1),
                     not_secret=["B", "A"])
    assert [(h.rule, h.reason) for h in holds] == [
        ("everything", "your config asks for approval of every job"),
        ("agent_money", "it was submitted by an agent and its estimated price $12.50 (4.1666 $/hour on box) "
                        "is over the $5.00 an agent may spend without you"),
        ("agent_hours", "it was submitted by an agent (not a person at a terminal) for 3 hours, over the "
                        "1-hour limit for unattended jobs"),
        ("agent_day", "the work agents started without you in the last 24 hours comes to 10 hours and "
                      "$20.00 (1 start), and this one's 3 hours and $12.50 would pass the 12-hour daily "
                      "limit (approvals.agent_daily_hours) and the $25.00 daily limit (approvals.agent_daily_usd)"),
        ("sandbox", "it was submitted by an agent and would run on box without a sandbox, where it could "
                    "reach your keychain and gpu-router's own files (bubblewrap is not installed)"),
        ("secrets", "it reads HF_TOKEN, WANDB_API_KEY from your keychain"),
        ("not_secret", "it was submitted by an agent and passes A, B in env as not secret (not_secret), "
                       "which the secret check would judge; check the values in the plan before you approve"),
        ("quota", "it would use 3 h of the 4 h left this week on box (the limit without approval is 50% "
                  "of what is left)"),
        ("quota", "it would spend $12.50 of the $10.00 of credits left on box"),
        ("budget_job", "its estimated price $12.50 is over your per-job budget of $1.00"),
        ("budget_week", "with $1.50 spent in the last 7 days, its $12.50 would pass your weekly budget of $2.00"),
    ]


def test_an_agents_job_with_no_estimate_on_a_host_without_a_sandbox() -> None:
    holds = evaluate(hours=None, secrets=[], price=0, rules=Rules(), weekly_spend=0, interactive=False,
                     info=info(kind="ssh", quota_hours_left=4.0, unsandboxed_why="no bwrap"),
                     day=AgentDay(hours=1, usd=1, starts=2))
    assert [(h.rule, h.reason) for h in holds] == [
        ("agent_hours", "it was submitted by an agent (not a person at a terminal) and gives no hours estimate"),
        ("sandbox", "it was submitted by an agent and would run on box: no bwrap (to let agents' jobs run "
                    "there without you, set targets.box.agents_without_sandbox: true in your config)"),
        ("quota", "it would use an unknown number of hours of the 4 h left this week on box (the limit "
                  "without approval is 50% of what is left)"),
    ]


def test_the_agents_day_at_its_limits() -> None:
    rules = Rules()  # 12 hours, 25 dollars
    assert agent_day_hold(AgentDay(hours=11.5, usd=24.0, starts=3), 0.5, 1.0, rules) is None  # exactly at both
    held = agent_day_hold(AgentDay(hours=11.75, usd=24.5, starts=2), 0.5, 1.0, rules)
    assert held is not None and held.rule == "agent_day"
    assert held.reason == ("the work agents started without you in the last 24 hours comes to 11.75 hours "
                           "and $24.50 (2 starts), and this one's 0.5 hours and $1.00 would pass the "
                           "12-hour daily limit (approvals.agent_daily_hours) and the $25.00 daily limit "
                           "(approvals.agent_daily_usd)")
    only_usd = agent_day_hold(AgentDay(hours=0, usd=24.5, starts=1), 0.5, 1.0, rules)
    assert only_usd is not None and "agent_daily_hours" not in only_usd.reason \
        and only_usd.reason.endswith("would pass the $25.00 daily limit (approvals.agent_daily_usd)")
    only_h = agent_day_hold(AgentDay(hours=11.75, usd=0, starts=1), 0.5, 0.0, rules)
    assert only_h is not None and "agent_daily_usd" not in only_h.reason
    # a negative or missing estimate counts as none, never as hours or dollars given back
    assert agent_day_hold(AgentDay(hours=12.0, usd=25.0, starts=5), -3.0, -9.0, rules) is None
    assert agent_day_hold(AgentDay(hours=12.0, usd=25.0, starts=5), None, 0.0, rules) is None
    assert agent_day_hold(AgentDay(hours=12.25, usd=0, starts=5), -3.0, 0.0, rules) is not None


def test_the_cost_line_and_the_paragraph_an_agent_relays() -> None:
    assert describe_cost({"hours": 2.5, "price_per_hour": 1.25, "estimated_price": 3.125}) == \
        "for 2.5 hours, estimated $3.12 at $1.25/hour"
    assert describe_cost({"hours": 2.5, "price_per_hour": 1.25}) == "for 2.5 hours, estimated $0.00 at $1.25/hour"
    assert describe_cost({}) == "with no time estimate, free (no charge on this target)"
    plan = {"command": ["python", "a.py", "--x", "1\n2"], "target": "box", "gpu": "T4", "hours": 1,
            "price_per_hour": 0}
    assert tell_user("ab12", "tr\x1b[2Jain", plan, [{"reason": "r1"}, {"reason": "r2"}]) == (
        "gpu-router job ab12 (train) is waiting for your approval: it would run `python a.py --x 1 2` on "
        "box (T4) for 1 hours, free (no charge on this target). It is held because r1; r2. To approve it, "
        "run `gpu approve ab12` in a terminal or press `a` on it in `gpu dash`; to refuse it, run "
        "`gpu deny ab12`.")
    assert "It is held because a rule in your config." in tell_user("ab12", "n", {"command": []}, [])


def test_a_plans_note_about_a_host_without_a_sandbox() -> None:
    assert plan_notes(info(kind="ssh", unsandboxed_why="no bwrap",
                           details={"sandbox": {"agents_without_sandbox": True}})) == [
        "box: no bwrap; agents' jobs run there without you (targets.box.agents_without_sandbox)"]
    assert plan_notes(info(kind="slurm", unsandboxed_why="no bwrap")) == ["box: no bwrap"]
    assert plan_notes(info(kind="pbs", unsandboxed_why="no bwrap",
                           details={"sandbox": {"agents_without_sandbox": "yes"}})) == ["box: no bwrap"]
    assert plan_notes(info(kind="local", unsandboxed_why="x")) == []
    assert plan_notes(info(kind="ssh")) == []


def test_a_job_in_a_container_is_judged_as_run_without_the_sandbox() -> None:
    host = info(kind="slurm")
    assert as_run(host, {"container": "img.sif"}).unsandboxed_why == CONTAINER_NOTE
    assert as_run(info(kind="ssh", details={"container": "img.sif"}), {}).unsandboxed_why == CONTAINER_NOTE
    assert as_run(host, {}) is host
    assert as_run(info(kind="local"), {"container": "img.sif"}).unsandboxed_why is None
    kept = info(kind="pbs", unsandboxed_why="no bwrap")
    assert as_run(kept, {"container": "img.sif"}).unsandboxed_why == "no bwrap"
    held = evaluate(hours=0.5, secrets=[], price=0, info=as_run(host, {"container": "img.sif"}), rules=Rules(),
                    weekly_spend=0, interactive=False)
    assert [h.rule for h in held] == ["sandbox"]


def test_the_days_slack_is_not_over_the_limit() -> None:
    """The 1e-9 slack absorbs float sums (0.1 + 0.2): a day that lands on it exactly is within."""
    rules = Rules()
    assert agent_day_hold(AgentDay(hours=(12 + 1e-9) - 0.5, usd=0, starts=1), 0.5, 0.0, rules) is None
    assert agent_day_hold(AgentDay(hours=0, usd=(25 + 1e-9) - 1.0, starts=1), 0.0, 1.0, rules) is None


def test_a_plan_without_a_command_still_gets_its_paragraph() -> None:
    text = tell_user("ab12", "n", {"target": "box"}, [{"reason": "r"}])
    assert "it would run `` on box (None)" in text and "It is held because r." in text
