"""Shared fixtures: a private gpu-router world per test, and the installed `gpu` command.

Every test gets its own GPU_ROUTER_HOME and user config, so tests never see each other's
jobs; supervisors started during a test are stopped (and their jobs' process groups
killed) when it ends.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "quickstart"


# The real services a fixture starts, as the marker that says a test needs them (pyproject.toml
# registers them; docs/development.md says how to choose by them). Fixtures that start one
# inside themselves are listed too: item.fixturenames holds every fixture a test uses, however
# indirectly, so a test is marked by what it really starts, not by what its file is called.
NEEDS = {
    "sshd": "sshd", "two_hosts": "sshd",
    "slurm": "slurm",
    "keychain": "keychain",
    "kaggle": "kaggle",
    "modal_fake": "modal",
}
HEAVY = {"slow", *NEEDS.values()}


# pytest-xdist's workers carry COLUMNS=80 (a terminal's width where there is no terminal). A
# user's shell does not export it, and `gpu` honours it when it is set, so without this the CLI
# under test lays its output out for 80 columns in parallel runs only (CI's) and not alone.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

# pytest rewrites every test module's asserts on import and keeps the result in __pycache__,
# unless bytecode writing is off: with PYTHONDONTWRITEBYTECODE=1 in the environment (as on the
# development machine) each run and each xdist worker rewrote all 150 files again, about 12 s
# of CPU per process before the first test. This process only (the `gpu` commands and jobs the
# tests start keep the environment's choice); the files it writes are ignored by git.
sys.dont_write_bytecode = False

def pytest_configure(config: pytest.Config) -> None:
    """The quick loop (`-m quick`) runs each property test with about a fifth of its examples
    (tests/props.py); the full run, and any run that names a profile, keeps them all."""
    from hypothesis import settings

    import tests.props  # noqa: F401 - registers the quick profile

    if (config.getoption("markexpr", "") or "").strip() == "quick" \
            and not config.getoption("hypothesis_profile", None):
        settings.load_profile("quick")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the services it needs, and `quick` when it needs none and is not slow.

    The Kaggle client's LOCALHOST environment fixes the fake Kaggle at 127.0.0.1:80, so its
    tests share one xdist group: with `--dist loadgroup` they run on one worker, one at a time.
    First among the hooks: an xdist worker registers its own hook, which reads the group marks,
    after this file is loaded, so without `tryfirst` it ran before the marks were there and the
    Kaggle tests of two workers met on port 80."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in NEEDS.items():
            if fixture in names:
                item.add_marker(marker)
        if "kaggle" in names:
            item.add_marker(pytest.mark.xdist_group("port-80"))
        if not any(item.get_closest_marker(m) for m in HEAVY):
            item.add_marker("quick")


# -- the quick loop fails a test that leaves a process running (issue 40) ------------------------
# A process a test started (a child of this pytest process, or any process carrying the test's
# GPU_ROUTER_HOME in its environment: a detached supervisor, a job) must be gone once the test's
# fixtures are torn down; it would otherwise drive jobs, hold ports and load the machine for the
# tests after it. Checked for quick tests after teardown, with a bounded wait (LEFT_WAIT_S) for
# processes already ending; what is still there fails the test by name and is then killed.

LEFT_WAIT_S = 2.0
_SESSION_HOME = os.environ.get("GPU_ROUTER_HOME")  # a home the whole run shares is no test's


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks since boot) of a process from /proc, or None
    when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 1:].split()
    return (fields[0].decode(), int(fields[1]), int(fields[19])) if len(fields) > 19 else None


def _boot_ticks() -> int:
    """Now, in the clock of /proc/<pid>/stat's start time (ticks since boot), one tick early."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLK_TCK) - 1


