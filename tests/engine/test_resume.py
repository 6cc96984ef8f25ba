"""`gpu resume` and `gpu cancel --checkpoint`: an ended job goes on from its checkpoint.

Real local jobs through the real supervisor and store: a job that logs each step it does to
its outputs, saves a checkpoint every EVERY steps, and on gpu.should_checkpoint() saves where
it is and waits to be stopped. Cancelled with --checkpoint, then resumed: the same job id, the
next attempt, started right after the checkpoint the cancel brought home, and every step done
exactly once across the two attempts. A failed job resumes; a done one is refused with the
reason; an agent's resume over MCP (the official client, over stdio) is held where the rules
hold an agent's job, and runs once a person approves it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import (gpu_exe, gpu_json, make_git_project, run_gpu, run_in_terminal,
                            wait_state)

pytestmark = pytest.mark.slow

STEPS = 30
EVERY = 10

TRAIN = f"""
import json, sys, time
import gpu

ckpt = gpu.checkpoint_dir() / "state.json"
start = json.loads(ckpt.read_text())["step"] + 1 if ckpt.exists() else 0
fail_at = int(sys.argv[sys.argv.index("--fail-at") + 1]) if "--fail-at" in sys.argv else None
print(f"attempt {{gpu.attempt()}} starts at step {{start}}", flush=True)
for step in range(start, {STEPS}):
    if gpu.should_checkpoint():
        ckpt.write_text(json.dumps({{"step": step - 1, "why": "asked"}}))
        gpu.checkpoint_saved()
        print(f"checkpointed on request after step {{step - 1}}", flush=True)
        while True:
            time.sleep(1)  # saved: it waits to be stopped
    time.sleep(0.25)
    with open(gpu.output_dir() / "steps.log", "a") as f:
        f.write(f"{{gpu.attempt()}} {{step}}\\n")
    print(f"step {{step}}", flush=True)
    if fail_at is not None and gpu.attempt() == 1 and step == fail_at:
        sys.exit(3)
    if step % {EVERY} == {EVERY} - 1:
        ckpt.write_text(json.dumps({{"step": step, "why": "periodic"}}))
        gpu.checkpoint_saved()
