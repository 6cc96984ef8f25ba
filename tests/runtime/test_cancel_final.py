"""Cancel is final: every process a job started ends, also those that left its process group.

A job starts grandchildren the way real programs escape: `setsid` with SIGTERM ignored, a
double fork with `os.setsid`, and (where the attempt has a cgroup) one that also wipes its
environment. After `gpu cancel`, /proc holds no process carrying the attempt's marker, and the
processes the job recorded are gone. The same holds on an ssh target, whose cancel runs the
launcher's kill routine on the host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.runtime import jobprocs
from core import paths
from tests.conftest import host_pids, gpu_json, make_git_project, run_gpu, wait_state
from tests.providers.test_slurm import lab  # noqa: F401 - the slurm target fixture

ESCAPER = """\
import os, signal, subprocess, sys, time
pids = []
# 1: its own session, SIGTERM ignored (inherited by sleep through exec)
p = subprocess.Popen(["setsid", "sh", "-c", "trap '' TERM; exec sleep 1000"])
pids.append(p.pid)
# 2: a double fork with os.setsid, SIGTERM ignored
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(1000)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
os.close(w)
pids.append(int(os.read(r, 32)))
if os.environ.get("WIPE_ENV"):
    # 3: leaves the session and wipes its environment: only a cgroup still knows it
    q = subprocess.Popen(["env", "-i", "setsid", "sleep", "1000"])
    pids.append(q.pid)
open(os.environ["PIDS_FILE"], "w").write(" ".join(map(str, pids)))
print("escaped", pids, flush=True)
time.sleep(float(os.environ.get("MAIN_SLEEP", "1000")))
"""


def marked(marker: str) -> list[int]:
    """Processes whose environment holds GPU_ROUTER_JOB=<marker>, read from /proc by the test."""
    entry = f"GPU_ROUTER_JOB={marker}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if entry in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cgroup_writable() -> bool:
    path = jobprocs.cgroup_create(f"gpu-router-probe-{os.getpid()}")
    if path is None:
        return False
    jobprocs.cgroup_remove(path)
    return True


def _wait_for(predicate, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(message)


def _submit_and_cancel(project: Path, root: Path | None, env: list[str], provider: list[str]) -> tuple[dict, list[int], str]:
    """The job runs sandboxed (locally, and on a host with bubblewrap: this machine, over
    loopback), so it writes pids.txt in its own working folder (nothing else is writable) and
    numbers them in its own pid namespace. `root`: the target's root (None: gpu-router's home)."""
    flags = [x for e in [*env, "PIDS_FILE=pids.txt"] for x in ("--env", e)]
    sub = gpu_json("submit", "escape.py", "--hours", "0.1", "--wait-s", "10", *provider, *flags, cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    marker = f"{job_id}:1"
    pids_file = (root or paths.home()) / "jobs" / job_id / "code" / "pids.txt"
    wait_state(short, {"running"}, timeout=120)
    _wait_for(lambda: pids_file.exists() and pids_file.read_text().strip(), 60,
              "the job never wrote its grandchildren's pids")
    escaped = host_pids([int(p) for p in pids_file.read_text().split()], marker)
    assert all(_alive(p) for p in escaped), "the grandchildren should run before the cancel"
    assert len(marked(marker)) >= 3, "the job and its grandchildren carry the marker"
    res = gpu_json("cancel", short, timeout=60)
    assert res["job"]["state"] == "cancelled"
    return sub, escaped, marker


@pytest.mark.slow
@pytest.mark.parametrize("tracking", ["cgroup", "marker"])
def test_cancel_leaves_no_process_behind_on_the_local_target(tracking: str, home: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if tracking == "cgroup" and not _cgroup_writable():
        pytest.skip("no writable cgroup v2 on this machine: only the marker can be tested here")
    if tracking == "marker":
        monkeypatch.setenv("GPU_ROUTER_TRACKING", "marker")
    project = make_git_project(tmp_path / "p", {"escape.py": ESCAPER})
    env = ["WIPE_ENV=1"] if tracking == "cgroup" else []
    sub, escaped, marker = _submit_and_cancel(project, None, env, [])
    for pid in escaped:
        wait_process_gone_or_zombie(pid, 10, f"grandchild {pid} survived gpu cancel")
    assert marked(marker) == [], "a process with the job's marker survived gpu cancel"
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    expected = "process tracking: cgroup" if tracking == "cgroup" else "process tracking: the marker"
    assert expected in log, log
    record = json.loads((home / "jobs" / sub["job"]["id"] / "attempts" / "1" / "pid").read_text())
    assert record["tracking"] == tracking and record["marker"] == marker
    if tracking == "cgroup":
        assert not Path(record["cgroup"]).exists(), "the attempt's cgroup was left behind"


def wait_process_gone_or_zombie(pid: int, timeout: float, message: str) -> None:
    _wait_for(lambda: not _alive(pid), timeout, message)


@pytest.mark.slow
def test_cancel_leaves_no_process_behind_on_an_ssh_target(sshd, home: Path, tmp_path: Path) -> None:
    from tests.providers.test_ssh import add_box

    add_box(sshd, tmp_path)
    project = make_git_project(tmp_path / "p", {"escape.py": ESCAPER})
    sub, escaped, marker = _submit_and_cancel(project, tmp_path / "remote", [], ["--provider", "box"])
    for pid in escaped:
        wait_process_gone_or_zombie(pid, 10, f"grandchild {pid} on the host survived gpu cancel")
    assert marked(marker) == [], "a process with the job's marker survived gpu cancel on the host"
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "process tracking:" in log and "cancel: sent SIGTERM" in log, log


@pytest.mark.slow
def test_cancel_leaves_no_process_behind_on_a_slurm_target(slurm, lab, home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"escape.py": ESCAPER})
    sub, escaped, marker = _submit_and_cancel(project, lab, [], ["--provider", "lab"])
    for pid in escaped:
        wait_process_gone_or_zombie(pid, 15, f"grandchild {pid} of the Slurm job survived gpu cancel")
    assert marked(marker) == [], "a process with the job's marker survived gpu cancel on Slurm"


@pytest.mark.slow
def test_a_job_that_ends_leaves_nothing_running(home: Path, tmp_path: Path) -> None:
    """Not only cancel: when the job's main process exits, what it left running is stopped."""
    project = make_git_project(tmp_path / "p", {"escape.py": ESCAPER})
    sub = gpu_json("submit", "escape.py", "--hours", "0.1", "--wait-s", "10", "--env", "PIDS_FILE=pids.txt",
                   "--env", "MAIN_SLEEP=2", cwd=project)
    marker = f"{sub['job']['id']}:1"
    pids_file = paths.jobs_dir() / sub["job"]["id"] / "code" / "pids.txt"
    _wait_for(lambda: pids_file.exists() and pids_file.read_text().strip(), 60,
              "the job never wrote its grandchildren's pids")
    escaped = host_pids([int(p) for p in pids_file.read_text().split()], marker)
    doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    assert doc["state"] == "done"
    for pid in escaped:
        assert not _alive(pid), f"process {pid} outlived its job"
    assert marked(f"{sub['job']['id']}:1") == []
    # in the sandbox the kernel ends them with the job's pid namespace, before the launcher looks
    assert "sandbox: bubblewrap" in run_gpu("logs", sub["job"]["short_id"]).stdout


