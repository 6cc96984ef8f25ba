"""Kill rules and retries by cause, on the local target through the installed `gpu`, and the
rules' evaluation itself (read by core/config/killrules.py, judged by core/planning/killjudge.py)
over arbitrary metric streams."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.engine.metricfile import parse_rows
from core.config import killrules
from core.config.killrules import Rule
from core.planning import killjudge
from core.planning.killjudge import Facts
from tests.conftest import (assert_stopped_by_rule, gpu_json, make_git_project, run_gpu,
                            wait_state, write_user_config)

NAN_JOB = """
import time
import gpu

for step in range(200):
    loss = 1.0 / (step + 1) if step < 5 else float("nan")
    gpu.log(step=step, loss=loss)
    (gpu.output_dir() / "partial.txt").write_text(f"step {step}")
    if gpu.should_checkpoint():
        (gpu.checkpoint_dir() / "state").write_text(str(step))
        gpu.checkpoint_saved()
    time.sleep(0.2)
"""


@pytest.mark.slow  # a real job under the supervisor (the quick loop leaves it out)
def test_a_nan_kill_rule_stops_the_job_with_its_reason(home: Path, tmp_path: Path) -> None:
    write_user_config("rules:\n  checkpoint_grace_s: 2\n  kill_rules:\n    - nan_metric: [loss]\n")
    project = make_git_project(tmp_path / "p", {"nan.py": NAN_JOB})
    sub = gpu_json("submit", "nan.py", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    assert_stopped_by_rule(short, "nan_metric (loss)", "loss became NaN or infinite")
    assert "kill rule nan_metric" in run_gpu("status", short).stdout
    # the NaN never became a stored number: only the five finite losses are there
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] >= 5
    assert all(math.isfinite(v) for v in [gpu_json("metrics", short)["metrics"]["loss"]["last"]])


EXIT_JOB = """
import sys
import gpu

