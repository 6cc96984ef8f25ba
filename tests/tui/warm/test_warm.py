"""The warm server (tui/warm/server.py, tui/warm/launcher.py): an agent's `gpu submit --json` runs in
a forked child of a process that imported gpu-router once, and is the same command as ever.

What a user would check: the result and the job are the same as an in-process submit's; a
request it must not serve (any other command, a person's submit, a job's process, another
install's settings) runs in the client's own process instead; Ctrl-C still stops it; it goes
when the supervisor goes. The choke point (which words it serves) has a hypothesis property.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import gpu_exe, gpu_json, make_git_project, pty_session, run_gpu, wait_state
from tui.warm import server as warmserver
from tui.warm import wire

SCRIPT = "import os\nprint('ran', os.environ.get('RUN'))\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "proj", {"train.py": SCRIPT})


def warm_log(home: Path) -> str:
    try:
        return (home / "warm.log").read_text()
    except FileNotFoundError:
        return ""


def served(home: Path) -> list[str]:
    """The client pids the server forked a child for."""
    return re.findall(r"pid (\d+): submit served by child \d+", warm_log(home))


def start_warm(home: Path, project: Path) -> dict:
    """The first agent's submit: it runs in its own process, starts the supervisor and then the
    warm server; returns that submit's result once the server answers."""
    doc = gpu_json("submit", "train.py", "--hours", "0.1", "--env", "RUN=first", cwd=project)
    deadline = time.monotonic() + 30
    while wire.connect(str(home)) is None:
        assert time.monotonic() < deadline, f"no warm server came up:\n{warm_log(home)}"
        time.sleep(0.1)
    return doc


def test_home_dir_is_core_paths_home(home: Path) -> None:
    from core import paths

    assert Path(wire.home_dir(os.environ)) == paths.home()
    env = {k: v for k, v in os.environ.items() if k != "GPU_ROUTER_HOME"}
    env["XDG_DATA_HOME"] = str(home / "xdg")
    assert wire.home_dir(env) == str(home / "xdg" / "gpu-router")


@pytest.mark.slow  # runs the supervisor: end to end
def test_agent_submit_is_served_warm_and_is_the_same_command(home: Path, project: Path) -> None:
    first = start_warm(home, project)
    assert first["submitted"] and not served(home)  # the first one ran in its own process

    warm = run_gpu("submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=warm", cwd=project)
    here = run_gpu("submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=here", cwd=project,
                   env={"GPU_ROUTER_WARM": "0"})
    assert warm.returncode == here.returncode == 0, (warm.stderr, here.stderr)
    assert len(served(home)) == 1, warm_log(home)  # the warm one, not the GPU_ROUTER_WARM=0 one
    a, b = json.loads(warm.stdout), json.loads(here.stdout)
    assert set(a) == set(b) == {"job", "guidance", "submitted", "bundle"}
    assert a["submitted"] and b["submitted"]
    assert a["bundle"] == b["bundle"]
    assert set(a["job"]) == set(b["job"])
    assert Path(a["job"]["outputs_dir"]).parent.parent == Path(b["job"]["outputs_dir"]).parent.parent == project
    assert warm.stderr == here.stderr

    # a live job's request again (held: --hours 2): the idempotent answer, from the warm child too
    held = gpu_json("submit", "train.py", "--hours", "2", "--env", "RUN=held", cwd=project)
    again = gpu_json("submit", "train.py", "--hours", "2", "--env", "RUN=held", cwd=project)
    assert held["submitted"] is True and again["submitted"] is False, again
    assert again["job"]["id"] == held["job"]["id"] and len(served(home)) == 3
    # each child's end is logged with its CPU time (the figure bench/submit_latency.py reads)
    deadline = time.monotonic() + 10
    while len(re.findall(r"child \d+: exit status 0, CPU \d+\.\d ms", warm_log(home))) < 3:
        assert time.monotonic() < deadline, warm_log(home)  # status 0: the client's leaving killed none
        time.sleep(0.1)

    done = wait_state(a["job"]["id"], {"done", "failed"}, cwd=project)
    assert done["state"] == "done", done
    doc = gpu_json("status", a["job"]["id"], "--verbose", cwd=project)
    assert doc["project_dir"] == str(project) and doc["plan"]["submitted_by"] == "agent", doc
    assert doc["request"]["env"] == {"RUN": "warm"}
    assert "ran warm" in run_gpu("logs", a["job"]["id"], cwd=project).stdout


