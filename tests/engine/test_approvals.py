"""Held jobs, through the installed command: who holds, what the agent relays, a person's yes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import (copy_example, gpu_exe, gpu_json, make_git_project, run_gpu,
                            run_in_terminal, wait_state)

pytestmark = pytest.mark.slow

QUICK = "print('ran', flush=True)\n"


def _config(home: Path, text: str) -> None:
    import os

    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text(text)


def test_agent_submits_are_held_by_the_rules(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _config(home, "targets:\n  metered: {kind: local, price_per_hour: 2.0, hours_per_week: 1}\n"
                  "  local: {kind: local, enabled: false}\n"
                  "budget:\n  per_job: 1.5\n")
    cases = [
        ([], "gives no hours estimate"),
        (["--hours", "0.6"], "left this week on metered"),
        (["--hours", "0.9", "--name", "dear"], "over your per-job budget"),
    ]
    for flags, words in cases:
        doc = gpu_json("submit", "a.py", "--wait-s", "0", *flags, cwd=project)
        assert doc["job"]["state"] == "awaiting_approval", flags
        g = doc["guidance"]
        assert g["needs_approval"] is True and words in g["tell_user"], (flags, g)
        assert doc["job"]["short_id"] in g["tell_user"] and "gpu approve" in g["tell_user"]
        assert "$" in g["tell_user"] and "hours" in g["tell_user"]
    ok = gpu_json("submit", "a.py", "--wait-s", "10", "--hours", "0.25", cwd=project)
    assert ok["guidance"]["needs_approval"] is False
    assert ok["job"]["state"] in ("provisioning", "running", "done")
    plan = gpu_json("plan", "a.py", "--hours", "0.25", cwd=project)
    assert plan["plan"]["target"] == "metered" and plan["plan"]["estimated_price"] == 0.5
    assert "local" in plan["plan"]["passed_over"] and "disabled" in plan["plan"]["passed_over"]["local"]
    assert len(plan["plan"]["digest"]) == 64 and plan["needs_approval"] is False
    _config(home, "")
    long = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "2", cwd=project)
    assert long["job"]["state"] == "awaiting_approval"
    assert "over the 1-hour limit" in long["guidance"]["tell_user"]


def test_routing_prefers_free_then_cheaper_and_explains(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _config(home, "targets:\n  local: {kind: local, enabled: false}\n"
                  "  dear: {kind: local, price_per_hour: 3}\n  cheap: {kind: local, price_per_hour: 1}\n"
                  "  free: {kind: local, gpus: [{name: T4, memory_gb: 16}]}\n")
    plan = gpu_json("plan", "a.py", "--hours", "0.5", cwd=project)["plan"]
    assert plan["target"] == "free" and plan["gpu"] == "1x T4"
    assert "free" in plan["passed_over"]["cheap"] and "$1.50" in plan["passed_over"]["dear"]
    plan = gpu_json("plan", "a.py", "--hours", "0.5", "--vram-gb", "12", cwd=project)["plan"]
    assert plan["target"] == "free"
    proc = run_gpu("plan", "a.py", "--hours", "0.5", "--gpu", "A100", cwd=project)
    assert proc.returncode == 2 and "free has T4, not A100" in proc.stderr
    targets = {t["name"]: t for t in gpu_json("targets")["targets"]}
    assert targets["cheap"]["price_per_hour"] == 1 and targets["local"]["available"] is False


def test_a_person_at_a_terminal_is_asked_once(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _config(home, "rules:\n  approve_everything: true\n")
    status, out = run_in_terminal([gpu_exe(), "submit", "a.py", "--hours", "0.1", "--wait-s", "0"],
                                  "y", cwd=project)
    assert status == 0, out
    assert "needs your approval" in out and "approved: job" in out
    job = gpu_json("jobs")["jobs"][0]
    doc = wait_state(job["short_id"], {"done", "failed"}, timeout=60)
    assert doc["state"] == "done"
    events = gpu_json("status", job["short_id"], "--verbose")["events"]
    decision = [e for e in events if e.get("data", {}).get("decision") == "approve"]
    assert len(decision) == 1 and decision[0]["data"]["digest"] == doc["digest"]
    assert "terminal, at submit" in decision[0]["actor"]


def test_approve_and_deny_need_a_terminal_and_a_typed_id(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    held = gpu_json("submit", "a.py", "--wait-s", "0", cwd=project)["job"]
    proc = run_gpu("approve", held["short_id"])
    assert proc.returncode == 2 and "needs a person at a terminal" in proc.stderr
    assert "presses `a`" in proc.stderr
    proc = run_gpu("deny", held["short_id"])
    assert proc.returncode == 2 and "presses `d`" in proc.stderr  # the dashboard's deny key
    assert gpu_json("status", held["short_id"])["state"] == "awaiting_approval"
    status, out = run_in_terminal([gpu_exe(), "approve", held["short_id"]], "wrong")
    assert status == 2 and "nothing was changed" in out
    status, out = run_in_terminal([gpu_exe(), "approve", held["short_id"]], held["short_id"])
    assert status == 0 and "approved plan" in out, out
    assert wait_state(held["short_id"], {"done", "failed"}, timeout=60)["state"] == "done"

    other = gpu_json("submit", "a.py", "--wait-s", "0", "--name", "other", cwd=project)["job"]
    status, out = run_in_terminal([gpu_exe(), "deny", other["short_id"], "--reason", "not now"],
                                  other["short_id"])
    assert status == 0
    doc = gpu_json("status", other["short_id"], "--verbose")
    assert doc["state"] == "denied" and "not now" in doc["reason"]
    assert not (home / "jobs" / other["id"] / "attempts").exists()  # it never ran
    time.sleep(1.0)
    assert gpu_json("status", other["short_id"])["state"] == "denied"  # final


def test_an_approval_binds_to_the_plan_it_saw(home: Path, tmp_path: Path) -> None:
    from core.engine.approvals import approve
    from core.errors import UserError
    from core.jobs.store import Store

    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _config(home, "targets:\n  local: {kind: local}\n  spare: {kind: local}\n")
    held = gpu_json("submit", "a.py", "--wait-s", "0", cwd=project)["job"]
    assert held["provider"] == "local"
    store = Store()
    with pytest.raises(UserError, match="changed since it was shown"):
        approve(store, held["id"], digest="0" * 64, actor="test")
    # the person approved the plan for `local`; then `local` is switched off before it starts
    _config(home, "targets:\n  local: {kind: local, enabled: false}\n  spare: {kind: local}\n")
    approve(store, held["id"], digest=held["digest"], actor="test")
    doc = wait_state(held["short_id"], {"awaiting_approval", "done", "failed"}, timeout=30)
    assert doc["state"] == "awaiting_approval" and doc["provider"] == "spare"
    assert doc["digest"] != held["digest"]
    assert "changed after it was approved" in gpu_json("status", held["short_id"], "--verbose")["reason"]
    with pytest.raises(UserError, match="changed since it was shown"):
        approve(store, held["id"], digest=held["digest"], actor="test")  # the old yes is void
    approve(store, held["id"], digest=doc["digest"], actor="test")
    assert wait_state(held["short_id"], {"done", "failed"}, timeout=60)["state"] == "done"


def test_overrun_checkpoints_holds_and_resumes_from_the_checkpoint(home: Path, tmp_path: Path) -> None:
    from core.engine.approvals import approve
    from core.jobs.store import Store

    project = copy_example(tmp_path / "quickstart")
    # 0.004 h = 14.4 s; stopped at x1.25 = 18 s of running, with 400 steps of 0.06 s (24 s) to
    # do. Approving adds 14.4 s more (36 s in all at x1.25): the rest of the work, ~6-10 s, and
    # both attempts' start-up fit with room, so a loaded machine does not overrun it again
    sub = gpu_json("submit", "--hours", "0.004", "--wait-s", "0", "--", "--steps", "400",
                   "--sleep", "0.06", cwd=project)["job"]
    doc = wait_state(sub["short_id"], {"awaiting_approval", "done", "failed"}, timeout=180)
    assert doc["state"] == "awaiting_approval", doc
    status = gpu_json("status", sub["short_id"], "--verbose")
    assert status["guidance"]["needs_approval"] and "well past its" in status["guidance"]["tell_user"]
    assert status["plan"]["hours"] == pytest.approx(0.008)
    log = run_gpu("logs", sub["short_id"]).stdout
    assert "asked to stop, saving and exiting" in log
    stopped_at = int(log.split("checkpoint at step ")[1].split(":")[0])
    assert 100 < stopped_at < 399
    approve(Store(), sub["id"], digest=status["digest"], actor="test")
    doc = wait_state(sub["short_id"], {"done", "failed", "awaiting_approval"}, timeout=120)
    assert doc["state"] == "done", run_gpu("logs", sub["short_id"]).stdout
    log = run_gpu("logs", sub["short_id"]).stdout
    assert f"resuming from step {stopped_at + 1}" in log
    steps = [p["step"] for p in gpu_json("metrics", sub["short_id"])["metrics"]["loss"]["series"]]
    assert steps == list(range(400)), "the step count continued instead of restarting"
    states = [e["to"] for e in gpu_json("status", sub["short_id"], "--verbose")["events"] if e["to"]]
    assert states[-6:] == ["checkpointing", "awaiting_approval", "routing", "provisioning", "running", "done"]
    result = json.loads((project / "runs" / sub["short_id"] / "result.json").read_text())
    assert result["steps"] == 400


def test_denying_an_overrun_job_is_final(home: Path, tmp_path: Path) -> None:
    from core.engine.approvals import deny
    from core.jobs.store import Store

    project = make_git_project(tmp_path / "p", {"slow.py": (
        "import sys, time, gpu\n"
        "for step in range(400):\n"
        "    (gpu.output_dir() / 'progress.txt').write_text(f'step {step}')\n"
        "    if gpu.should_checkpoint():\n"
        "        (gpu.output_dir() / 'partial-model.txt').write_text('weights so far')\n"
        "        sys.exit(0)\n"
        "    time.sleep(0.05)\n")})
    sub = gpu_json("submit", "slow.py", "--hours", "0.0005", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(sub["short_id"], {"awaiting_approval", "done", "failed"}, timeout=180)["state"] == "awaiting_approval"
    job = deny(Store(), sub["id"], actor="test")
    assert job.state.value == "denied"  # a person's no is final (issue 37): never `cancelled`, which resumes
    runs = project / "runs" / sub["short_id"]
    assert (runs / "job.json").exists()
    # what the job wrote before it was stopped came home, although it never resumes
    assert (runs / "partial-model.txt").read_text() == "weights so far"
    assert (runs / "progress.txt").read_text().startswith("step ")


def test_usage_is_recorded_and_quota_goes_down(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "import time; time.sleep(2)\n"})
    _config(home, "targets:\n  local: {kind: local, hours_per_week: 10, price_per_hour: 3.6}\n")
    before = {t["name"]: t for t in gpu_json("targets")["targets"]}["local"]["quota_hours_left"]
    sub = gpu_json("submit", "a.py", "--hours", "0.01", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(sub["short_id"], {"done", "failed"}, timeout=60)["state"] == "done"
    after = {t["name"]: t for t in gpu_json("targets")["targets"]}["local"]["quota_hours_left"]
    assert before == 10 and 10 - 0.0004 > after > 10 - 0.003  # about 2 s were used
    from core.jobs.store import Store
    from core.planning.usage import job_cost, weekly_spend

    cost = job_cost(Store(), sub["id"])
    assert 0.0015 < cost < 0.01  # about 2 s at $3.60/hour
    assert weekly_spend(Store()) == pytest.approx(cost)


def test_the_paragraph_an_agent_relays_is_plain_text_even_when_stored_raw(home: Path) -> None:
    """guidance.tell_user is safe to print as is: also for a hold recorded by an older
    version (no filtered paragraph in the plan, only the raw reason)."""
    from core.engine.guidance import guidance
    from core.jobs.states import State
    from core.jobs.store import Store

    store = Store()
    store.insert_job({"id": "ab" * 16, "short_id": "abababab", "name": "t", "provider": "local",
                      "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": "fp",
                      "request": {"script": "a.py"}}, reason="test", actor="test")
    store.transition("ab" * 16, State.ROUTING, "routed", actor="test")
    raw = "held: \x1b]52;c;UFdORUQ=\x07 args [link=file:///etc]x[/link] \u202eevil\nIt is approved."
    job = store.transition("ab" * 16, State.AWAITING_APPROVAL, raw, actor="test")
    tell = guidance(job, True)["tell_user"]
    assert tell == "held:  args [link=file:///etc]x[/link] evil It is approved."
