"""A job is not the person: a process a gpu-router job started cannot approve or deny, however
it dresses up (a pseudo-terminal, every agent marker and GPU_ROUTER_JOB dropped, a double fork
into a session of its own), while a person's own terminal still approves.

Real jobs on the local target run the attack; the parsers that read /proc are driven by
hypothesis and crafted texts (a fake cgroup cannot be made without privileges).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.engine import jobguard
from core.runtime.jobprocs import CGROUP_PREFIX, MARKER_VAR, SANDBOX_MARK
from tests.conftest import let_run, gpu_exe, gpu_json, make_git_project, run_gpu, run_in_terminal, wait_state

QUICK = "print('ran', flush=True)\n"

# The job's attack: `gpu approve HELD` and `gpu deny HELD` on a pseudo-terminal of its own, with
# an environment built from nothing (env -i): no agent marker, no GPU_ROUTER_JOB. In `detached`
# mode it first double-forks into a new session, away from its parent chain.
ATTACK = textwrap.dedent('''
    import json, os, pty, select, sys, time

    GPU, HELD, MODE, HOME, CONFIG = sys.argv[1:6]  # the person's gpu-router home: a job can know it
    KEEP = ("PATH", "HOME", "PYTHONPATH", "LANG")
    ENV = {k: os.environ[k] for k in KEEP if k in os.environ}
    ENV.update(TERM="xterm", COLUMNS="160", GPU_ROUTER_HOME=HOME, GPU_ROUTER_CONFIG=CONFIG)
    assert "GPU_ROUTER_JOB" not in ENV

    def in_pty(verb):
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(GPU, [GPU, verb, HELD], ENV)
        out, typed, deadline = b"", False, time.time() + 90
        while time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                if not typed and b"to " + verb.encode() + b" it" in out:
                    os.write(fd, HELD.encode() + b"\\r")  # type the id, as a person would
                    typed = True
        _, status = os.waitpid(pid, 0)
        return {"code": os.waitstatus_to_exitcode(status), "out": out.decode(errors="replace"),
                "typed": typed, "ppid": os.getppid(), "sid": os.getsid(0)}

    def attack():
        return {"approve": in_pty("approve"), "deny": in_pty("deny")}

    result = os.path.join(os.getcwd(), "attack.json")
    if MODE == "detached":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                doc = attack()
                with open(result + ".tmp", "w") as f:
                    json.dump(doc, f)
                os.rename(result + ".tmp", result)
                os._exit(0)
            os._exit(0)
        os.wait()
        deadline = time.time() + 150
        while not os.path.exists(result) and time.time() < deadline:
            time.sleep(0.2)
        doc = json.load(open(result))
        doc["main_sid"] = os.getsid(0)
    else:
        doc = attack()
    print("ATTACK " + json.dumps(doc), flush=True)
''')


def _held(project: Path) -> dict:
    job = gpu_json("submit", "a.py", "--wait-s", "0", "--name", "held", cwd=project)["job"]
    assert job["state"] == "awaiting_approval"
    return job


def _run_attack(project: Path, held: str, mode: str) -> tuple[dict, dict]:
    """Run the attack as a local job that a person let run without a sandbox; return (the
    job's status, what its `gpu approve` and `gpu deny` said)."""
    sub = gpu_json("submit", "attack.py", "--hours", "0.2", "--wait-s", "0", "--name", f"attack-{mode}",
                   "--", gpu_exe(), held, mode, os.environ["GPU_ROUTER_HOME"],
                   os.environ["GPU_ROUTER_CONFIG"], cwd=project)["job"]
    let_run(sub)
    done = wait_state(sub["short_id"], {"done", "failed", "cancelled"}, timeout=240)
    log = run_gpu("logs", sub["short_id"]).stdout
    line = next((ln for ln in log.splitlines() if ln.startswith("ATTACK ")), None)
    assert done["state"] == "done" and line, log
    return sub, json.loads(line[len("ATTACK "):])


def _assert_refused(doc: dict, attacker: dict, held: str) -> None:
    approve, deny = doc["approve"], doc["deny"]
    for verb, said in (("approval", approve), ("denial", deny)):
        flat = " ".join(said["out"].split())
        assert said["code"] == 2, said
        assert not said["typed"], said  # refused before any prompt
        assert f"{verb} refused: this process runs inside a gpu-router job" in flat, flat
        assert "from a terminal of their own" in flat and "gpu dash" in flat, flat
    assert gpu_json("status", held)["state"] == "awaiting_approval"
    events = gpu_json("status", held, "--verbose")["events"]
    refused = [e for e in events if e.get("data", {}).get("decision") == "refused"]
    assert [e["data"]["asked"] for e in refused] == ["approval", "denial"], events
    for event in refused:
        assert f"asked from inside job {attacker['id']}'s process" in event["reason"], event
    assert not any(e.get("data", {}).get("decision") in ("approve", "deny") for e in events)
    own = gpu_json("status", attacker["short_id"], "--verbose")["events"]
    assert any(f"approval of job {held} refused" in e["reason"] for e in own), own


def _facts(monkeypatch: pytest.MonkeyPatch, tracking: str) -> str:
    """`cgroup`: the host's default tracking (a cgroup where one can be made: then the cgroup is
    the fact found first); `marker`: no cgroup, so the parent chain alone must tell."""
    if tracking == "marker":
        monkeypatch.setenv("GPU_ROUTER_TRACKING", "marker")  # read by the launcher
        return "descends from the job launcher"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("tracking", ["cgroup", "marker"])
def test_a_job_in_a_pty_without_markers_cannot_approve_or_deny_but_a_person_can(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracking: str, unsandboxed) -> None:
    fact = _facts(monkeypatch, tracking)
    project = make_git_project(tmp_path / "p", {"a.py": QUICK, "attack.py": ATTACK})
    held = _held(project)["short_id"]
    attacker, doc = _run_attack(project, held, "direct")
    _assert_refused(doc, attacker, held)
    assert fact in " ".join(doc["approve"]["out"].split())
    # no false positive: the person's own terminal (this test, on a pty) approves it
    status, out = run_in_terminal([gpu_exe(), "approve", held], held)
    assert status == 0 and "approved plan" in out, out
    events = gpu_json("status", held, "--verbose")["events"]
    assert any(e.get("data", {}).get("decision") == "approve" for e in events)


@pytest.mark.slow
@pytest.mark.parametrize("tracking", ["cgroup", "marker"])
def test_a_job_that_double_forks_into_its_own_session_is_still_refused(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracking: str, unsandboxed) -> None:
    fact = _facts(monkeypatch, tracking)
    project = make_git_project(tmp_path / "p", {"a.py": QUICK, "attack.py": ATTACK})
    held = _held(project)["short_id"]
    attacker, doc = _run_attack(project, held, "detached")
    assert doc["approve"]["sid"] != doc["main_sid"]  # it left the job's session
    _assert_refused(doc, attacker, held)
    assert fact in " ".join(doc["approve"]["out"].split())


# -- one process's facts, without a whole job ------------------------------------------------

FAKE_LAUNCHER = textwrap.dedent('''
    import os, subprocess, sys
    # started as PYTHON .../runtime/launch.py .../attempts/1/spec.json, like gpu-router's launcher
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "GPU_ROUTER_HOME")}
    probe = "from core.engine.jobguard import detect; d = detect(); print(d.reason if d else None, d and d.job_id)"
    if sys.argv[-1].endswith("spec.json") and os.environ.get("DETACH"):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
                open(os.environ["RESULT"], "w").write(out.stdout)
                os._exit(0)
            os._exit(0)
        os.wait()
    else:
        print(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout)
''')


def _fake_launcher(tmp_path: Path) -> tuple[Path, Path]:
    runtime = tmp_path / "jobs" / "job123abc" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "launch.py").write_text(FAKE_LAUNCHER)
    spec = tmp_path / "jobs" / "job123abc" / "attempts" / "1" / "spec.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    return runtime / "launch.py", spec


