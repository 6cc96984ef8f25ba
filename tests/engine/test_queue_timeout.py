"""A job that cannot start where it was placed goes where it can.

Real daemons on loopback: the session's one-node Slurm (its partition set DOWN, so a job stays
PENDING), a real OpenSSH server as the other host, and the local target's sandbox. Nothing here
mocks Slurm, SSH or the supervisor. `queue_timeout_s` is set to a few seconds in each config.
"""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_exe, gpu_json, make_git_project, run_gpu, run_in_terminal, wait_state, write_user_config

pytestmark = pytest.mark.slow

PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable
QUICK = "import gpu\n(gpu.output_dir() / 'where.txt').write_text('ran')\nprint('ran', flush=True)\n"
LONG = "import time\nprint('holding the slot', flush=True)\ntime.sleep(300)\n"


def _ssh_line(name: str, sshd, tmp_path: Path, extra: str = "") -> str:
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    return (f"  {name}: {{kind: ssh, host: {o['host']}, port: {o['port']}, user: {o['user']}, key: {o['key']},\n"
            f"        known_hosts: {o['known_hosts']}, root: {o['root']}, python: {o['python']}{extra}}}\n")


def _reasons(short: str) -> list[str]:
    return [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]


@pytest.fixture
def full_node(slurm):
    """The cluster's one node taken by someone else's job (`--exclusive`), so ours stays
    PENDING; everything cancelled and the partition UP again after."""
    r = slurm.run("sbatch", "--parsable", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300")
    assert r.returncode == 0, r.stderr
    yield
    slurm.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)
    slurm.run("scontrol", "update", "PartitionName=debug", "State=UP")


def test_a_job_pending_in_a_down_partition_moves_to_ssh_and_is_held_there_by_the_rules(
        slurm, full_node, sshd, home: Path, tmp_path: Path) -> None:
    """The job waits PENDING behind another job, then its partition is set DOWN (so it will
    not run there); past lab's queue_timeout_s (6 s) it is
    cancelled in Slurm and planned again without lab: ssh-box costs money over the agent's
    per-job budget, so the new plan waits for a person; approved, it runs there."""
    write_user_config(
        "targets:\n  local: {kind: local, enabled: false}\n"
        f"  lab: {{kind: slurm, local: true, root: {tmp_path / 'slurm-root'}, python: {PYTHON},\n"
        f"        queue_timeout_s: 6, env: {{SLURM_CONF: {slurm.conf}}}}}\n"
        + _ssh_line("ssh-box", sshd, tmp_path, ", price_per_hour: 2")
        + "budget:\n  per_job: 0.05\n")
    project = make_git_project(tmp_path / "p", {"q.py": QUICK, "gpu.yaml": "script: q.py\ngpus: 0\n"})
    sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "10", cwd=project)  # an agent's job
    short = sub["job"]["short_id"]
    assert sub["job"]["provider"] == "lab" and sub["guidance"]["needs_approval"] is False, sub
    sid = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # PENDING in Slurm, and gpu status says why
        doc = gpu_json("status", short, "--verbose")
        sid = doc["handle"].get("slurm_job_id") or sid
        if doc["state"] == "provisioning" and doc["reason"].startswith("queued: "):
            break
        assert doc["state"] in ("routing", "provisioning"), doc
        time.sleep(0.2)
    else:
        raise AssertionError(f"the job never showed as queued: {doc}")
    r = slurm.run("scontrol", "update", "PartitionName=debug", "State=DOWN")
    assert r.returncode == 0, r.stderr

    held = wait_state(short, {"awaiting_approval", "failed", "done"}, timeout=90)
    assert held["state"] == "awaiting_approval" and held["provider"] == "ssh-box", held
    reasons = _reasons(short)
    moved = next(r for r in reasons if r.startswith("not started on lab within its queue_timeout_s (6 s): queued: "))
    assert "cancelled on lab" in moved, reasons
    assert any("routed again to ssh-box" in r for r in reasons), reasons
    assert any("over your per-job budget" in r for r in reasons if r.startswith("held for approval")), reasons
    status = gpu_json("status", short)
    assert "not started on lab within its queue_timeout_s" in status["guidance"]["queue"], status
    assert status["guidance"]["needs_approval"] is True
    # cancelled in Slurm: squeue no longer lists it as pending
    gone = time.monotonic() + 30
    while slurm.run("squeue", "-h", "-j", sid, "-t", "PENDING").stdout.strip() and time.monotonic() < gone:
        time.sleep(0.3)
    assert not slurm.run("squeue", "-h", "-j", sid, "-t", "PENDING").stdout.strip()

    code, out = run_in_terminal([gpu_exe(), "approve", short], short)
    assert code == 0, out
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    doc = gpu_json("status", short, "--verbose")
    assert done["state"] == "done", (doc["reason"], run_gpu("logs", short).stdout)
    assert doc["provider"] == "ssh-box" and doc["attempt"] == 2
    assert any(r.startswith("migrating from lab to ssh-box (approved)") for r in _reasons(short)), _reasons(short)
    assert (Path(doc["outputs_dir"]) / "where.txt").read_text() == "ran"