(gpu.output_dir() / "result.json").write_text(json.dumps({{"start": start, "attempt": gpu.attempt()}}))
"""


@pytest.fixture
def project(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPU_ROUTER_CKPT_EVERY_S", "0.3")
    return make_git_project(tmp_path / "p", {"train.py": TRAIN, "gpu.yaml": "script: train.py\n"})


def _steps(doc: dict) -> list[tuple[int, int]]:
    text = (Path(doc["outputs_dir"]) / "steps.log").read_text()
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def _wait_step(short: str, step: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f"step {step}\n" in run_gpu("logs", short).stdout:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {short} never reached step {step}: {run_gpu('logs', short).stdout}")


def test_cancel_with_a_checkpoint_then_resume_does_every_step_once(project: Path) -> None:
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    wait_state(short, {"running"})
    _wait_step(short, EVERY + 2)  # a periodic checkpoint (step EVERY-1) is behind it

    cancelled = gpu_json("cancel", short, "--checkpoint", "--grace", "30")
    assert cancelled["job"]["state"] == "cancelled", cancelled
    doc = gpu_json("status", short, "--verbose")
    reasons = [e["reason"] for e in doc["events"]]
    assert any(r.startswith("asked to checkpoint before it is cancelled") for r in reasons), reasons
    assert any("came home: stopping it" in r for r in reasons), reasons
    # the checkpoint it saved when asked, newer than the last periodic one, is kept as an output
    saved = json.loads((Path(doc["outputs_dir"]) / "checkpoint" / "state.json").read_text())
    assert saved["why"] == "asked" and saved["step"] > EVERY - 1, saved
    first = _steps(doc)
    assert max(s for _, s in first) == saved["step"]  # it stopped stepping once it saved

    resumed = gpu_json("resume", short)
    assert resumed["job"]["id"] == job_id and resumed["job"]["state"] in ("routing", "provisioning", "running")
    assert resumed["guidance"]["needs_approval"] is False
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    doc = gpu_json("status", short, "--verbose")
    assert done["state"] == "done", (doc["reason"], run_gpu("logs", short).stdout)
    assert doc["id"] == job_id and doc["attempt"] == 2

    # who resumed it and from which checkpoint, in the events
    back = next(e for e in doc["events"] if e["reason"].startswith("resumed by"))
    assert back["from"] == "cancelled" and back["to"] == "routing"
    assert back["data"]["checkpoint"]["generation"] >= 2 and "agent" in back["data"]["by"]
    placed = next(e for e in doc["events"] if e["reason"].startswith("resuming on local"))
    assert "from checkpoint" in placed["reason"]
    # a new plan, whose digest holds the resume
    assert doc["plan"]["resume"]["attempt"] == 2 and doc["digest"] != sub["job"]["digest"]

    result = json.loads((Path(doc["outputs_dir"]) / "result.json").read_text())
    assert result == {"start": saved["step"] + 1, "attempt": 2}
    steps = _steps(doc)
    assert sorted(s for _, s in steps) == list(range(STEPS))  # every step, once
    assert [s for a, s in steps if a == 2] == list(range(saved["step"] + 1, STEPS))
    assert f"attempt 2 starts at step {saved['step'] + 1}" in run_gpu("logs", short).stdout


def test_a_failed_job_resumes_and_a_done_one_is_refused(project: Path) -> None:
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "10", "--", "--fail-at", str(EVERY + 3),
                   cwd=project)
    short = sub["job"]["short_id"]
    failed = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    assert failed["state"] == "failed" and "status 3" in failed["reason"], failed

    assert gpu_json("resume", short)["job"]["attempt"] == 1  # placed: the next attempt starts
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    doc = gpu_json("status", short, "--verbose")
    assert doc["attempt"] == 2
    back = next(e for e in doc["events"] if e["reason"].startswith("resumed by"))
    assert back["from"] == "failed"
    result = json.loads((Path(doc["outputs_dir"]) / "result.json").read_text())
    assert result == {"start": EVERY, "attempt": 2}  # right after the periodic checkpoint
    # the last checkpoint of the resumed attempt is the job's output, as for any job
    assert json.loads((Path(doc["outputs_dir"]) / "checkpoint" / "state.json").read_text())["step"] == STEPS - 1

    refused = run_gpu("resume", short, "--json")
    assert refused.returncode != 0
    err = json.loads(refused.stdout)
    assert "is done" in err["error"] and "nothing to resume" in err["error"] and err["fix"]
    assert gpu_json("status", short)["attempt"] == 2  # nothing moved


def test_a_changed_checkpoint_is_not_resumed(project: Path) -> None:
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "10", "--", "--fail-at", str(EVERY + 1),
                   cwd=project)
    short = sub["job"]["short_id"]
    failed = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    assert failed["state"] == "failed"
    state = Path(failed["outputs_dir"]) / "checkpoint" / "state.json"
    state.write_text(json.dumps({"step": 25, "why": "edited"}))
    refused = run_gpu("resume", short)
    assert refused.returncode != 0 and "not the one that came home" in refused.stderr + refused.stdout
    assert gpu_json("status", short)["state"] == "failed"


async def test_an_agent_s_resume_over_mcp_is_held_and_a_person_approves_it(project: Path) -> None:
    from tests.tui.mcp.test_mcp import call, fails, session

    # a person submits it for 2 hours (no hold for a person); it is stopped with a checkpoint
    status, out = run_in_terminal([gpu_exe(), "submit", "--hours", "2", "--wait-s", "10"], "n", cwd=project)
    assert status == 0, out
    short = gpu_json("jobs")["jobs"][0]["short_id"]
    wait_state(short, {"running"})
    _wait_step(short, 3)
    async with session() as s:
        stopped = await call(s, "compute_job", action="cancel", job=short, checkpoint_first=True,
                             grace_s=30)
        assert stopped["job"]["state"] == "cancelled"
        held = await call(s, "compute_job", action="resume", job=short)
        # 2 hours is over an agent's limit: the rules hold the agent's resume for a person
        assert held["job"]["state"] == "awaiting_approval", held
        assert held["guidance"]["needs_approval"] is True and "agent" in held["guidance"]["tell_user"]
        assert held["guidance"]["next_call"]["tool"] == "compute_job"
        assert "must be one of" in await fails(s, "compute_job", action="approve", job=short)
        again = await fails(s, "compute_job", action="resume", job=short)
        assert "still awaiting_approval" in again
    doc = gpu_json("status", short, "--verbose")
    assert doc["attempt"] == 1 and "mcp" in next(
        e for e in doc["events"] if e["reason"].startswith("resumed by"))["actor"]

    status, out = run_in_terminal([gpu_exe(), "approve", short], short)
    assert status == 0, out
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    doc = gpu_json("status", short, "--verbose")
    steps = _steps(doc)
    assert doc["attempt"] == 2 and sorted(s for _, s in steps) == list(range(STEPS))