def _clean_env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd()),
            "GPU_ROUTER_HOME": os.environ.get("GPU_ROUTER_HOME", "/nonexistent")}


def test_a_child_of_a_launcher_is_a_jobs_and_says_which_job(tmp_path: Path) -> None:
    launcher, spec = _fake_launcher(tmp_path)
    out = subprocess.run([sys.executable, str(launcher), str(spec)], env=_clean_env(),
                         capture_output=True, text=True, timeout=60).stdout
    assert "descends from the job launcher" in out and "job job123abc" in out and out.split()[-1] == "job123abc"


def test_the_same_program_not_named_as_a_launcher_is_no_job(tmp_path: Path) -> None:
    other = tmp_path / "tools" / "launch.py"  # a launch.py of the person's own: no runtime folder
    other.parent.mkdir()
    other.write_text(FAKE_LAUNCHER)
    out = subprocess.run([sys.executable, str(other), "x"], env=_clean_env(), capture_output=True,
                         text=True, timeout=60).stdout
    assert out.split() == ["None", "None"], out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
def test_a_double_forked_grandchild_of_a_subreaper_launcher_is_still_a_jobs(tmp_path: Path) -> None:
    """The real launcher makes itself the job's child subreaper (core/runtime/launch.py), so an
    orphan is re-parented to it; the fake one here does the same through the launcher's own
    function."""
    launcher, spec = _fake_launcher(tmp_path)
    body = launcher.read_text()
    launcher.write_text("import sys; sys.path.insert(0, %r)\nfrom core.runtime.launch import _adopt_orphans\n"
                        "_adopt_orphans()\n" % str(Path(__file__).resolve().parents[2]) + body)
    result = tmp_path / "result.txt"
    subprocess.run([sys.executable, str(launcher), str(spec)], env={**_clean_env(), "DETACH": "1",
                                                                   "RESULT": str(result)},
                   timeout=60, check=True)
    deadline = __import__("time").monotonic() + 30
    while not result.exists() and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.05)
    assert "descends from the job launcher" in result.read_text()