@pytest.mark.slow  # runs the supervisor: end to end
def test_an_error_comes_back_as_the_command_says_it(home: Path, project: Path) -> None:
    start_warm(home, project)
    before = len(served(home))
    proc = run_gpu("submit", "missing.py", "--json", "--hours", "0.1", cwd=project)
    assert len(served(home)) == before + 1, warm_log(home)
    here = run_gpu("submit", "missing.py", "--json", "--hours", "0.1", cwd=project,
                   env={"GPU_ROUTER_WARM": "0"})
    assert proc.returncode == here.returncode == 2
    assert proc.stdout == here.stdout and json.loads(proc.stdout)["error"]
    assert proc.stderr == here.stderr and proc.stderr.startswith("error: ")


@pytest.mark.slow  # runs the supervisor: end to end
def test_an_agent_on_a_terminal_is_still_an_agent(home: Path, project: Path) -> None:
    """A pseudo-terminal on stdin does not make a warm submit a person's (--json never is)."""
    start_warm(home, project)
    before = len(served(home))
    status, out = pty_session([gpu_exe(), "submit", "train.py", "--json", "--hours", "0.1",
                               "--env", "RUN=pty"], lambda _out: None, cwd=project, timeout=60)
    assert status == 0, out
    assert len(served(home)) == before + 1, warm_log(home)
    text = out.decode(errors="replace")
    doc = json.loads(text[text.index("{"):].replace("\r\n", "\n"))
    job = gpu_json("status", doc["job"]["id"], "--verbose", cwd=project)
    assert job["plan"]["submitted_by"] == "agent", job["plan"]


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_persons_submit_never_goes_warm(home: Path, project: Path) -> None:
    start_warm(home, project)
    before = warm_log(home)
    status, out = pty_session([gpu_exe(), "submit", "train.py", "--hours", "0.1", "--env", "RUN=person",
                               "--wait-s", "0"], lambda _out: None, cwd=project, timeout=60)
    assert status == 0, out
    assert warm_log(home) == before  # not even asked


RAW_CLIENT = r"""
import json, os, sys
from tui.warm import launcher, wire
home, argv = sys.argv[1], json.loads(sys.argv[2])
sock = wire.connect(home)
wire.send_request(sock, launcher.request(argv), [0, 1, 2])
sock.settimeout(20)
reader = wire.Lines(sock)
reply = wire.read_line(reader)
if "pid" in reply:
    sock.sendall(b"go\n")
    reply.update(wire.read_line(reader))
print(json.dumps(reply))
"""


