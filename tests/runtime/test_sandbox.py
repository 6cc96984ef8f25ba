"""A job is not the person: a local job runs in bubblewrap, away from the keychain, the store,
the config, the SSH agent and approvals, and its outputs still come home.

Real bubblewrap, a real SecretService keychain (dbus + gnome-keyring), a real ssh-agent, a real
supervisor and `gpu` command. The job tries each escape an agent's code would (it is handed
every path the person's side has, as if it had guessed them) and records what happened.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core import paths
from core.runtime import boundary
from tests.conftest import (gpu_exe, gpu_json, make_git_project, run_gpu, run_in_terminal, wait_state,
                            write_user_config)

SECRET = "hf_sandboxTestSecretValue0123456789abcdef"

ESCAPES = r'''
import json, os, socket, stat, subprocess, sys
import gpu

args = json.loads(open("escape_args.json").read())
report = {}
start_env = sorted(os.environ)  # before the attempts below set anything


def attempt(name, fn):
    try:
        report[name] = "ESCAPED: " + str(fn())[:300]
    except BaseException as exc:  # noqa: BLE001 - every way of failing is the expected result
        report[name] = f"blocked: {type(exc).__name__}: {exc}"[:300]


def secret_tool():
    env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": args["bus"]}
    r = subprocess.run(["secret-tool", "search", "--all", "service", "gpu-router"],
                       capture_output=True, text=True, timeout=30, env=env)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout  # whatever the keychain said (the test looks for the secret in it)
    raise RuntimeError(f"status {r.returncode}: {r.stderr.strip()[:120]}")


def keyring_read():
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = args["bus"]
    import keyring
    value = keyring.get_password("gpu-router", "HF_TOKEN")
    if value is None:
        raise RuntimeError("no value")
    return value


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return "connected"


def write_cgroup():
    tried = []
    for path in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs"):
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
            return path
        except OSError as exc:
            tried.append(f"{path}: {exc}")
    raise PermissionError("; ".join(tried))


def approve_in_pty():
    # an agent's trick: gpu approve in a pseudo-terminal, no agent markers, no job marker
    cmd = (f"{sys.executable} -c 'from tui.cli import main; main()' approve {args['held']}")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": args["repo"], "HOME": args["person_home"],
           "GPU_ROUTER_HOME": args["home"]}
    r = subprocess.run(["script", "-qec", cmd, "/dev/null"], input=args["held"] + "\n",
                       capture_output=True, text=True, timeout=60, env=env)
    if r.returncode == 0:
        return r.stdout[-200:]
    raise RuntimeError(f"status {r.returncode}: {(r.stdout + r.stderr).strip()[-160:]}")


def tcp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return "connected"


attempt("secret-tool", secret_tool)
attempt("keyring", keyring_read)
attempt("session bus socket", lambda: connect_unix(args["bus_path"]))
attempt("abstract socket", lambda: connect_unix("\0" + args["abstract"]))
attempt("ssh agent socket", lambda: connect_unix(args["agent_sock"]))
attempt("ssh agent variable", lambda: os.environ["SSH_AUTH_SOCK"])
attempt("store read", lambda: open(args["store"], "rb").read(16))
attempt("store write", lambda: open(args["store"], "r+b"))
attempt("config read", lambda: open(args["config"]).read() or (_ for _ in ()).throw(FileNotFoundError("empty: not the real one")))
try:  # the test checks that the real file did not change
    with open(args["config"], "a") as f:
        f.write("escaped: true\n")
except OSError:
    pass
attempt("gpu-router home", lambda: [n for n in os.listdir(args["home"]) if n != "jobs"] or (_ for _ in ()).throw(FileNotFoundError("only jobs/")))
attempt("person's home", lambda: os.listdir(args["person_home"]))
attempt("project write", lambda: open(os.path.join(args["project"], "escaped.txt"), "w"))
attempt("system write", lambda: open("/usr/gpu-router-escape", "w"))
attempt("leave cgroup", write_cgroup)
attempt("terminal", lambda: os.open("/dev/tty", os.O_RDWR))
attempt("approve in a pty", approve_in_pty)
attempt_dir = os.path.join(os.path.dirname(os.environ["GPU_ROUTER_OUTPUT_DIR"]), "attempts",
                           os.environ["GPU_ROUTER_ATTEMPT"])
attempt("attempt folder", lambda: open(os.path.join(attempt_dir, "exit.json"), "w"))

facts = {
    "device": stat.S_ISCHR(os.stat(args["device"]).st_mode) if os.path.exists(args["device"]) else False,
    "mark": os.path.exists("/run/gpu-router-job"),
    "network": report.setdefault("tcp", "") if False else None,
    "home": os.environ["HOME"],
    "env": start_env,
}
try:
    facts["network"] = tcp(args["port"])
except OSError as exc:
    facts["network"] = f"blocked: {exc}"
with open(os.path.join(gpu.output_dir(), "escapes.json"), "w") as f:
    json.dump({"report": report, "facts": facts}, f, indent=1)
print("tried", len(report), "escapes")
'''


class AbstractListener:
    """A listening abstract unix socket, like a session bus started by `dbus-launch`."""

    def __init__(self, name: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + name)
        self.sock.listen(8)
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(autouse=True)
def _tools() -> None:
    """bubblewrap and the keychain's command line are system packages the tests need."""
    from tests.services import require

    require("bwrap", "secret-tool", "ssh-agent", "script")