def _children() -> set[int]:
    """This process's children, from the kernel's own list (no scan of /proc: the check runs
    around every quick test, and a scan of every process twice a test cost the loop seconds)."""
    found: set[int] = set()
    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                found.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _test_processes(homes: set[str], before: set[int], since: int, children: bool = True) -> dict[int, str]:
    """Live processes (zombies are ended) this test started: this process's children that were
    not there before it, and any process started since the test began (`since`, boot ticks)
    whose environment holds GPU_ROUTER_HOME=<its home> (a detached supervisor, a job)."""
    me = os.getpid()
    found: dict[int, str] = {}
    for pid in _children() - before if children else ():
        stat = _proc_stat(pid)
        if stat is not None and stat[0] not in ("Z", "X") and stat[1] == me:
            found[pid] = "started by this test"
    if not homes:
        return found
    needles = [b"\0GPU_ROUTER_HOME=" + os.fsencode(h) + b"\0" for h in homes]
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or int(name) in found:
            continue
        pid = int(name)
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X") or stat[2] < since:
            continue  # a process older than the test cannot carry its home
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if any(n in env for n in needles):
            found[pid] = "carries this test's GPU_ROUTER_HOME"
    return found


def _checks_processes(item: pytest.Item) -> bool:
    return item.get_closest_marker("quick") is not None and os.path.isdir("/proc/self")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if _checks_processes(item):
        item.stash[_BEFORE] = _children()
        item.stash[_SINCE] = _boot_ticks()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    finally:  # the homes this test used, read before teardown undoes its environment
        homes = {os.environ.get("GPU_ROUTER_HOME"), str(getattr(item, "funcargs", {}).get("home") or "")}
        item.stash[_HOMES] = {h for h in homes if h and h != _SESSION_HOME}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    result = yield
    if not _checks_processes(item) or _BEFORE not in item.stash:
        return result
    homes, before, since = item.stash.get(_HOMES, set()), item.stash[_BEFORE], item.stash[_SINCE]
    started = [h for h in homes if _supervisor_started(h)]
    left = _still_running(lambda: _test_processes(homes, before, since), LEFT_WAIT_S, 0.1)
    if left:
        pytest.fail(f"{item.nodeid} left {len(left.splitlines())} process(es) running after its teardown: "
                    f"{'; '.join(left.splitlines())}", pytrace=False)
    if started:
        pytest.fail(f"{item.nodeid} started the supervisor ({started[0]}/supervisor.log) and is not marked slow: "
                    "a test that runs the engine end to end is @pytest.mark.slow, so the quick loop stays "
                    "quick (docs/development.md)", pytrace=False)
    return result


def _supervisor_started(home: str) -> bool:
    """Whether a supervisor was started with this home: the line the starting command writes
    before it starts one (core.engine.daemon.ensure_running), there when that command returns,
    so a test that ends a moment later is caught as surely as a long one; or the supervisor's
    own start line. The log alone is no sign: `daemon.log_line` writes there from any process,
    the PIN's tries among them."""
    try:
        with open(os.path.join(home, "supervisor.log"), "rb") as f:
            return re.search(rb"INFO (starting a supervisor \(asked by|supervisor \d+ started)", f.read()) is not None
    except OSError:
        return False


# -- the whole run fails if anything a test started outlives every fixture (issue 41 item 5) ----
# The per-test check above holds the quick loop; the full run's slow tests start services and
# supervisors whose fixtures stop them. Once the session's fixtures are all torn down (this one
# is set up first, so it is torn down last), nothing carrying a home under this run's temporary
# folder (a supervisor, a warm server, a job, a launcher) may still run: what is there is named,
# stopped, and fails the run. Services a fixture starts (sshd, Slurm, the keychain) are that
# fixture's to stop, checked where it stops them.

SESSION_LEFT_WAIT_S = 30.0  # bounded; spent only while something is still ending


def _session_leftovers(base: str) -> dict[int, str]:
    me = os.getpid()
    needle = b"\0GPU_ROUTER_HOME=" + os.fsencode(base.rstrip("/")) + b"/"
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if needle in env:
            found[pid] = "carries a test's GPU_ROUTER_HOME"
    return found


