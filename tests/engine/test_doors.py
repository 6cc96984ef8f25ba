"""Every door into running, tried as an agent would (issue 37, items 1 and 5).

Through the installed command with `--json` (no terminal: an agent's run) and over MCP with the
official client over stdio; a person's side at a real pty. Each example of the issue:

- an overrun hold, undone by the agent's cancel then resume: held again, with its history;
  each lap offers the same hours, never doubled again;
- a person's no to an overrun hold is final: `denied`, and an agent's resume is refused;
- a held sweep cancelled and resumed: every point held again on the group's totals, approved
  at once by a person;
- a group's cancel with a checkpoint asks every running point to save first.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import (gpu_exe, gpu_json, make_git_project, resumable_script, run_gpu,
                            run_in_terminal, wait_state, write_user_config)

pytestmark = pytest.mark.slow

# saves a checkpoint when asked (gpu.should_checkpoint()) and exits: a 0.0005 h (1.8 s) job is
# stopped past its hours x1.25 and held for a person ("overrun")
OVERRUNS = """
import json, sys, time
import gpu
ckpt = gpu.checkpoint_dir() / "step.json"
step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
print(f"attempt {gpu.attempt()} from step {step}", flush=True)
while step < 4000:
    if gpu.should_checkpoint():
        ckpt.write_text(json.dumps({"step": step}))
        sys.exit(0)
    time.sleep(0.05)
    step += 1
"""
QUICK = "print('ran', flush=True)\n"


def _held_overrun(tmp_path: Path) -> tuple[Path, dict]:
    """An agent's job held for its overrun: (its project, its status)."""
    # restart: allow (the agent writes gpu.yaml): its resume is judged, not refused for want of
    # a settled checkpoint
    project = make_git_project(tmp_path / "p", {"slow.py": OVERRUNS, "gpu.yaml": "restart: allow\n"})
    sub = gpu_json("submit", "slow.py", "--hours", "0.0005", "--wait-s", "0", cwd=project)["job"]
    doc = wait_state(sub["short_id"], {"awaiting_approval", "done", "failed"}, timeout=180)
    assert doc["state"] == "awaiting_approval", doc
    status = gpu_json("status", sub["short_id"], "--verbose")
    assert "well past its" in status["guidance"]["tell_user"]
    return project, status


def _never_ran_again(short: str, attempt: int) -> dict:
    """A few seconds on, the job did not start another attempt: no provisioning since."""
    time.sleep(3)
    doc = gpu_json("status", short, "--verbose")
    assert doc["attempt"] == attempt, doc["events"][-6:]
    return doc


def test_an_overrun_hold_survives_an_agents_cancel_and_resume(home: Path, tmp_path: Path) -> None:
    project, status = _held_overrun(tmp_path)
    short, offered = status["short_id"], status["plan"]["hours"]
    assert offered == pytest.approx(0.001)
    for lap in range(2):  # each lap: held again, for the same offer, never doubled again
        assert gpu_json("cancel", short, cwd=project)["job"]["state"] == "cancelled"
        doc = gpu_json("resume", short, cwd=project)
        assert doc["job"]["state"] == "awaiting_approval", (lap, doc)
        g = doc["guidance"]
        assert g["needs_approval"] is True
        assert "well past its 0.0005 h estimate" in g["tell_user"]
        assert "without a person's yes" in g["tell_user"] and "cancelled by" in g["tell_user"]
        assert gpu_json("status", short, "--verbose")["plan"]["hours"] == pytest.approx(offered)
    doc = _never_ran_again(short, status["attempt"])
    assert doc["state"] == "awaiting_approval"


async def test_an_overrun_hold_survives_cancel_and_resume_over_mcp(home: Path, tmp_path: Path) -> None:
    from tests.tui.mcp.test_mcp import call, session

    project, status = _held_overrun(tmp_path)
    short = status["short_id"]
    async with session() as s:
        stopped = await call(s, "gpu_cancel", job=short)
        assert stopped["job"]["state"] == "cancelled"
        held = await call(s, "compute_job", action="resume", job=short)
        assert held["job"]["state"] == "awaiting_approval", held
        assert held["guidance"]["needs_approval"] and "without a person's yes" in held["guidance"]["tell_user"]
    _never_ran_again(short, status["attempt"])


def test_a_persons_deny_of_an_overrun_hold_is_final(home: Path, tmp_path: Path) -> None:
    project, status = _held_overrun(tmp_path)
    short = status["short_id"]
    code, out = run_in_terminal([gpu_exe(), "deny", short], short, cwd=project)
    assert code == 0 and "denied" in out, out
    assert gpu_json("status", short)["state"] == "denied"
    refused = run_gpu("resume", short, "--json", cwd=project)
    assert refused.returncode != 0
    assert "denied" in refused.stderr + refused.stdout and "a person refused" in refused.stderr + refused.stdout
    assert _never_ran_again(short, status["attempt"])["state"] == "denied"


async def test_a_denied_job_is_refused_over_mcp(home: Path, tmp_path: Path) -> None:
    from tests.tui.mcp.test_mcp import fails, session

    project, status = _held_overrun(tmp_path)
    short = status["short_id"]
    code, out = run_in_terminal([gpu_exe(), "deny", short], short, cwd=project)
    assert code == 0, out
    async with session() as s:
        assert "denied" in await fails(s, "compute_job", action="resume", job=short)
    assert gpu_json("status", short)["state"] == "denied"