@pytest.fixture
def fake_gpu_node():
    """A character device named like an NVIDIA node (the null device's numbers): what the
    sandbox must pass through, on a machine with no GPU."""
    path = Path(f"/dev/nvidia-gpu-router-test-{os.getpid()}")
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.fail("making a device node needs root (CI runs as root)")
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def ssh_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        if sock.exists():
            break
        threading.Event().wait(0.05)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    yield sock
    proc.terminate()
    proc.wait(5)


def _listener() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv, srv.getsockname()[1]


@pytest.mark.slow
def test_a_local_job_cannot_reach_the_person(home: Path, tmp_path: Path, keychain, ssh_agent,
                                             fake_gpu_node) -> None:
    import keyring

    keyring.set_password("gpu-router", "HF_TOKEN", SECRET)
    config = write_user_config("targets:\n  local: {kind: local}\n")
    # a job held for a person: an agent asks for six hours
    held_project = make_git_project(tmp_path / "held", {"long.py": "print('long')\n"})
    held = gpu_json("submit", "long.py", "--hours", "6", "--wait-s", "0", cwd=held_project)
    assert held["job"]["state"] == "awaiting_approval"

    abstract = f"gpu-router-test-{os.getpid()}"
    bus_listener = AbstractListener(abstract)
    srv, port = _listener()
    project = make_git_project(tmp_path / "p", {"escape.py": ESCAPES})
    bus_address = keychain.env["DBUS_SESSION_BUS_ADDRESS"]
    # the secret's value is not handed over: a file holding it would not even ship (its token)
    args = {"bus": bus_address,
            "bus_path": bus_address.split("path=", 1)[1].split(",")[0],
            "abstract": abstract, "agent_sock": str(ssh_agent), "store": str(paths.db_file()),
            "config": str(config), "home": str(home), "person_home": keychain.env["HOME"],
            "project": str(project), "held": held["job"]["short_id"],
            "repo": str(Path(__file__).resolve().parents[2]), "device": str(fake_gpu_node),
            "port": port}
    (project / "escape_args.json").write_text(json.dumps(args))
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    try:
        sub = gpu_json("submit", "escape.py", "--hours", "0.1", "--wait-s", "10",
                       "--output", "escapes.json", cwd=project)
        doc = wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=180)
    finally:
        bus_listener.close()
        srv.close()
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert doc["state"] == "done", log
    assert "sandbox: bubblewrap" in log
    got = json.loads((project / "runs" / sub["job"]["short_id"] / "escapes.json").read_text())
    report, facts = got["report"], got["facts"]
    escaped = {name: said for name, said in report.items() if not said.startswith("blocked")}
    assert escaped == {}, escaped
    print(json.dumps(report, indent=1))
    assert len(report) >= 17
    assert SECRET not in json.dumps(got) and SECRET not in log
    # what the sandbox passes through, and what it is
    assert facts["device"] is True, "the GPU device node is not visible inside the sandbox"
    assert facts["mark"] is True
    assert facts["network"] == "connected"  # the network is on unless asked off
    assert facts["home"].startswith(str(home / "jobs" / sub["job"]["id"]))
    for name in ("DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "GPU_ROUTER_HOME"):
        assert name not in facts["env"]
    if boundary.landlock_abi() >= 6:
        assert bus_listener.accepted == 0, "the job reached an abstract socket outside its sandbox"
    # nothing it tried changed what a person decides
    after = gpu_json("status", held["job"]["short_id"])
    assert after["state"] == "awaiting_approval"
    assert not (project / "escaped.txt").exists()
    assert "escaped" not in config.read_text()


@pytest.mark.slow
def test_network_false_leaves_a_job_loopback_only(home: Path, tmp_path: Path) -> None:
    srv, port = _listener()
    project = make_git_project(tmp_path / "p", {
        "net.py": ("import socket, sys\n"
                   "try:\n"
                   f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                   "    print('NET: reached')\n"
                   "except OSError as exc:\n"
                   "    print('NET: blocked', exc)\n"),
        "gpu.yaml": "network: false\n"})
    try:
        sub = gpu_json("submit", "net.py", "--hours", "0.1", "--wait-s", "10", cwd=project)
        wait_state(sub["job"]["short_id"], {"done"}, timeout=120)
    finally:
        srv.close()
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "NET: blocked" in log and "without network" in log, log


@pytest.mark.slow
def test_without_a_sandbox_an_agents_job_waits_and_a_persons_runs_with_a_warning(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv(boundary.BWRAP_ENV, str(broken))
    project = make_git_project(tmp_path / "p", {"hi.py": "print('hello from the job')\n"})
    sub = gpu_json("submit", "hi.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    job = sub["job"]
    assert job["state"] == "awaiting_approval"
    assert "without a sandbox" in job["reason"] and "No permissions" in job["reason"]
    assert "without a sandbox" in sub["guidance"]["tell_user"]
    # a person approves it (knowing why it was held): it runs, and its log says how
    status, out = run_in_terminal([gpu_exe(), "approve", job["short_id"]], job["short_id"])
    assert status == 0, out
    wait_state(job["short_id"], {"done"}, timeout=120)
    log = run_gpu("logs", job["short_id"]).stdout
    assert "WARNING: running without a sandbox" in log and "hello from the job" in log
    # a person's own job is not held for it: it runs with the same warning
    status, out = run_in_terminal([gpu_exe(), "submit", "hi.py", "--hours", "0.1", "--wait-s", "0"],
                                  "", cwd=project)
    assert status == 0, out
    mine = gpu_json("status", "last", cwd=project)
    wait_state(mine["short_id"], {"done"}, timeout=120)
    assert "WARNING: running without a sandbox" in run_gpu("logs", mine["short_id"]).stdout


def test_the_launch_refuses_an_unsandboxed_run_it_was_not_cleared_for(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from core.runtime import jobspawn

    monkeypatch.setenv(boundary.BWRAP_ENV, str(tmp_path / "missing-bwrap"))
    boundary.forget_probe()
    lines: list[str] = []

    class Log:
        def line(self, text: str) -> None:
            lines.append(text)

    monkeypatch.setattr(jobspawn, "SANDBOX", {})
    with pytest.raises(RuntimeError, match="no sandbox could be made"):
        jobspawn.decide_sandbox({"sandbox": {"fallback": "refuse"}}, Log())
    jobspawn.decide_sandbox({"sandbox": {"fallback": "warn"}}, Log())
    assert lines and lines[-1].startswith("WARNING: running without a sandbox")
    assert jobspawn.SANDBOX == {}
    boundary.forget_probe()


def test_the_submit_side_sandbox_verdict_is_remembered_until_bubblewrap_changes(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submit's plan reads the sandbox verdict from a cache (the trial start costs ~60 ms of
    CPU per submit); a changed binary, and `gpu targets probe local`, ask again."""
    from core.providers import gpuprobe

    tries = tmp_path / "tries"
    broken = tmp_path / "bwrap"
    broken.write_text(f"#!/bin/sh\necho x >> {tries}\necho 'bwrap: No permissions' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv(boundary.BWRAP_ENV, str(broken))

    def verdict() -> dict:
        boundary.forget_probe()  # as a new process would start: only the file remembers
        return gpuprobe.sandbox_verdict()

    def tried() -> int:
        return len(tries.read_text().splitlines()) if tries.exists() else 0

    first = verdict()
    assert not first["ok"] and "No permissions" in first["why"]
    n = tried()
    assert n >= 1
    assert verdict() == first and tried() == n  # remembered: bubblewrap not started again
    broken.write_text(broken.read_text().replace("exit 1", "exit 1 # upgraded"))
    assert not verdict()["ok"] and tried() > n  # another binary: tried afresh
    n = tried()
    assert verdict()["ok"] is False and tried() == n
    from core.engine import target_setup

    target_setup.probe("local")  # `gpu targets probe local`: past the remembered answer
    assert tried() > n
    boundary.forget_probe()


# -- the environment allow-list ----------------------------------------------------------------

SESSION = ["DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "DISPLAY",
           "WAYLAND_DISPLAY", "GNOME_KEYRING_CONTROL", "SSH_AGENT_PID", "KRB5CCNAME"]


@settings(max_examples=examples(300), deadline=None)
@given(machine=st.dictionaries(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20),
                               st.text(max_size=30), max_size=30),
       declared=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True), st.text(max_size=20),
                                max_size=5),
       session=st.lists(st.sampled_from(SESSION), unique=True))
def test_a_job_gets_what_it_declared_and_no_session_variable(machine, declared, session) -> None:
    machine = {**machine, **{name: "/run/user/1000/bus" for name in session}}
    env = boundary.job_environ(machine, declared)
    for name, value in declared.items():
        assert env[name] == value
    for name in SESSION:
        if name not in declared:
            assert name not in env
    for name in env:
        assert name in declared or boundary.passes(name)


def test_the_sandbox_command_line_hides_before_it_shows(tmp_path: Path) -> None:
    """Order is what makes the hiding hold: the system, then the empty tmpfs over what is
    hidden, then the job's folders (parents first), then the mark."""
    hidden = tmp_path / "opt-home"
    (hidden / "jobs" / "j" / "out").mkdir(parents=True)
    plan = {"ro": [str(hidden / "jobs" / "j")], "rw": [str(hidden / "jobs" / "j" / "out")],
            "hide": [str(hidden)], "workdir": str(hidden / "jobs" / "j"), "mark": str(tmp_path / "m"),
            "network": False, "devices": ["/dev/nvidia0"]}
    (tmp_path / "m").write_text("x")
    argv = boundary.bwrap_argv("bwrap", plan, ["python", "train.py"], {"disable_userns": True})
    assert argv[-3:] == ["--", "python", "train.py"]
    for flag in ("--unshare-user", "--unshare-pid", "--new-session", "--die-with-parent",
                 "--unshare-net", "--disable-userns"):
        assert flag in argv
    joined = " ".join(argv)
    assert f"--ro-bind {hidden}/jobs/j {hidden}/jobs/j" in joined
    assert joined.index(f"--ro-bind {hidden}/jobs/j ") < joined.index(f"--bind {hidden}/jobs/j/out")
    assert "--tmpfs /run" in joined and joined.index("--tmpfs /run") < joined.index("/run/gpu-router-job")
    assert "--dev-bind-try /dev/nvidia0 /dev/nvidia0" in joined
    assert "/home" not in argv and "/root" not in argv and "/run/user" not in joined


def test_the_macos_profile_denies_the_keychain_and_writes_outside(tmp_path: Path) -> None:
    """No Mac here: the profile's text is checked, not run (docs/security/sandbox.md)."""
    profile = boundary.seatbelt_profile({"ro": ["/Users/me/gr/jobs/j/code"], "rw": ["/Users/me/gr/jobs/j/out"],
                                         "hide": ["/Users/me"], "network": False})
    assert profile.startswith("(version 1)")
    assert 'com.apple.SecurityServer' in profile and r'com\.openssh' in profile
    assert '(deny file-read* file-write* (subpath "/Users/me"))' in profile
    assert profile.index("(deny file-write*)") < profile.index('(allow file-read* file-write* (subpath "/Users/me/gr/jobs/j/out"))')
    assert "(deny network*)" in profile
    assert profile.count("(") == profile.count(")")
    argv = boundary.wrap({"kind": "seatbelt", "tool": "/usr/bin/sandbox-exec"},
                         {"rw": ["/Users/me/gr/jobs/j/out"], "hide": ["/Users/me"]}, ["python3", "train.py"])
    assert argv[:2] == ["/usr/bin/sandbox-exec", "-p"] and argv[3:] == ["python3", "train.py"]
    tricky = boundary.seatbelt_profile({"rw": ['/tmp/a"b) (allow default'], "hide": []})
    assert '(subpath "/tmp/a\\"b) (allow default")' in tricky


@pytest.mark.slow
def test_a_remote_job_gets_only_what_it_declared(sshd, home: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Over SSH there is no sandbox, but the job's environment is still its own: no SSH
    session variables of the connection, none of the person's, only what it declared plus the
    machine's allow-list."""
    from tests.providers.test_ssh import add_box

    monkeypatch.setenv("PERSONAL_TOKEN_OF_THE_SHELL", "x" * 24)  # in the supervisor's environment
    add_box(sshd, tmp_path)
    project = make_git_project(tmp_path / "p", {
        "env.py": "import json, os\nprint('ENV ' + json.dumps(sorted(os.environ)))\n"})
    sub = gpu_json("submit", "env.py", "--provider", "box", "--hours", "0.1", "--wait-s", "10",
                   "--env", "MY_SETTING=1", cwd=project)
    wait_state(sub["job"]["short_id"], {"done"}, timeout=180)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    names = json.loads(next(ln for ln in log.splitlines() if ln.startswith("ENV "))[4:])
    assert "MY_SETTING" in names
    for name in ("SSH_CONNECTION", "SSH_CLIENT", "SSH_AUTH_SOCK", "PERSONAL_TOKEN_OF_THE_SHELL",
                 "GPU_ROUTER_HOME", "GPU_ROUTER_CONFIG"):
        assert name not in names, names
    ours = {"MY_SETTING", "PYTHONPATH", "PYTHONUNBUFFERED", "PWD", "WANDB_DIR", "WANDB_MODE",
            "WANDB_SILENT", "GPU_ROUTER_SECRET_ENV"}
    for name in names:
        assert name in ours or name.startswith("GPU_ROUTER_") or boundary.passes(name), name


@pytest.mark.slow
def test_local_data_reached_through_a_link_is_readable_and_read_only(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "disk" / "set"
    real.mkdir(parents=True)
    (real / "rows.csv").write_text("a,b\n1,2\n")
    link = tmp_path / "datasets"
    link.symlink_to(tmp_path / "disk")
    project = make_git_project(tmp_path / "p", {"read.py": (
        "import gpu\n"
        "p = gpu.data_dir() / 'set' / 'rows.csv'\n"
        "print('DATA', p.read_text().splitlines()[1])\n"
        "try:\n"
        "    p.write_text('changed')\n"
        "    print('WROTE')\n"
        "except OSError as exc:\n"
        "    print('READ-ONLY', exc.errno)\n")})
    sub = gpu_json("submit", "read.py", "--hours", "0.1", "--wait-s", "10",
                   "--data", f"set={link / 'set'}", cwd=project)
    wait_state(sub["job"]["short_id"], {"done"}, timeout=120)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "DATA 1,2" in log and "READ-ONLY" in log and "WROTE" not in log, log
    assert (real / "rows.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.slow
def test_the_job_s_variables_never_reach_bubblewrap_itself(home: Path, tmp_path: Path) -> None:
    """bubblewrap runs outside the sandbox it builds: a job's LD_PRELOAD there would run its code
    as the person. LD_DEBUG shows which programs the loader saw the variable in: the job's
    Python does, bubblewrap must not."""
    project = make_git_project(tmp_path / "p", {
        "job.py": "import os\nprint('LD_DEBUG inside:', os.environ.get('LD_DEBUG'), flush=True)\n",
        "gpu.yaml": "env: {LD_DEBUG: files}\n"})
    sub = gpu_json("submit", "job.py", "--hours", "0.1", "--wait-s", "10", cwd=project)
    wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    assert "sandbox: bubblewrap" in log and "LD_DEBUG inside: files" in log, log[-3000:]
    assert "needed by" in log, "the loader's trace of the job's own Python is missing"
    loaded_for = {line.split("needed by", 1)[1].split()[0] for line in log.splitlines() if "needed by" in line}
    assert not any(p.endswith("bwrap") for p in loaded_for), loaded_for


@pytest.mark.slow
def test_local_data_shows_the_job_nothing_the_bundle_s_judge_withholds(home: Path, tmp_path: Path) -> None:
    """A local data set is read in place, not copied: the files submit said it withheld
    (credentials, a folder of them) must be as unreadable to the job as if
    they had stayed behind on an upload."""
    data = tmp_path / "ds"
    (data / "sub").mkdir(parents=True)
    (data / "rows.csv").write_text("a,b\n1,2\n")
    (data / ".env").write_text(f"HF_TOKEN={SECRET}\n")
    (data / "sub" / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n"
                                             "-----END OPENSSH PRIVATE KEY-----\n")
    (data / ".aws").mkdir()
    (data / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {SECRET}\n")
    reader = ("import gpu, os\nroot = gpu.data_dir() / 'ds'\n"
              "for dirpath, _, names in os.walk(root):\n"
              "    for n in names:\n"
              "        p = os.path.join(dirpath, n)\n"
              "        try:\n"
              "            print('READ', os.path.relpath(p, root), repr(open(p).read()), flush=True)\n"
              "        except OSError as exc:\n"
              "            print('DENIED', os.path.relpath(p, root), exc.errno, flush=True)\n")
    project = make_git_project(tmp_path / "p", {"read.py": reader})
    sub = gpu_json("submit", "read.py", "--hours", "0.1", "--wait-s", "10", "--data", f"ds={data}", cwd=project)
    assert any("withheld" in w for w in sub["guidance"].get("warnings", [])) or "withheld" in json.dumps(sub)
    wait_state(sub["job"]["short_id"], {"done", "failed"}, timeout=120)
    log = run_gpu("logs", sub["job"]["short_id"]).stdout
    job_log = (home / "jobs" / sub["job"]["id"] / "job.log").read_bytes()
    assert "READ rows.csv 'a,b\\n1,2\\n'" in log, log
    assert SECRET.encode() not in job_log and SECRET not in log
    assert SECRET[:12] not in log, "a withheld file's content reached the job"


@pytest.mark.parametrize("which", ["home", "inside home", "config", "config file"])
def test_data_is_never_gpu_router_s_own_folders(home: Path, tmp_path: Path, which: str) -> None:
    config = write_user_config("targets:\n  local: {kind: local}\n")
    place = {"home": home, "inside home": home / "jobs", "config": config.parent, "config file": config}[which]
    if not place.exists():
        place.mkdir(parents=True)
    project = make_git_project(tmp_path / "p", {"read.py": "print(1)\n"})
    proc = run_gpu("submit", "read.py", "--hours", "0.1", "--json", "--data", f"x={place}", cwd=project)
    assert proc.returncode != 0, proc.stdout
    assert "gpu-router's" in proc.stdout + proc.stderr and "a job never reads it" in proc.stdout + proc.stderr