@pytest.fixture(scope="session", autouse=True)
def _nothing_outlives_the_run(tmp_path_factory: pytest.TempPathFactory):
    if not os.path.isdir("/proc/self"):
        yield
        return
    base = str(tmp_path_factory.getbasetemp())
    yield
    left = _still_running(lambda: _session_leftovers(base), SESSION_LEFT_WAIT_S, 0.2)
    if left:
        pytest.fail(f"the run left {len(left.splitlines())} process(es) running after every fixture ended: "
                    f"{'; '.join(left.splitlines())}", pytrace=False)


def _still_running(look: Callable[[], dict[int, str]], wait_s: float, step_s: float) -> str:
    """What `look` still finds after waiting up to `wait_s` for it to end, one line a process
    ("pid N (its command): why"), each then killed so what runs after does not meet it; "" when
    nothing is left."""
    deadline = time.monotonic() + wait_s
    left = look()
    while left and time.monotonic() < deadline:
        time.sleep(step_s)
        left = look()
    described = "\n".join(f"pid {pid} ({_cmdline(pid)}): {why}" for pid, why in sorted(left.items()))
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return described


_BEFORE = pytest.StashKey[set]()
_SINCE = pytest.StashKey[int]()
_HOMES = pytest.StashKey[set]()


def gpu_exe() -> str:
    exe = shutil.which("gpu")
    if exe is None:
        pytest.fail("the `gpu` command is not installed: run the README's test command "
                    "(pip install -e '.[test]')")
    return exe


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private data dir and user config for this test; cleaned up with its processes."""
    h = tmp_path / "gpu-home"
    h.mkdir()
    cfg = tmp_path / "user-config.yaml"
    monkeypatch.setenv("GPU_ROUTER_HOME", str(h))
    monkeypatch.setenv("GPU_ROUTER_CONFIG", str(cfg))
    monkeypatch.setenv("GPU_ROUTER_TICK_S", "0.2")
    monkeypatch.setenv("GPU_ROUTER_IDLE_EXIT_S", "20")
    for name in agent_marker_names():  # whoever runs the suite (a person, an agent), tests see
        monkeypatch.delenv(name, raising=False)  # no marker unless they set one themselves
    yield h
    _stop_world(h)


def agent_marker_names() -> list[str]:
    """Every variable that makes a run an agent's (core.engine.actor), GPU_ROUTER_ACTOR too."""
    from core.engine.actor import FORCE_VAR, MARKERS

    return [FORCE_VAR, *{m.var for m in MARKERS}]


def lock_holder(lock: Path) -> int | None:
    """The pid in a lock file while a process holds the lock (tui.warm.wire.lock_holder): a lock file
    outlives its process, and the pid in it may by now be another test's (pids wrap at 32768)."""
    from tui.warm.wire import lock_holder as holder

    return holder(lock)


def _stop_world(h: Path) -> None:
    for name in ("supervisor.lock", "warm.lock"):  # the supervisor, and its warm server (tui/warm/server.py)
        pid = lock_holder(h / name)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    kill_remote_jobs(h)
    _stop_late_starters(h)


def _stop_late_starters(h: Path) -> None:
    """A supervisor that a test's last `gpu` call (or an in-process dashboard) started is a
    process from the moment that call returns, but it takes its lock a moment later: the look
    at the lock above missed it, and it went on driving the test's jobs after the test (issue
    40). Found by the home in its environment: supervisors and warm servers first (no new job
    starts), then the jobs they launched (through their pid files, so a job's whole group goes),
    then whatever of this home still runs (a launcher before its pid file)."""
    if not os.path.isdir("/proc/self"):
        return
    for _ in range(20):
        left = _test_processes({str(h)}, before=set(), since=0, children=False)
        if not left:
            return
        servers = [p for p in left if any(m in _cmdline(p) for m in ("core.engine.supervisor", "tui.warm.server"))]
        for pid in servers or list(left):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        kill_remote_jobs(h)
        time.sleep(0.05)