def test_a_recorded_pid_now_used_by_another_program_is_not_signalled(tmp_path: Path) -> None:
    """The launcher's pid may be reused after it ended: its group is signalled only while the
    process there is still the launcher of this attempt."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        adir = tmp_path / "attempts" / "1"
        adir.mkdir(parents=True)
        (adir / "pid").write_text(json.dumps({"pid": other.pid, "pgid": other.pid,
                                              "tag": f"{adir}/spec.json", "marker": "feed:1",
                                              "cgroup": None, "tracking": "marker"}))
        out = jobprocs.kill_attempt(str(adir), force=True)
        time.sleep(0.2)
        assert other.poll() is None, "an unrelated process was killed"
        assert out["signalled"] == 0
    finally:
        other.kill()
        other.wait()


def test_launch_kill_signals_marked_processes_and_says_so_in_the_log(tmp_path: Path) -> None:
    """`launch.py --kill ATTEMPT_DIR`, as remote targets run it: a detached process carrying
    the marker ends; one carrying a longer marker (another attempt) does not."""
    from core.runtime import LAUNCHER

    marker, other_marker = f"{os.getpid()}cafe:1", f"{os.getpid()}cafe:10"
    mine = subprocess.Popen(["setsid", "sleep", "60"], env={**os.environ, "GPU_ROUTER_JOB": marker})
    theirs = subprocess.Popen(["setsid", "sleep", "60"], env={**os.environ, "GPU_ROUTER_JOB": other_marker})
    try:
        adir = tmp_path / "attempts" / "1"
        adir.mkdir(parents=True)
        log = tmp_path / "job.log"
        log.write_text("")
        (adir / "spec.json").write_text(json.dumps({"log": str(log)}))
        (adir / "pid").write_text(json.dumps({"pid": 0, "pgid": 0, "tag": "x", "marker": marker,
                                              "cgroup": None, "tracking": "marker"}))
        _wait_for(lambda: marked(marker), 5, "the marked process never appeared")
        out = subprocess.run([sys.executable, str(LAUNCHER), "--kill", str(adir)], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["signalled"] >= 1
        assert mine.wait(timeout=10) == -signal.SIGTERM
        assert theirs.poll() is None, "a process of another attempt was signalled"
        assert "cancel: sent SIGTERM" in log.read_text()
    finally:
        for p in (mine, theirs):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_empty_cgroups_of_killed_launchers_are_cleared_but_no_live_one() -> None:
    """A launcher killed outright cannot remove its cgroup: the next one removes it, once it
    is old and empty, and leaves alone a new one (an attempt starting) and one with processes."""
    if not _cgroup_writable():
        pytest.skip("no writable cgroup v2 on this machine")
    own = jobprocs._own_cgroup_dir()
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    old_empty, old_busy, young = (os.path.join(own, f"gpu-router-{k}-{tag}") for k in ("old", "busy", "young"))
    for path in (old_empty, old_busy, young):
        os.mkdir(path)
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: jobprocs.cgroup_join(old_busy))
    new = None
    try:
        for path in (old_empty, old_busy):
            os.utime(path, (time.time() - 3600, time.time() - 3600))
        new = jobprocs.cgroup_create(f"gpu-router-new-{tag}")
        assert new is not None
        assert not os.path.exists(old_empty), "an old empty cgroup was left behind"
        assert os.path.exists(old_busy) and sleeper.pid in jobprocs.cgroup_pids(old_busy)
        assert os.path.exists(young)
    finally:
        sleeper.kill()
        sleeper.wait()
        time.sleep(0.1)
        for path in (old_empty, old_busy, young, new):
            if path:
                jobprocs.cgroup_remove(path)


def test_the_ps_scan_finds_what_proc_finds() -> None:
    """The scan macOS uses (`ps` with the environment) agrees with /proc on Linux."""
    marker = f"{os.getpid()}beef:2"
    procs = [subprocess.Popen(["sleep", "30"], env={**os.environ, "GPU_ROUTER_JOB": marker}) for _ in range(2)]
    decoy = subprocess.Popen(["sleep", "30"], env={**os.environ, "GPU_ROUTER_JOB": marker + "0"})
    try:
        want = {p.pid for p in procs}
        _wait_for(lambda: jobprocs.marked_pids(marker, source="proc") == want, 5, "/proc scan")
        assert jobprocs.marked_pids(marker, source="ps") == want
    finally:
        for p in (*procs, decoy):
            p.kill()
            p.wait()


# -- the marker test, for any environment ---------------------------------------------------

_markers = st.builds(lambda h, n: f"{h}:{n}", st.text("0123456789abcdef", min_size=1, max_size=32),
                     st.integers(min_value=1, max_value=10_000))
_values = st.one_of(st.text("0123456789abcdef:= \t_", max_size=40), _markers,
                    _markers.map(lambda m: m + "0"), _markers.map(lambda m: "x" + m))
_names = st.one_of(st.just("GPU_ROUTER_JOB"), st.just("GPU_ROUTER_JOBS"), st.just("XGPU_ROUTER_JOB"),
                   st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12))


@settings(max_examples=examples(200), deadline=None)
@given(env=st.dictionaries(_names, _values, max_size=8), marker=_markers,
       theirs=st.one_of(st.none(), _markers, _values))
def test_the_marker_matches_exactly_its_own_attempt(env: dict, marker: str, theirs: str | None) -> None:
    if theirs is not None:
        env = {**env, "GPU_ROUTER_JOB": theirs}
    blob = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    assert jobprocs.environ_carries(blob, marker) == (env.get("GPU_ROUTER_JOB") == marker)
    spaced = {k: v for k, v in env.items() if not any(c.isspace() for c in v)}
    line = "python train.py --lr 0.1 " + " ".join(f"{k}={v}" for k, v in spaced.items())
    assert jobprocs.ps_line_carries(line, marker) == (spaced.get("GPU_ROUTER_JOB") == marker)