def test_a_busy_local_target_sends_the_next_job_to_the_idle_ssh_host_and_a_pinned_one_waits(
        sshd, home: Path, tmp_path: Path) -> None:
    """local runs one job at a time (max_jobs 1) and holds a long one: `gpu plan` sends the next
    job to the idle ssh host and says why, and it runs there; one pinned to local waits for the
    slot past the timeout, saying so; one placed on local while both were busy moves to the ssh
    host after local's queue_timeout_s."""
    write_user_config("targets:\n  local: {kind: local, max_jobs: 1, queue_timeout_s: 3}\n"
                      + _ssh_line("box", sshd, tmp_path, ", max_jobs: 1"))
    project = make_git_project(tmp_path / "p", {"long.py": LONG, "q.py": QUICK})
    a = gpu_json("submit", "long.py", "--hours", "0.1", "--name", "a", "--wait-s", "10", cwd=project)["job"]
    assert a["provider"] == "local", a
    wait_state(a["short_id"], {"running"}, timeout=60)

    plan = gpu_json("plan", "q.py", "--hours", "0.1", cwd=project)["plan"]
    assert plan["target"] == "box", plan
    assert "local is busy (1 of 1 in use): box can start it now" in plan["reasons"], plan
    assert plan["passed_over"]["local"] == "busy (1 of 1 in use); box can start it now"
    b = gpu_json("submit", "long.py", "--hours", "0.1", "--name", "b", "--wait-s", "10", cwd=project)["job"]
    assert b["provider"] == "box", b
    wait_state(b["short_id"], {"running"}, timeout=90)

    pinned_plan = gpu_json("plan", "q.py", "--hours", "0.1", "--provider", "local", cwd=project)["plan"]
    assert pinned_plan["target"] == "local"
    assert "local is busy (1 of 1 in use): the job waits for a free slot there (pinned there)" in pinned_plan["reasons"]
    c = gpu_json("submit", "q.py", "--hours", "0.1", "--name", "c", "--provider", "local", "--wait-s", "10",
                 cwd=project)["job"]
    assert c["provider"] == "local" and c["state"] == "routing", c
    d = gpu_json("submit", "q.py", "--hours", "0.1", "--name", "d", "--wait-s", "10", cwd=project)["job"]
    assert d["provider"] == "local" and d["state"] == "routing", d  # both busy: the free local slot first

    # the pinned job keeps waiting past local's queue_timeout_s, and says so
    deadline = time.monotonic() + 60
    while not any("pins it to local, so it keeps waiting" in r for r in _reasons(c["short_id"])):
        assert time.monotonic() < deadline, gpu_json("status", c["short_id"], "--verbose")
        time.sleep(0.3)
    assert gpu_json("status", c["short_id"])["state"] == "routing"

    gpu_json("cancel", b["short_id"])  # box is free: d, past local's timeout, goes there
    done = wait_state(d["short_id"], {"done", "failed", "cancelled"}, timeout=120)
    doc = gpu_json("status", d["short_id"], "--verbose")
    assert done["state"] == "done" and doc["provider"] == "box", doc
    assert any(r.startswith("waited ") and "for a free slot on local, past its queue_timeout_s (3 s)" in r
               and "routed again to box" in r for r in _reasons(d["short_id"])), _reasons(d["short_id"])
    assert gpu_json("status", c["short_id"])["state"] == "routing"  # still pinned, still waiting

    gpu_json("cancel", a["short_id"])
    done = wait_state(c["short_id"], {"done", "failed", "cancelled"}, timeout=90)
    assert done["state"] == "done" and done["provider"] == "local", done


def test_a_pinned_job_keeps_its_place_in_the_slurm_queue_past_the_timeout_and_says_why(
        slurm, full_node, home: Path, tmp_path: Path) -> None:
    """Pinned with --provider lab: past queue_timeout_s it is not cancelled (it keeps its place
    in Slurm's queue), and its reason, one event and guidance.queue say so."""
    write_user_config(
        "targets:\n  local: {kind: local, enabled: false}\n"
        f"  lab: {{kind: slurm, local: true, root: {tmp_path / 'slurm-root'}, python: {PYTHON},\n"
        f"        queue_timeout_s: 2, env: {{SLURM_CONF: {slurm.conf}}}}}\n")
    project = make_git_project(tmp_path / "p", {"q.py": QUICK, "gpu.yaml": "script: q.py\ngpus: 0\n"})
    short = gpu_json("submit", "--hours", "0.1", "--provider", "lab", "--wait-s", "10", cwd=project)["job"]["short_id"]
    deadline = time.monotonic() + 60
    while "pins it to lab, so it keeps waiting" not in (doc := gpu_json("status", short))["reason"]:
        assert time.monotonic() < deadline and doc["state"] in ("routing", "provisioning"), doc
        time.sleep(0.3)
    assert doc["reason"].startswith("not started on lab within its queue_timeout_s (2 s): queued: "), doc
    assert "pins it to lab" in doc["guidance"]["queue"]
    time.sleep(2)  # further looks keep the reason and add no second event
    doc = gpu_json("status", short, "--verbose")
    assert doc["state"] == "provisioning" and "pins it to lab" in doc["reason"], doc
    assert sum("pins it to lab" in e["reason"] for e in doc["events"]) == 1, doc["events"]
    sid = doc["handle"]["slurm_job_id"]
    assert slurm.run("squeue", "-h", "-j", sid, "-t", "PENDING").stdout.strip(), "cancelled in Slurm"