def raw_request(home: Path, argv: list[str], cwd: Path) -> dict:
    """Speak the wire protocol as any process of this user could (the same interpreter and
    module path as `gpu`, so the install check passes and only the words are judged)."""
    proc = subprocess.run([sys.executable, "-c", RAW_CLIENT, str(home), json.dumps(argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_raw_client_gets_nothing_but_json_submits(home: Path, project: Path) -> None:
    """Approving, a person's submit, or --json as another option's value: declined, nothing done;
    a real json submit over the same wire is served (so the refusals are the words' doing)."""
    start_warm(home, project)
    held = gpu_json("submit", "train.py", "--hours", "2", "--env", "RUN=held", cwd=project)
    assert held["job"]["state"] == "awaiting_approval", held
    job = held["job"]["id"]
    for argv in (["approve", job], ["approve", job, "--json"], ["deny", job, "--json"],
                 ["submit", "train.py", "--hours", "0.1"],
                 ["submit", "train.py", "--name", "--json", "--hours", "0.1"],
                 ["submit", "train.py", "--json", "--help"], ["pin", "--json"]):
        reply = raw_request(home, argv, project)
        assert "rc" not in reply and reply.get("fallback") in (
            "only an agent's `gpu submit --json` is served here", "its words do not parse"), (argv, reply)
    assert gpu_json("status", job, cwd=project)["state"] == "awaiting_approval"
    ok = raw_request(home, ["submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=raw"], project)
    assert ok.get("rc") == 0, (ok, warm_log(home))


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_jobs_process_is_declined_and_judged_in_its_own(home: Path, project: Path, tmp_path: Path) -> None:
    """A client that descends from a job launcher (core.engine.jobguard's facts, read from the
    kernel for the peer's pid) is declined; its submit still runs, in its own process."""
    start_warm(home, project)
    runtime = tmp_path / "fake" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "launch.py").write_text(
        "import subprocess, sys\n"
        "sys.exit(subprocess.run(sys.argv[2:]).returncode)\n")
    spec = home / "jobs" / ("0" * 32) / "attempts" / "1" / "spec.json"
    proc = subprocess.run([sys.executable, str(runtime / "launch.py"), str(spec), gpu_exe(), "submit",
                           "train.py", "--json", "--hours", "0.1", "--env", "RUN=fromjob"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "declined, the client may be a job's: it descends from the job launcher" in warm_log(home)
    assert json.loads(proc.stdout)["submitted"]


@pytest.mark.slow  # runs the supervisor: end to end
def test_other_settings_are_declined(home: Path, project: Path) -> None:
    """Settings read at import (GPU_ROUTER_*, PYTHON*) must be the server's own."""
    start_warm(home, project)
    proc = run_gpu("submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=other", cwd=project,
                   env={"GPU_ROUTER_CKPT_EVERY_S": "3"})
    assert proc.returncode == 0, proc.stderr
    assert "declined, other GPU_ROUTER_* or PYTHON* settings" in warm_log(home)


def _interrupt_a_waiting_submit(home: Path, project: Path, how) -> tuple[subprocess.Popen, int]:
    """A warm submit waiting for its job to be placed (the supervisor stopped), then `how`
    done to its client; returns the client and the child the server forked for it."""
    sup = int((home / "supervisor.lock").read_text())
    os.kill(sup, signal.SIGSTOP)  # the new job stays in routing: the submit waits to see it placed
    try:
        proc = subprocess.Popen([gpu_exe(), "submit", "train.py", "--json", "--hours", "0.1",
                                 "--wait-s", "60", "--env", f"RUN=interrupted{time.time()}"], cwd=project,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while str(proc.pid) not in served(home):
            assert time.monotonic() < deadline, warm_log(home)
            time.sleep(0.05)
        child = int(re.search(rf"pid {proc.pid}: submit served by child (\d+)", warm_log(home)).group(1))
        time.sleep(1.0)  # into the wait
        how(proc)
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while _running(child):
            assert time.monotonic() < deadline, f"the warm child {child} outlived its client"
            time.sleep(0.05)
        return proc, child
    finally:
        os.kill(sup, signal.SIGCONT)


@pytest.mark.slow  # runs the supervisor: end to end
def test_ctrl_c_reaches_the_warm_child(home: Path, project: Path) -> None:
    """Ctrl-C on the client (SIGINT) stops the command in the child: exit 130, child gone."""
    start_warm(home, project)
    proc, _ = _interrupt_a_waiting_submit(home, project, lambda p: p.send_signal(signal.SIGINT))
    assert proc.returncode == 130


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_killed_client_takes_its_child_along(home: Path, project: Path) -> None:
    """An agent's harness that SIGKILLs `gpu` (its timeout) ends the command: the child too."""
    start_warm(home, project)
    proc, _ = _interrupt_a_waiting_submit(home, project, lambda p: p.kill())
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_terminated_client_ends_by_its_signal(home: Path, project: Path) -> None:
    """SIGTERM to the client: the child ends, and the client dies by SIGTERM as it would alone."""
    start_warm(home, project)
    proc, _ = _interrupt_a_waiting_submit(home, project, lambda p: p.send_signal(signal.SIGTERM))
    assert proc.returncode == -signal.SIGTERM


@pytest.mark.slow  # runs the supervisor: end to end
def test_a_client_under_other_bounds_is_declined(home: Path, project: Path) -> None:
    """A child runs with the server's limits and credentials: a client with others (here a
    lower open-files limit) runs its submit itself."""
    import resource

    start_warm(home, project)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    proc = subprocess.run([gpu_exe(), "submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=bounded"],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 900) - 1, hard)))
    assert proc.returncode == 0, proc.stderr
    assert "declined, the client runs under other bounds (limits)" in warm_log(home), warm_log(home)


@pytest.mark.slow  # runs the supervisor: end to end
def test_the_client_talks_only_to_the_warm_server(home: Path, project: Path) -> None:
    """Something else listening at warm.sock (not holding the server's lock) hears nothing: the
    client sends neither its environment nor its terminal, and runs the submit itself."""
    import socket as socketlib

    listener = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    listener.bind(str(home / "warm.sock"))
    listener.listen(4)
    listener.settimeout(30)
    proc = subprocess.Popen([gpu_exe(), "submit", "train.py", "--json", "--hours", "0.1", "--env", "RUN=x"],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "GPU_ROUTER_IDLE_EXIT_S": "20"})
    conn, _ = listener.accept()
    conn.settimeout(30)
    assert conn.recv(65536) == b""  # closed without a byte
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and json.loads(out)["submitted"], err
    conn.close()
    listener.close()


@pytest.mark.slow  # runs the supervisor: end to end
def test_daemon_status_and_stop_name_the_warm_server(home: Path, project: Path) -> None:
    start_warm(home, project)
    server = int((home / "warm.lock").read_text())
    assert gpu_json("daemon", "--status", cwd=project)["warm"] == {"running": True, "pid": server}
    assert gpu_json("daemon", "--stop", cwd=project)["warm"]["pid"] == server
    deadline = time.monotonic() + 20
    while "leaving: stopped" not in warm_log(home) or (home / "warm.sock").exists():
        assert time.monotonic() < deadline, warm_log(home)
        time.sleep(0.1)
    assert gpu_json("daemon", "--status", cwd=project)["warm"] == {"running": False, "pid": None}


@pytest.mark.slow  # runs the supervisor: end to end
def test_the_server_goes_with_the_supervisor(home: Path, project: Path) -> None:
    start_warm(home, project)
    server = int((home / "warm.lock").read_text())
    sup = int((home / "supervisor.lock").read_text())
    os.kill(sup, signal.SIGTERM)  # the supervisor alone leaves (as after its idle spell)
    deadline = time.monotonic() + warmserver.SUPERVISOR_GRACE_S + 20
    while "leaving: no supervisor runs" not in warm_log(home) or (home / "warm.sock").exists():
        assert time.monotonic() < deadline, warm_log(home)
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while _running(server):
        assert time.monotonic() < deadline, f"the warm server {server} is still running"
        time.sleep(0.1)
    # and the next agent's submit simply runs in its own process
    assert gpu_json("submit", "train.py", "--hours", "0.1", "--env", "RUN=after", cwd=project)["submitted"]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_changed_module_is_never_served(home: Path, project: Path, tmp_path: Path) -> None:
    """A request that finds gpu-router changed on disk since the server's imports is declined
    (it runs in the client, on the new code) and the server leaves."""
    server = warmserver.Server()
    mod = tmp_path / "mod.py"
    mod.write_text("x = 1\n")
    st = mod.stat()
    server.files = {str(mod): (st.st_mtime_ns, st.st_size)}
    doc = {"v": 1, "argv": ["submit", "train.py", "--json"], "env": dict(os.environ), "cwd": str(project),
           "umask": 0o22, "exe": server.exe, "code": server.code, "path": server.path}
    assert server.decline_reason(doc, [0, 1, 2], os.getpid()) is None
    mod.write_text("x = 22\n")
    assert "gpu-router changed on disk" in server.decline_reason(doc, [0, 1, 2], os.getpid())
    assert server.leaving


def test_stale_notices_a_changed_module(tmp_path: Path) -> None:
    f = tmp_path / "mod.py"
    f.write_text("x = 1\n")
    st = f.stat()
    files = {str(f): (st.st_mtime_ns, st.st_size)}
    assert warmserver.stale(files) is None
    f.write_text("x = 22\n")
    assert "changed" in warmserver.stale(files)
    f.unlink()
    assert "gone" in warmserver.stale(files)


WORDS = st.sampled_from(["submit", "plan", "approve", "deny", "pin", "jobs", "train.py", "--json",
                         "--name", "--hours", "0.1", "--env", "A=1", "--", "-h", "--help",
                         "--version", "--wait-s", "x", "--secret", "--js"])


@settings(max_examples=150, deadline=None)
@given(st.lists(WORDS, max_size=8))
def test_only_a_json_submit_is_ever_served(argv: list[str]) -> None:
    """For any words: the server serves them only when the command's own parser reads a submit
    with --json (the choke point: wire.wanted, then warmserver._not_a_json_submit)."""
    from tui import cli

    if not wire.wanted(argv, {}):
        return
    why, parsed = warmserver._not_a_json_submit(argv)
    if why is not None:
        assert parsed is None
        return
    head = argv[:argv.index("--")] if "--" in argv else argv
    args = cli.build_parser(only=cli._command_of(head)).parse_args(head)
    assert args.command == "submit" and args.json is True
    assert parsed[1].command == "submit" and parsed[1].json is True


@pytest.mark.slow  # runs the supervisor: end to end
def test_the_socket_is_the_users_alone(home: Path, project: Path) -> None:
    start_warm(home, project)
    mode = (home / "warm.sock").stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)
    assert (home / "warm.log").stat().st_mode & 0o077 == 0


_TEXT = st.text(st.characters(blacklist_categories=()), max_size=12)  # surrogates too: non-UTF-8 names
_PLAIN = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
                      max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(_TEXT, _PLAIN, max_size=6))
def test_the_clients_json_is_json(doc: dict) -> None:
    """The client writes its request without the json module (tui/warm/wire.py: its start is most of
    a warm submit): for any request-shaped value it writes what json.dumps writes, and the
    server reads back the very same value."""
    text = wire.dumps(doc)
    assert text == json.dumps(doc, separators=(",", ":"))
    assert json.loads(text) == doc
    for key in ("pid", "rc"):  # the answers' fast path, both ways they may be written
        for written in (wire.line({key: 4321}), json.dumps({key: -7}).encode() + b"\n"):
            class One:
                def readline(self, raw=written) -> bytes:
                    return raw
            assert wire.read_line(One()) == json.loads(written)
