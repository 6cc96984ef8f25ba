"""End to end through the installed `gpu` command on the local target: a user's first run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.runtime import jobprocs
from tests.conftest import (copy_example, gpu_json, make_git_project, run_gpu, wait_process_gone,
                            wait_state)

pytestmark = pytest.mark.slow


def test_example_runs_to_done_and_comes_home(home: Path, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "--wait-s", "10", cwd=project)
    assert set(sub) == {"job", "guidance", "submitted", "bundle"}
    assert sub["submitted"] is True
    job = sub["job"]
    for key in ("id", "short_id", "name", "state", "provider", "created_at", "outputs_dir"):
        assert key in job, key
    assert job["provider"] == "local" and job["name"] == "quickstart"
    assert sub["guidance"]["follow"] == f"gpu logs -f {job['short_id']}"
    assert sub["guidance"]["needs_approval"] is False
    assert set(sub["bundle"]) <= {"files", "bytes", "left_out", "hint", "warnings"}
    assert sub["bundle"]["files"] >= 4

    done = wait_state(job["short_id"], {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", job["short_id"]).stdout
    assert done["exit_code"] == 0

    out = Path(job["outputs_dir"])
    assert out == project / "runs" / job["short_id"]
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 60 and abs(result["w"] - 3) < 1.0

    doc = json.loads((out / "job.json").read_text())
    assert doc["job"]["state"] == "done"
    assert doc["job"]["request"]["script"] == "train.py"
    assert doc["job"]["plan"]["digest"] == doc["job"]["digest"]
    states = [e["to"] for e in doc["events"] if e["to"]]
    assert states == ["queued", "routing", "provisioning", "running", "done"]
    assert doc["metrics"]["loss"]["points"] == 60

    log = run_gpu("logs", job["short_id"]).stdout
    assert "done: w=" in log and "step   50" in log
    assert (out / "job.log").read_text().count("done: w=") == 1

    metrics = gpu_json("metrics", job["short_id"])["metrics"]
    assert metrics["loss"]["points"] == 60
    assert metrics["loss"]["min"] < metrics["loss"]["series"][0]["value"]
    assert [p["step"] for p in metrics["loss"]["series"]] == list(range(60))
    human = run_gpu("metrics", job["short_id"]).stdout
    assert "loss" in human and "60" in human

    jobs = gpu_json("jobs")["jobs"]
    assert [j["short_id"] for j in jobs] == [job["short_id"]]


def test_logs_follow_streams_until_the_end(home: Path, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "p")
    sub = gpu_json("submit", "--wait-s", "0", "--", "--steps", "30", "--sleep", "0.05", cwd=project)
    proc = run_gpu("logs", "-f", sub["job"]["short_id"], timeout=180)
    assert proc.returncode == 0
    assert "done: w=" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"-- job {sub['job']['short_id']} done: exited with status 0")


def test_second_job_with_same_dependencies_installs_nothing(home: Path, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "p")
    first = gpu_json("submit", "--wait-s", "0", "--name", "one", "--", "--steps", "3", "--sleep", "0", cwd=project)
    wait_state(first["job"]["short_id"], {"done"}, timeout=180)
    code1 = home / "jobs" / first["job"]["id"] / "code"
    inodes = {p.relative_to(code1): p.stat().st_ino for p in code1.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    second = gpu_json("submit", "--wait-s", "0", "--name", "two", "--", "--steps", "3", "--sleep", "0", cwd=project)
    wait_state(second["job"]["short_id"], {"done"}, timeout=180)
    # the first job wrote nothing into its code folder: the second took it over (the same files)
    code2 = home / "jobs" / second["job"]["id"] / "code"
    assert not code1.exists() and inodes
    assert {rel: (code2 / rel).stat().st_ino for rel in inodes} == inodes
    log1 = run_gpu("logs", first["job"]["short_id"]).stdout
    log2 = run_gpu("logs", second["job"]["short_id"]).stdout
    assert "creating environment" in log1
    assert "reusing environment" in log2 and "pip" not in log2.lower().replace("gpu-router", "")
    assert len(list((home / "venvs").glob("*/.ready"))) == 1


def test_cancel_stops_the_whole_process_group(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "spawn.py": (
            "import subprocess, sys, time, os\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "open('child.pid', 'w').write(str(child.pid))\n"
            "print('child', child.pid, flush=True)\n"
            "time.sleep(600)\n"),
    })
    sub = gpu_json("submit", "spawn.py", "--wait-s", "10", "--hours", "0.1", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=60)
    pidfile = next(home.glob(f"jobs/{sub['job']['id']}/code/child.pid"), None)
    deadline = time.monotonic() + 30
    while pidfile is None or not pidfile.exists():
        assert time.monotonic() < deadline, "the job never wrote its child's pid"
        time.sleep(0.1)
        pidfile = next(home.glob(f"jobs/{sub['job']['id']}/code/child.pid"), None)
    # the job sees its own pid namespace: its processes are found on this machine by the marker
    procs = jobprocs.marked_pids(f"{sub['job']['id']}:1")
    assert len(procs) >= 3, procs  # bubblewrap's init, the job, its child (and bubblewrap)
    res = gpu_json("cancel", short, timeout=60)
    assert res["job"]["state"] == "cancelled"
    for pid in procs:
        wait_process_gone(pid, 10, "a process of the job survived cancel")
    assert (project / "runs" / short / "job.json").exists()
    again = run_gpu("cancel", short)
    assert again.returncode == 2 and "already ended" in again.stderr


def test_cancel_before_launch_and_unknown_ids(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "import time; time.sleep(30)\n"})
    # one slot: the second job waits in routing until the first ends
    busy = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "5", "--name", "busy", cwd=project)
    waiting = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "5", "--name", "waiting", cwd=project)
    assert waiting["job"]["state"] == "routing"
    assert "waiting for a free slot on local" in waiting["job"]["reason"]
    res = gpu_json("cancel", waiting["job"]["short_id"])
    assert res["job"]["state"] == "cancelled"
    gpu_json("cancel", busy["job"]["short_id"])
    missing = run_gpu("status", "ffffffff")
    assert missing.returncode == 2 and "no job matches" in missing.stderr


def test_a_failing_script_ends_failed_with_its_status(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"bad.py": "import sys\nprint('boom')\nsys.exit(3)\n"})
    sub = gpu_json("submit", "bad.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert doc["state"] == "failed" and doc["exit_code"] == 3
    assert "exited with status 3" in doc["reason"]
    assert "boom" in run_gpu("logs", sub["job"]["short_id"]).stdout


def test_command_line_scripts_and_data(home: Path, tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "rows.csv").write_text("a,b\n1,2\n")
    project = make_git_project(tmp_path / "p", {
        "run.sh": "echo shell says $1\ncat \"$GPU_ROUTER_DATA_DIR/ds/rows.csv\"\n",
    })
    sub = gpu_json("submit", "bash run.sh", "--data", f"ds={data}", "--hours", "0.1", "--wait-s", "0",
                   "--", "hello world", cwd=project)
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=60)
    assert doc["state"] == "done"
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "shell says hello world" in log and "1,2" in log
    status = gpu_json("status", sub["job"]["short_id"], "--verbose")
    assert len(status["plan"]["data"]["ds"]) == 64  # the content hash is recorded


def test_gpu_and_vram_requests_the_machine_cannot_meet_are_refused(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "print(1)\n"})
    for flags, words in ((["--gpu", "H100-NOT-HERE"], "H100-NOT-HERE"), (["--vram-gb", "100000"], "100000")):
        proc = run_gpu("submit", "a.py", *flags, "--hours", "0.1", "--wait-s", "0", cwd=project)
        assert proc.returncode == 2
        assert "no target can run this job" in proc.stderr and words in proc.stderr
    assert gpu_json("jobs")["jobs"] == []


def _commands(parser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand the parser knows, as the words a user types."""
    import argparse

    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*prefix, name))
    return out


