"""The rule table: each rule held by one request and not by its near twin."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.errors import UserError
from core.planning.policy import evaluate, tell_user
from core.providers.base import TargetInfo
from core.config.user import Rules

FREE = TargetInfo("local", "local", True)


def _holds(**kw):
    args = dict(hours=0.5, secrets=[], price=0.0, info=FREE, rules=Rules(), weekly_spend=0.0,
                interactive=False)
    args.update(kw)
    return [h.rule for h in evaluate(**args)]


@pytest.mark.parametrize("trips,passes", [
    # an agent (no terminal) with no hours, or over an hour
    (dict(hours=None), dict(hours=None, interactive=True)),
    (dict(hours=1.5), dict(hours=1.0)),
    # keychain secrets
    (dict(secrets=["HF_TOKEN"]), dict(secrets=[])),
    # over half of a target's remaining quota
    (dict(hours=0.6, info=TargetInfo("k", "local", True, quota_hours_left=1.0)),
     dict(hours=0.5, info=TargetInfo("k", "local", True, quota_hours_left=1.0))),
    # over the per-job budget
    (dict(price=2.5, rules=Rules(budget_per_job=2.0)), dict(price=2.0, rules=Rules(budget_per_job=2.0))),
    # over the weekly budget
    (dict(price=1.0, weekly_spend=9.5, rules=Rules(budget_weekly=10.0)),
     dict(price=0.5, weekly_spend=9.5, rules=Rules(budget_weekly=10.0))),
    # an agent's job estimated over approvals.agent_max_usd (5 dollars), even under an hour
    (dict(hours=0.5, price=5.01), dict(hours=0.5, price=5.0)),
    (dict(hours=0.5, price=2.5, rules=Rules(agent_max_usd=2.0)), dict(hours=0.5, price=50.0, interactive=True)),
    # an agent's smoke run with no hours counts as its cap; a longer cap than the hour limit holds
    (dict(hours=None, smoke=True, rules=Rules(agent_max_hours=0.1)), dict(hours=None, smoke=True)),
    # a stricter config: every job
    (dict(rules=Rules(approve_everything=True)), dict(rules=Rules())),
])
def test_each_rule_trips_and_its_twin_passes(trips: dict, passes: dict) -> None:
    assert _holds(**trips), trips
    assert _holds(**passes) == [], passes


def test_a_tighter_agent_limit_holds_shorter_jobs() -> None:
    assert _holds(hours=0.5, rules=Rules(agent_max_hours=0.25)) == ["agent_hours"]


def test_the_money_hold_names_the_price_and_the_limit() -> None:
    dear = TargetInfo("box", "ssh", True, price_per_hour=12.0)
    holds = evaluate(hours=0.5, secrets=[], price=6.0, info=dear, rules=Rules(), weekly_spend=0,
                     interactive=False)
    assert [h.rule for h in holds] == ["agent_money"]
    assert "$6.00" in holds[0].reason and "$5.00" in holds[0].reason and "box" in holds[0].reason


def test_the_user_config_lowers_agent_max_usd_and_never_raises_it(home) -> None:
    from core.config import user as userconfig
    from core.paths import user_config_file

    assert userconfig.load().rules.agent_max_usd == 5.0
    user_config_file().write_text("approvals:\n  agent_max_usd: 2.5\nrules:\n  smoke_max_minutes: 3\n")
    cfg = userconfig.load()
    assert (cfg.rules.agent_max_usd, cfg.rules.smoke_max_minutes) == (2.5, 3.0)
    for text in ("approvals:\n  agent_max_usd: 6\n", "rules:\n  smoke_max_minutes: 30\n"):
        user_config_file().write_text(text)
        with pytest.raises(UserError, match="would loosen a rule"):
            userconfig.load()


def test_tell_user_names_job_hours_price_rule_and_how_to_approve() -> None:
    plan = {"command": ["train.py", "--epochs", "3"], "target": "box", "gpu": "1x RTX 4090",
            "hours": 2.0, "price_per_hour": 0.4, "estimated_price": 0.8}
    holds = [h.to_json() for h in evaluate(hours=2.0, secrets=[], price=0.8, info=FREE, rules=Rules(),
                                           weekly_spend=0, interactive=False)]
    text = tell_user("1a2b3c4d", "train", plan, holds)
    for words in ("1a2b3c4d", "train", "2 hours", "$0.80", "over the 1-hour limit",
                  "gpu approve 1a2b3c4d", "gpu dash", "gpu deny 1a2b3c4d", "box"):
        assert words in text, words
    assert "\n" not in text


def test_the_user_config_cannot_loosen_rules(home, tmp_path) -> None:
    from core.config import user as userconfig
    from core.paths import user_config_file

    user_config_file().write_text("rules:\n  agent_max_hours: 5\n")
    with pytest.raises(UserError, match="would loosen a rule"):
        userconfig.load()
    user_config_file().write_text("rules:\n  agent_max_hours: 0.25\n  overrun_factor: 1.1\n"
                                  "budget:\n  per_job: 3\n")
    cfg = userconfig.load()
    assert cfg.rules.agent_max_hours == 0.25 and cfg.rules.budget_per_job == 3.0


_UNSAFE = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


@settings(max_examples=examples(150), deadline=None)
@given(args=st.lists(st.text(max_size=30), max_size=6), target=st.text(max_size=12), reason=st.text(max_size=30))
def test_tell_user_is_one_plain_line_whatever_the_args(args: list[str], target: str, reason: str) -> None:
    """The paragraph quotes the job's args: an agent relays it and the CLI prints it as is, so
    no escape, control or bidi character and no newline (a fake line of gpu-router's) is in it."""
    import re

    plan = {"command": ["train.py", *args], "target": target, "gpu": "cpu", "hours": None}
    text = tell_user("1a2b3c4d", "train", plan, [{"rule": "everything", "reason": reason}])
    assert not re.search(_UNSAFE, text), repr(text)
    assert text.startswith("gpu-router job 1a2b3c4d (train) is waiting for your approval")
    assert text.endswith("to refuse it, run `gpu deny 1a2b3c4d`.")