def run_gpu(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run the installed `gpu` command as a user would (no terminal)."""
    return subprocess.run([gpu_exe(), *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, input=input)


def gpu_json(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> dict:
    args_list = list(args)
    at = args_list.index("--") if "--" in args_list else len(args_list)
    args_list.insert(at, "--json")
    proc = run_gpu(*args_list, cwd=cwd, env=env, timeout=timeout)
    assert proc.returncode == 0, f"gpu {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}"
    return json.loads(proc.stdout)


def wait_state(job: str, states: set[str], timeout: float = 120, cwd: Path | None = None) -> dict:
    """Poll `gpu status JOB --json` until the job reaches one of `states`."""
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = gpu_json("status", job, cwd=cwd)
        if doc["state"] in states:
            return doc
        time.sleep(0.2)
    raise AssertionError(f"job {job} did not reach {states} in {timeout}s; last: {doc}")


def host_pids(ns_pids: list[int], marker: str) -> list[int]:
    """This machine's pids of processes a sandboxed local job reported by its own pids: the job
    runs in a pid namespace of its own, so what it prints is the number inside it. Matched by
    NSpid inside the namespace of the job's marked processes (found before they may leave)."""
    from core.runtime import jobprocs

    def nspid(pid: int) -> list[int]:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
        except (OSError, ValueError):
            pass
        return []

    def ns(pid: int) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return None

    spaces = {ns(p) for p in jobprocs.marked_pids(marker) if len(nspid(p)) > 1} - {None}
    assert spaces, "no process of the job runs in a pid namespace of its own"
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            inner = nspid(pid)
            if len(inner) > 1 and inner[-1] in ns_pids and ns(pid) in spaces:
                found[inner[-1]] = pid
    missing = [p for p in ns_pids if p not in found]
    assert not missing, f"no process on this machine is the job's pid {missing}"
    return [found[p] for p in ns_pids]


@pytest.fixture
def unsandboxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No sandbox can be made here (bubblewrap missing): local jobs then run as they would on a
    machine without one, once a person lets them (`let_run`). For the defences that must hold
    there too, and on remote hosts: inside the sandbox most attacks cannot even be set up."""
    from core.runtime.boundary import BWRAP_ENV

    monkeypatch.setenv(BWRAP_ENV, str(tmp_path / "no-bwrap-here"))


def let_run(job: dict) -> None:
    """A person approves an agent's local job held because no sandbox can be made."""
    assert job["state"] == "awaiting_approval" and "without a sandbox" in job["reason"], job
    status, out = run_in_terminal([gpu_exe(), "approve", job["short_id"]], job["short_id"])
    assert status == 0, out


def wait_process_gone(pid: int, timeout: float, message: str) -> None:
    """Fail with `message` unless process `pid` is gone within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(message)


def make_git_project(path: Path, files: dict[str, str], gitignore: str = "") -> Path:
    """A real git repository with these files committed (and a .gitignore if given)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for rel, text in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    if gitignore:
        (path / ".gitignore").write_text(gitignore)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return path


def copy_example(dest: Path) -> Path:
    """The quickstart example as its own git project (so its runs/ land in the test's tmp)."""
    files = {p.relative_to(EXAMPLE).as_posix(): p.read_text()
             for p in EXAMPLE.rglob("*") if p.is_file() and "runs" not in p.parts
             and "__pycache__" not in p.parts}
    return make_git_project(dest, files, gitignore="runs/\n__pycache__/\n")


@pytest.fixture
def keychain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path):
    """A real SecretService keychain (dbus + gnome-keyring) for this test's processes."""
    from tests.services import Keychain

    kc = Keychain(tmp_path / "keychain")
    for k, v in kc.env.items():
        monkeypatch.setenv(k, v)
    yield kc
    _stop_world(home)  # the supervisor talks to this keychain: stop it first
    kc.close()