def test_every_command_has_help() -> None:
    """Read from the parser itself, so a command added later is covered without a list here."""
    from tui.cli import build_parser

    commands = _commands(build_parser())
    assert {("fetch",), ("mcp",), ("gc",), ("accounts", "add"), ("targets", "probe")} <= set(commands)
    for cmd in commands:
        proc = run_gpu(*cmd, "--help")
        assert proc.returncode == 0 and "usage: gpu" in proc.stdout, cmd


def test_runs_folder_is_git_ignored_from_its_first_use(home: Path, tmp_path: Path) -> None:
    """`git add -A` after a job never commits its outputs: runs/.gitignore holds `*`."""
    import subprocess

    project = make_git_project(tmp_path / "p", {
        "train.py": "import gpu\n(gpu.output_dir() / 'model.pkl').write_bytes(b'x' * 100)\n"})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert (project / "runs" / ".gitignore").read_text().splitlines()[-1] == "*"
    status = subprocess.run(["git", "-C", str(project), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert "runs/" not in status
    done = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert done["state"] == "done"
    assert (project / "runs" / sub["job"]["short_id"] / "model.pkl").exists()
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True)
    staged = subprocess.run(["git", "-C", str(project), "diff", "--cached", "--name-only"],
                            capture_output=True, text=True, check=True).stdout
    assert staged == ""


def test_last_is_the_newest_job_of_the_project_you_are_in(home: Path, tmp_path: Path) -> None:
    a = make_git_project(tmp_path / "a", {"t.py": "print('from a')\n", "sub/x.txt": "x\n"})
    b = make_git_project(tmp_path / "b", {"t.py": "print('from b')\n"})
    job_a = gpu_json("submit", "t.py", "--hours", "0.1", "--wait-s", "0", cwd=a)["job"]
    job_b = gpu_json("submit", "t.py", "--hours", "0.1", "--wait-s", "0", cwd=b)["job"]
    assert gpu_json("status", "last", cwd=a)["short_id"] == job_a["short_id"]
    assert gpu_json("status", "last", cwd=a / "sub")["short_id"] == job_a["short_id"]
    assert gpu_json("status", "last", cwd=b)["short_id"] == job_b["short_id"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert gpu_json("status", "last", cwd=outside)["short_id"] == job_b["short_id"]  # newest of all
    fresh = make_git_project(tmp_path / "c", {"t.py": "print(1)\n"})
    proc = run_gpu("status", "last", cwd=fresh)
    assert proc.returncode == 2 and "no job was submitted from this project" in proc.stderr
    assert "the newest job of the project you are in" in " ".join(run_gpu("logs", "--help").stdout.split())


def test_metrics_key_filters_text_output_and_an_unknown_key_lists_the_known(home: Path,
                                                                           tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {
        "m.py": "import gpu\nfor s in range(3):\n    gpu.log(step=s, loss=1.0 / (s + 1), acc=s / 3)\n"})
    sub = gpu_json("submit", "m.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(sub["short_id"], {"done", "failed"}, timeout=120)["state"] == "done"
    text = run_gpu("metrics", sub["short_id"], "--key", "loss").stdout
    assert "loss" in text and "acc" not in text
    assert "acc" in run_gpu("metrics", sub["short_id"]).stdout
    bad = run_gpu("metrics", sub["short_id"], "--key", "lss")
    assert bad.returncode == 2 and "no metric 'lss'" in bad.stderr and "acc, loss" in bad.stderr


def _follow(short_id: str, cwd: Path):
    import subprocess

    from tests.conftest import gpu_exe

    return subprocess.Popen([gpu_exe(), "logs", "-f", short_id], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, bufsize=0)


def _first_lines(proc, until: str, timeout: float = 30) -> str:
    """What the follower printed until `until` appeared (read unbuffered, as it comes)."""
    import os
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = b""
    deadline = time.monotonic() + timeout
    while until.encode() not in seen:
        assert time.monotonic() < deadline, f"never said {until!r}: {seen!r}"
        if sel.select(timeout=0.5):
            seen += os.read(proc.stdout.fileno(), 65536)
    return seen.decode()


def test_logs_follow_of_a_held_job_says_why_and_how_then_follows(home: Path, tmp_path: Path) -> None:
    from core.engine.approvals import approve
    from core.jobs.store import Store

    project = make_git_project(tmp_path / "p", {"a.py": "print('the job ran')\n"})
    held = gpu_json("submit", "a.py", "--wait-s", "0", cwd=project)["job"]  # no hours: held
    proc = _follow(held["short_id"], project)
    try:
        first = _first_lines(proc, "to approve it", timeout=20)
        assert "waits for a person's approval" in first and "no hours estimate" in first
        assert f"gpu approve {held['short_id']}" in first
        approve(Store(), held["id"], digest=held["digest"], actor="test")
        out = proc.communicate(timeout=120)[0].decode()
    finally:
        proc.kill()
    assert "the job ran" in out and out.rstrip().endswith("exited with status 0")


def test_logs_follow_of_a_job_waiting_for_a_slot_says_why(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"slow.py": "import time\ntime.sleep(600)\n",
                                                "quick.py": "print('second ran')\n"})
    first = gpu_json("submit", "slow.py", "--hours", "0.2", "--wait-s", "10", cwd=project)["job"]
    wait_state(first["short_id"], {"running"}, timeout=60)
    second = gpu_json("submit", "quick.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    proc = _follow(second["short_id"], project)
    try:
        said = _first_lines(proc, "free slot", timeout=30)
        assert f"job {second['short_id']} is" in said
        gpu_json("cancel", first["short_id"])
        out = proc.communicate(timeout=120)[0].decode()
    finally:
        proc.kill()
    assert "second ran" in out


def test_status_verbose_shows_every_event_the_plan_and_the_bundle_in_text(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "print(1)\n", "data/x.csv": "1\n"},
                               gitignore="data/\n")
    sub = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(sub["short_id"], {"done", "failed"}, timeout=120)["state"] == "done"
    short = run_gpu("status", sub["short_id"], cwd=project).stdout
    text = run_gpu("status", sub["short_id"], "--verbose", cwd=project).stdout
    assert "digest" in text and "why" in text  # the plan panel
    assert "will ship" in text and "data/" in text  # the bundle report, with what was left out
    assert text.count("->") >= 4 and len(text) > len(short)


@pytest.mark.parametrize("columns", ["200", "80", "40", "24", "12"])
def test_short_ids_are_never_cut_in_the_jobs_table(home: Path, tmp_path: Path, columns: str) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "print(1)\n"})
    # no hours: held for a person, so it is still live when `gpu status` lists the live jobs
    sub = gpu_json("submit", "a.py", "--wait-s", "0", "--name",
                   "a-rather-long-job-name-that-does-not-fit-anywhere-narrow", cwd=project)["job"]
    assert sub["state"] == "awaiting_approval"
    for args in (["jobs"], ["status"]):
        out = run_gpu(*args, cwd=project, env={"COLUMNS": columns}).stdout  # piped, as a script sees it
        assert sub["short_id"] in out, (columns, args, out)
        assert all(len(line) <= max(int(columns), 8) for line in out.splitlines() if sub["short_id"] in line)