print("attempt", gpu.attempt(), flush=True)
code = int(sys.argv[1])
sys.exit(code if (gpu.attempt() == 1 or sys.argv[2] == "always") else 0)
"""


@pytest.mark.slow  # a real job under the supervisor (the quick loop leaves it out)
def test_a_failing_job_is_not_retried_and_a_listed_exit_code_is_retried_once(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"exit.py": EXIT_JOB,
                                                "gpu.yaml": "retry_on_exit_codes: [75]\n"})

    def run(*args: str) -> dict:
        sub = gpu_json("submit", "exit.py", "--hours", "0.1", "--wait-s", "10", "--", *args, cwd=project)
        wait_state(sub["job"]["short_id"], {"done", "failed", "cancelled"}, timeout=120)
        return gpu_json("status", sub["job"]["short_id"], "--verbose")

    failing = run("3", "once")  # not listed: failed at once
    assert failing["state"] == "failed" and failing["attempt"] == 1 and failing["exit_code"] == 3
    assert failing["reason"].startswith("exited with status 3")

    retried = run("75", "once")  # listed: tried again, and the second attempt succeeds
    assert retried["state"] == "done" and retried["attempt"] == 2, retried["reason"]
    assert any("retry_on_exit_codes" in e["reason"] for e in retried["events"])

    stubborn = run("75", "always")  # listed, fails again: retried once (max_retries 1), then failed
    assert stubborn["state"] == "failed" and stubborn["attempt"] == 2 and stubborn["exit_code"] == 75


# -- the rules themselves --------------------------------------------------------------------

metric_names = st.sampled_from(["loss", "acc", "val/loss", "lr"])
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**6, 10**6)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.dictionaries(metric_names, values, min_size=1, max_size=4), max_size=30))
def test_nan_is_caught_in_any_metric_stream_and_only_there(rows: list[dict]) -> None:
    """Rows as a script writes them with json.dumps (NaN literals included): the nan_metric rule
    fires exactly when some value is NaN or infinite, naming a metric that was."""
    data = b"".join(json.dumps({"step": i, **row}).encode() + b"\n" for i, row in enumerate(rows))
    parsed = parse_rows(data)
    bad = {k for row in rows for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
    assert set(parsed.nonfinite) == bad
    fired = killjudge.evaluate([Rule("nan_metric")], Facts(now=time.time(), nonfinite=parsed.nonfinite))
    assert (fired is not None) == bool(bad)
    if fired:
        assert any(f"metric {k} became" in fired[1] for k in bad)
    only_acc = killjudge.evaluate([Rule("nan_metric", metrics=("acc",))],
                                  Facts(now=time.time(), nonfinite=parsed.nonfinite))
    assert (only_acc is not None) == ("acc" in bad)
    assert all(math.isfinite(v) for _, _, v, _ in parsed.rows)  # never stored as numbers


def test_no_improvement_gpu_util_and_budget() -> None:
    now = 10_000.0
    rule = killrules.parse([{"no_improvement": {"metric": "loss", "minutes": 1, "mode": "min"}}])[0]
    improving = [(now - 100 + i, 10.0 - i) for i in range(100)]
    assert killjudge.evaluate([rule], Facts(now=now, series={"loss": improving})) is None
    stuck = [(now - 100, 1.0)] + [(now - 99 + i, 2.0) for i in range(99)]
    assert "has not improved for 1 min" in killjudge.evaluate([rule], Facts(now=now, series={"loss": stuck}))[1]
    util = killrules.parse([{"gpu_util_below": {"percent": 10, "minutes": 1}}])[0]
    assert killjudge.evaluate([util], Facts(now=now)) is None  # no samples: never fires
    short = [(now - 30, 1.0)]
    assert killjudge.evaluate([util], Facts(now=now, series={"gpu/util": short})) is None
    idle = [(now - 70 + i, 2.0) for i in range(70)]
    assert killjudge.evaluate([util], Facts(now=now, series={"gpu/util": idle})) is not None
    busy = idle[:-1] + [(now, 90.0)]
    assert killjudge.evaluate([util], Facts(now=now, series={"gpu/util": busy})) is None
    budget = killrules.parse([{"over_budget": True}])[0]
    assert killjudge.evaluate([budget], Facts(now=now, spent=9.0)) is None  # no budget set
    assert killjudge.evaluate([budget], Facts(now=now, spent=9.0, budget_per_job=5.0)) is not None
    own = killrules.parse([{"over_budget": {"dollars": 2}}])[0]
    assert killjudge.evaluate([own], Facts(now=now, spent=3.0, budget_per_job=5.0)) is not None


@pytest.mark.parametrize("bad,says", [
    ([{"nan_metric": False}], "nan_metric is true"),
    ([{"bogus": 1}], "unknown kill rule"),
    ([{"no_improvement": {"metric": "loss"}}], "takes metric, minutes"),
    ([{"no_improvement": {"metric": "loss", "minutes": 0}}], "above 0"),
    ([{"gpu_util_below": {"percent": 120, "minutes": 1}}], "at most 100"),
    ("nan", "a list of rules"),
])
def test_bad_kill_rules_are_refused(bad, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        killrules.parse(bad)


def test_a_job_only_adds_to_the_users_rules(home: Path, tmp_path: Path) -> None:
    from core.config.request import build_request
    from core.config.user import load

    write_user_config("rules:\n  max_migrations: 2\n  kill_rules: [{nan_metric: true}]\n")
    cfg = load()
    assert cfg.rules.max_migrations == 2 and cfg.rules.kill_rules == [Rule("nan_metric")]
    project = make_git_project(tmp_path / "p", {
        "a.py": "", "gpu.yaml": "kill_rules:\n  - over_budget: {dollars: 1}\nrestart: allow\n"})
    req = build_request(project, {"script": "a.py"})
    own = killrules.parse(req.kill_rules)
    assert killrules.combined(cfg.rules.kill_rules, own) == [Rule("nan_metric"), own[0]]
    assert req.restart == "allow"
    write_user_config("rules:\n  max_migrations: 50\n")
    from core.errors import UserError

    with pytest.raises(UserError, match="loosen"):
        load()


def test_unreachable_grace_s_is_accepted_and_checked(home: Path) -> None:
    from core.config.user import load
    from core.errors import UserError

    write_user_config("targets:\n  box: {kind: ssh, host: h.example, unreachable_grace_s: 30, "
                      "connect_timeout_s: 5, probe_ttl_s: 10}\n"
                      "  hpc: {kind: slurm, local: true, requeue: false, unreachable_grace_s: 120}\n")
    cfg = load()
    assert cfg.targets["box"].options["unreachable_grace_s"] == 30
    assert cfg.targets["hpc"].options["requeue"] is False
    for bad in ("0", "-3", "soon"):
        write_user_config(f"targets:\n  box: {{kind: ssh, host: h.example, unreachable_grace_s: {bad}}}\n")
        with pytest.raises(UserError, match="unreachable_grace_s"):
            load()