def take_controlling_terminal() -> None:
    """In a child after setsid (start_new_session): make the terminal on its stdin its
    controlling terminal, as a login shell's is (`/dev/tty` opens; core.engine.actor asks)."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def pty_session(argv: list[str], react, *, cwd: Path | None = None, env: dict | None = None,
                size: tuple[int, int] = (36, 120), timeout: float = 60) -> tuple[int, bytes]:
    """Run a command on a real pseudo-terminal of `size` (rows, cols); `react(output_so_far)`
    may return bytes to type. Returns (status, every byte the command wrote)."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                            env=env or {**os.environ, "TERM": "xterm"}, close_fds=True,
                            start_new_session=True, preexec_fn=take_controlling_terminal)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        typed = react(out)
        if typed:
            os.write(master, typed)
        if proc.poll() is not None and not ready:
            break
    else:
        proc.kill()
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, out


def run_in_terminal(argv: list[str], answer: str, cwd: Path | None = None,
                    timeout: float = 60) -> tuple[int, str]:
    """Run a command on a terminal and type `answer` at its prompt; (status, output)."""
    prompts = (b"? [", b"to approve it: ", b"to deny it: ", b"to trust it: ")
    state = {"sent": False}

    def react(out: bytes) -> bytes | None:
        if not state["sent"] and any(p in out for p in prompts):
            state["sent"] = True
            return answer.encode() + b"\r"
        return None

    status, out = pty_session(argv, react, cwd=cwd, timeout=timeout,
                              env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    return status, out.decode(errors="replace")


def assert_stopped_by_rule(short: str, rule: str, why: str) -> dict:
    """A job a kill rule stopped: failed with the rule and why as its reason, asked to
    checkpoint first, never retried, its outputs home (partial.txt) and the reason in job.json."""
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    assert done["state"] == "failed", done
    assert f"stopped by kill rule {rule}" in done["reason"], done["reason"]
    assert why in done["reason"], done["reason"]
    doc = gpu_json("status", short, "--verbose")
    fired = [e for e in doc["events"] if e["to"] == "checkpointing"]
    assert fired and "asked to checkpoint" in fired[0]["reason"]
    assert doc["attempt"] == 1  # a rule that fires is never retried
    out = Path(doc["outputs_dir"])
    assert (out / "partial.txt").exists()  # outputs came home
    assert f"kill rule {rule.split()[0]}" in json.loads((out / "job.json").read_text())["job"]["reason"]
    return doc


def rename_across_disks(monkeypatch) -> None:
    """Home and the project on two disks: runs/'s writer gets EXDEV from a rename between two
    folders it holds open (core/packaging/runswriter.py then copies), as across mounts."""
    import errno

    from core.packaging import runswriter

    real_rename = os.rename

    def across_disks(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if src_dir_fd is not None and src_dir_fd != dst_dir_fd:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(runswriter.os, "rename", across_disks)


def lay_out_attempt(tmp_path: Path, job: str) -> tuple[Path, Path, Path]:
    """The runtime copied, the job's script written and its attempt folder made, as a target
    lays them out before the launcher runs: (runtime, job folder, attempt folder)."""
    from core.runtime import files as runtime_files

    runtime, jdir, adir = tmp_path / "runtime", tmp_path / "job", tmp_path / "job" / "attempt"
    for src, rel in runtime_files():
        (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
        (runtime / rel).write_bytes(src.read_bytes())
    adir.mkdir(parents=True)
    (jdir / "job.py").write_text(job)
    return runtime, jdir, adir


def kill_remote_jobs(root: Path) -> None:
    """SIGKILL every process of each job a target started under `root` that still runs. Through
    jobprocs.stop, which checks the launcher is still this attempt's: a pid file outlives its job,
    and a group number read from it may by now be another test's (pids wrap at 32768 here)."""
    from core.runtime import jobprocs

    for pidfile in root.glob("jobs/*/attempts/*/pid"):
        try:
            jobprocs.stop(json.loads(pidfile.read_text()), force=True)
        except (ValueError, OSError):
            pass


@pytest.fixture
def sshd(tmp_path: Path, home: Path):
    """A real OpenSSH server on 127.0.0.1 (its own host key, our user key) for this test."""
    from tests.services import Sshd

    server = Sshd(tmp_path / "sshd")
    yield server
    _stop_world(home)  # the supervisor first: it holds a connection
    server.close()
    kill_remote_jobs(tmp_path / "remote")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A real one-node Slurm cluster (munge, slurmctld, slurmd, two fake GPUs) for the session."""
    import tempfile

    from tests.services import SlurmCluster

    # munged wants every folder above its socket world-searchable; pytest's tmp dirs are 0700
    root = Path(tempfile.mkdtemp(prefix="gpu-router-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root)
    yield cluster
    cluster.close()
    shutil.rmtree(root, ignore_errors=True)


def write_user_config(text: str) -> Path:
    """Write the test's user config (GPU_ROUTER_CONFIG, set by the `home` fixture)."""
    path = Path(os.environ["GPU_ROUTER_CONFIG"])
    path.write_text(text)
    return path


FAIL_THEN_GO_ON = """
import sys
import gpu
first = gpu.attempt() == 1
ck = gpu.checkpoint_dir() / "attempt"
print(f"attempt {gpu.attempt()} finds {'the checkpoint of attempt ' + ck.read_text() if ck.exists() else 'no checkpoint'}",
      flush=True)
ck.write_text(str(gpu.attempt()))
gpu.checkpoint_saved()  # something to resume from
print(f"attempt {gpu.attempt()} logs steps {'0-2' if first else '3-5'}", flush=True)
for step in range(0, 3) if first else range(3, 6):
    gpu.log(step=step, loss=1.0 / (step + 1))
if first:
    sys.exit(3)
"""


def failed_here(project_root: Path) -> str:
    """A job (FAIL_THEN_GO_ON) that ran on this machine, saved a checkpoint, logged steps 0-2
    and failed: its short id, for a test that resumes it elsewhere (`only_elsewhere` first)."""
    project = make_git_project(project_root, {"train.py": FAIL_THEN_GO_ON})
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    assert sub["job"]["provider"] == "local", sub
    failed = wait_state(short, {"done", "failed"}, timeout=120)
    assert failed["state"] == "failed" and "status 3" in failed["reason"], failed
    return short


def only_elsewhere(home: Path) -> None:
    """This machine's target switched off in the user's config: a resume goes elsewhere."""
    import yaml

    cfg = Path(home).parent / "user-config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"]["local"] = {"kind": "local", "enabled": False}
    cfg.write_text(yaml.safe_dump(doc))


def resumable_script(steps: int) -> str:
    """A job of `steps` half-second steps that saves every step to gpu.checkpoint_dir(), stops
    when asked to checkpoint, resumes from what it saved, and at the end writes the steps it
    did to its outputs: "every step done once" is what a resume test checks."""
    return f'''
import json, time
import gpu
ckpt = gpu.checkpoint_dir() / "steps.json"
done = json.loads(ckpt.read_text()) if ckpt.exists() else []
print(f"attempt {{gpu.attempt()}} starts after {{len(done)}} steps", flush=True)
for step in range(len(done), {steps}):
    if gpu.should_checkpoint():
        print(f"checkpointing at step {{step}}", flush=True)
        break
    time.sleep(0.5)
    done.append(step)
    ckpt.write_text(json.dumps(done))
    gpu.log(step=step, loss=1.0 / (step + 1))
else:
    (gpu.output_dir() / "steps.json").write_text(json.dumps(done))
'''