def _held_sweep(tmp_path: Path) -> tuple[Path, dict]:
    """An agent's sweep of four 0.4 h points (1.6 h in all) with restart: allow, held."""
    project = make_git_project(tmp_path / "p", {"a.py": QUICK, "gpu.yaml": "restart: allow\n"})
    doc = gpu_json("submit", "a.py", "--sweep", "LR=1,2,3,4", "--hours", "0.4", "--wait-s", "0",
                   cwd=project)
    assert doc["group"]["states"] == {"awaiting_approval": 4}, doc["group"]
    return project, doc


def test_a_held_sweep_cancelled_and_resumed_is_held_again_on_its_totals(home: Path, tmp_path: Path) -> None:
    project, doc = _held_sweep(tmp_path)
    group = doc["group"]["short_id"]
    cancelled = gpu_json("cancel", group, cwd=project)
    assert {j["state"] for j in cancelled["jobs"]} == {"cancelled"}
    resumed = gpu_json("resume", group, cwd=project)
    assert [j["state"] for j in resumed["jobs"]] == ["awaiting_approval"] * 4, resumed["jobs"]
    status = gpu_json("status", group)
    assert status["group"]["approval"] == "held" and status["group"]["states"] == {"awaiting_approval": 4}
    assert status["group"]["hours"] == 1.6 and status["group"]["digest"] != doc["group"]["digest"]
    reason = gpu_json("status", doc["jobs"][0]["short_id"], "--verbose")["reason"]
    assert "4 live points together" in reason and "1.6 h" in reason, reason
    time.sleep(2)
    assert all(gpu_json("status", j["short_id"])["state"] == "awaiting_approval" for j in doc["jobs"])
    # a person approves the whole sweep once; its four points run
    code, out = run_in_terminal([gpu_exe(), "approve", group], group, cwd=project)
    assert code == 0 and "4 points will run" in out, out
    for job in doc["jobs"]:
        assert wait_state(job["short_id"], {"done", "failed", "cancelled", "denied"}, timeout=120)["state"] == "done"


async def test_a_held_sweep_cancelled_and_resumed_over_mcp_is_held_again(home: Path, tmp_path: Path) -> None:
    from tests.tui.mcp.test_mcp import call, session

    project, doc = _held_sweep(tmp_path)
    group = doc["group"]["short_id"]
    async with session() as s:
        stopped = await call(s, "compute_job", action="cancel", job=group)
        assert {j["state"] for j in stopped["jobs"]} == {"cancelled"}
        resumed = await call(s, "compute_job", action="resume", job=group)
        assert [j["state"] for j in resumed["jobs"]] == ["awaiting_approval"] * 4
    time.sleep(2)
    assert gpu_json("status", group)["group"]["states"] == {"awaiting_approval": 4}


def _running_sweep(tmp_path: Path, name: str) -> tuple[Path, dict]:
    """Two points of a job that saves a checkpoint each step, both running a few steps."""
    write_user_config("targets:\n  local: {kind: local, max_jobs: 4}\n")
    project = make_git_project(tmp_path / name, {"train.py": resumable_script(60)})
    doc = gpu_json("submit", "train.py", "--sweep", "LR=1,2", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    for job in doc["jobs"]:
        wait_state(job["short_id"], {"running"}, timeout=120)
    time.sleep(3)  # a few steps each
    return project, doc


def _saved_before_the_stop(short: str) -> None:
    doc = gpu_json("status", short, "--verbose")
    assert doc["state"] == "cancelled", doc
    reasons = [e["reason"] for e in doc["events"]]
    assert any("asked to checkpoint before it is cancelled" in r for r in reasons), " | ".join(reasons[-8:])
    assert doc["reason"] == "cancelled by request after it was asked to checkpoint", doc["reason"]
    saved = Path(doc["outputs_dir"]) / "checkpoint" / "steps.json"  # settled with its outputs
    assert saved.exists() and json.loads(saved.read_text()), "no checkpoint came home"


def test_a_group_cancel_with_checkpoint_asks_every_point_to_save(home: Path, tmp_path: Path) -> None:
    project, doc = _running_sweep(tmp_path, "p")
    out = gpu_json("cancel", "--checkpoint", "--grace", "60", doc["group"]["short_id"], cwd=project)
    assert {j["state"] for j in out["jobs"]} == {"cancelled"}
    for job in doc["jobs"]:
        _saved_before_the_stop(job["short_id"])


async def test_a_group_cancel_checkpoint_first_over_mcp(home: Path, tmp_path: Path) -> None:
    from tests.tui.mcp.test_mcp import call, session

    project, doc = _running_sweep(tmp_path, "q")
    async with session() as s:
        out = await call(s, "compute_job", action="cancel", job=doc["group"]["short_id"],
                         checkpoint_first=True, grace_s=60)
    assert {j["state"] for j in out["jobs"]} == {"cancelled"}
    for job in doc["jobs"]:
        _saved_before_the_stop(job["short_id"])