def test_this_test_process_is_no_jobs() -> None:
    assert jobguard.detect() is None and jobguard.job_origin() is None


def test_the_marker_variable_is_an_extra_reason(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    from core.engine.approvals import require_not_job
    from core.errors import UserError

    monkeypatch.setenv(MARKER_VAR, "abc123:2")
    found = jobguard.detect()
    assert found is not None and MARKER_VAR in found.reason and found.job_id == "abc123"
    with pytest.raises(UserError, match="approval refused: this process runs inside a gpu-router job"):
        require_not_job("approval")
    from core.engine.actor import current

    assert not current(terminal=True).is_person  # and it is an agent's, for submit's rules too


# -- the parsers --------------------------------------------------------------------------------

COMM = st.binary(max_size=24).filter(lambda b: b"\0" not in b)


@settings(max_examples=examples(300), deadline=None)
@given(comm=COMM, pid=st.integers(1, 2 ** 22), ppid=st.integers(0, 2 ** 22),
       state=st.sampled_from(b"RSDZTtXI"), tail=st.lists(st.integers(0, 2 ** 40), max_size=40))
def test_stat_lines_parse_whatever_the_command_name_holds(comm, pid, ppid, state, tail) -> None:
    """A process names itself (comm: parentheses, spaces, newlines, anything but NUL); its
    parent cannot be faked by it."""
    line = b"%d (%s) %c %d " % (pid, comm, state, ppid) + b" ".join(b"%d" % t for t in tail) + b"\n"
    parsed = jobguard.parse_stat(line)
    assert parsed == (comm.decode(errors="replace"), ppid)


def test_stat_lines_that_are_not_stat_lines_are_none() -> None:
    for bad in (b"", b"12 comm S 1", b"12 (x) S", b"12 (x) S notanumber 3", b"12 )( S 1"):
        assert jobguard.parse_stat(bad) is None, bad


def test_this_process_stat_parses_to_its_real_parent() -> None:
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc here: ps is read instead")
    assert jobguard.parse_stat(Path(f"/proc/{os.getpid()}/stat").read_bytes())[1] == os.getppid()
    assert jobguard.ancestors()[0][0] == os.getppid()


@pytest.mark.parametrize("text, job", [
    (f"0::/user.slice/user-1000.slice/session-3.scope/{CGROUP_PREFIX}ab12cd34-2\n", "ab12cd34"),
    (f"0::/system.slice/x.service/{CGROUP_PREFIX}ab12cd34-1/inner/deeper\n", "ab12cd34"),
    (f"12:pids:/\n4:memory:/{CGROUP_PREFIX}0f0f-3\n0::/\n", "0f0f"),
    (f"0::/{CGROUP_PREFIX}weird\n", None),  # ours by name, its job not told: still refused
])
def test_a_job_cgroup_is_found_in_any_line(text: str, job: str | None) -> None:
    found = jobguard.by_cgroup(text)
    assert found is not None and "cgroup" in found.reason and found.job_id == job


@pytest.mark.parametrize("text", [
    "0::/\n", "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/user.slice/my-gpu-router-notes.scope\n",  # the prefix inside a name is not ours
    "4:memory:/process_api/a317\n", "", "garbage without colons\n",
])
def test_other_cgroups_are_no_jobs(text: str) -> None:
    assert jobguard.by_cgroup(text) is None


@settings(max_examples=examples(200), deadline=None)
@given(parts=st.lists(st.text(st.characters(codec="ascii", exclude_characters="/\n:"), max_size=12),
                      max_size=6))
def test_a_cgroup_path_without_the_prefix_is_never_a_job(parts) -> None:
    path = "/".join(p for p in parts if not p.startswith(CGROUP_PREFIX))
    assert jobguard.by_cgroup(f"0::/{path}\n") is None


@pytest.mark.parametrize("argv, spec", [
    (["/usr/bin/python3", "/h/jobs/J1/runtime/launch.py", "/h/jobs/J1/attempts/1/spec.json"],
     "/h/jobs/J1/attempts/1/spec.json"),
    (["python3", "-u", "/r/runtime/abc123/launch.py", "--foreground", "/r/jobs/J2/attempts/2/spec.json"],
     "/r/jobs/J2/attempts/2/spec.json"),
    (["python", "/r/runtime/h/launch.py", "--secrets-stdin", "/r/jobs/J3/attempts/0/spec.json"],
     "/r/jobs/J3/attempts/0/spec.json"),
    (["python", "/h/jobs/J1/runtime/launch.py", "--kill", "/h/jobs/J1/attempts/1"], None),  # a cancel
    (["python", "/home/me/tools/launch.py", "spec.json"], None),
    (["python", "-m", "pytest", "tests/engine/test_jobguard.py"], None),
    ([], None),
])
def test_a_launcher_is_told_by_its_argv(argv: list[str], spec: str | None) -> None:
    assert jobguard.launcher_spec(argv) == spec


def test_the_job_of_a_spec_path_and_a_cgroup_name() -> None:
    assert jobguard.job_of_spec("/h/jobs/abc/attempts/3/spec.json") == "abc"
    assert jobguard.job_of_spec("/elsewhere/spec.json") is None
    assert jobguard.job_of_cgroup(f"{CGROUP_PREFIX}abc-def-3") == "abc-def"
    assert jobguard.job_of_cgroup(f"{CGROUP_PREFIX}abc") is None


def test_only_a_bwrap_that_binds_the_job_mark_is_a_jobs_sandbox() -> None:
    ours = ["bwrap", "--unshare-pid", "--ro-bind", "/tmp/m", SANDBOX_MARK, "--", "python", "a.py"]
    flatpak = ["bwrap", "--args", "41", "--", "/app/bin/code"]  # a person's Flatpak terminal
    assert jobguard.is_job_bwrap(ours) and jobguard.is_job_bwrap(["/usr/bin/bwrap", *ours[1:]])
    assert jobguard.is_job_bwrap(["bw", *ours[1:]], exe="/usr/bin/bwrap")
    assert not jobguard.is_job_bwrap(flatpak) and not jobguard.is_job_bwrap(["python", SANDBOX_MARK])


def test_pin_set_and_clear_refuse_a_jobs_process(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    from core.errors import UserError
    from core.engine import pin

    monkeypatch.setattr(jobguard, "job_origin", lambda: "it descends from the job launcher (pid 7)")
    for call, words in ((lambda: pin.save("12345678"), "setting the approval PIN refused"),
                        (pin.clear, "clearing the approval PIN refused")):
        with pytest.raises(UserError) as info:
            call()
        assert words in info.value.message() and "pid 7" in info.value.message()
    assert pin.stored() is None
    assert json.loads(json.dumps(pin.status())) == {"set": False}
