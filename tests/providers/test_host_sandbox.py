"""Jobs on a host cannot reach one another (issue 36, item 5), against real OpenSSH servers.

Two hosts, both this machine through a private sshd on 127.0.0.1: one whose sessions find
bubblewrap on PATH (jobs run in the launcher's sandbox there, as on the local target), and
one whose sessions get a PATH of every program but `bwrap` (`bare_sshd`: a host without
bubblewrap). On the first a job reaches neither the host's object store, nor the `code.tree`
record beside its folder, nor other jobs' folders, nor `~/.ssh`; on the second nothing a job
could have written is trusted: no folder a job ran in is taken over, every object is checked
against its hash when a code folder is built, the plan and `gpu targets` say "no sandbox on
this host: ...", and an agent's job waits for a person unless the user config opens the
target to agents (`agents_without_sandbox: true`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.services import without_bwrap

pytestmark = pytest.mark.slow

PYTHON = getattr(__import__("sys"), "_base_executable", None) or __import__("sys").executable
SENTENCE = "no sandbox on this host: a job there runs as your account and can reach other jobs"


@pytest.fixture
def bare_sshd(sshd, tmp_path: Path):
    """The test's sshd, restarted so that its sessions find no `bwrap` on PATH."""
    return without_bwrap(sshd, tmp_path / "bare-bin")


def add_box(sshd, tmp_path: Path, name: str = "box") -> dict:
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    return gpu_json("targets", "add", "ssh", name, "--host", o["host"], "--port", str(o["port"]),
                    "--user", o["user"], "--key", o["key"], "--known-hosts", o["known_hosts"],
                    "--root", o["root"], "--python", o["python"], "--max-jobs", "2")


def open_to_agents(name: str = "box") -> None:
    """What a person writes in their user config: this host's jobs may be agents' too."""
    cfg = Path(os.environ["GPU_ROUTER_CONFIG"])
    doc = yaml.safe_load(cfg.read_text())
    doc["targets"][name]["agents_without_sandbox"] = True
    cfg.write_text(yaml.safe_dump(doc))


def submit(project: Path, script: str, *env: str) -> dict:
    args = [a for e in env for a in ("--env", e)]
    sub = gpu_json("submit", script, "--provider", "box", "--hours", "0.1", *args, "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed", "awaiting_approval"}, timeout=180)
    assert done["state"] == "done", (done["state"], run_gpu("logs", short).stdout)
    doc = gpu_json("status", short, "--verbose")
    doc["log"] = run_gpu("logs", short).stdout
    return doc


# a job that rewrites a file of its code folder and then the record beside the folder, so the
# record describes the changed folder (inode and change time of every entry, as a build writes)
REWRITER = r"""
import json, os, pathlib
print('DATA', pathlib.Path('data.txt').read_text().strip())
if os.environ.get('WRITE') == '1':
    pathlib.Path('data.txt').write_text('CORRUPTED\n')
    tree = os.path.join(os.path.dirname(os.getcwd()), 'code.tree')
    try:
        doc = json.load(open(tree))
        for row in doc['rows']:
            st = os.lstat(row[0])
            row[3], row[4] = st.st_ino, st.st_ctime_ns
        json.dump(doc, open(tree, 'w'))
        print('TREE REWRITTEN')
    except OSError as exc:
        print('TREE UNREACHABLE', type(exc).__name__)
"""

# a job that rewrites the host's stored object of shared.py (which another project ships too)
TAMPERER = r"""
import hashlib, os, pathlib
if os.environ.get('TAMPER') == '1':
    digest = hashlib.sha256(pathlib.Path('shared.py').read_bytes()).hexdigest()
    root = pathlib.Path(os.getcwd()).parents[2]  # ROOT/jobs/<id>/code
    obj = root / 'objects' / digest[:2] / digest[2:]
    try:
        os.chmod(obj, 0o644)
        obj.write_text("print('SHARED TAMPERED')\n")
        print('STORE REWRITTEN')
    except OSError as exc:
        print('STORE UNREACHABLE', type(exc).__name__)
exec(pathlib.Path('shared.py').read_text())
"""
SHARED = "print('SHARED ORIGINAL')\n"


def test_a_host_without_bubblewrap_says_so_and_holds_an_agents_job(bare_sshd, home: Path, tmp_path: Path) -> None:
    added = add_box(bare_sshd, tmp_path)
    assert added["probe"]["available"] is True, added
    box = added["probe"]["details"]["sandbox"]
    assert box["ok"] is False and "bubblewrap is not installed" in box["why"], box
    shown = run_gpu("targets").stdout
    assert SENTENCE in " ".join(shown.split()), shown
    assert "agents_without_sandbox" in shown

    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    plan = gpu_json("plan", "a.py", "--provider", "box", "--hours", "0.1", cwd=project)
    plan = plan.get("plan", plan)
    assert any(SENTENCE in r for r in plan["reasons"]), plan["reasons"]
    assert [h["rule"] for h in plan["holds"]] == ["sandbox"], plan["holds"]
    held = gpu_json("submit", "a.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert held["job"]["state"] == "awaiting_approval", held["job"]
    assert "agents_without_sandbox" in json.dumps(held["guidance"]), held["guidance"]

    open_to_agents()
    plan = gpu_json("plan", "a.py", "--provider", "box", "--hours", "0.1", cwd=project)
    plan = plan.get("plan", plan)
    assert any(SENTENCE in r for r in plan["reasons"]), plan["reasons"]  # said all the same
    assert plan["holds"] == [], plan["holds"]
    shown = " ".join(run_gpu("targets").stdout.split())
    assert SENTENCE in shown and "agents' jobs run there without you" in shown, shown


def test_without_bubblewrap_a_folder_a_job_ran_in_is_never_taken_over(bare_sshd, home: Path, tmp_path: Path) -> None:
    """The issue's first example: a job rewrote its code folder and the `code.tree` record
    beside it, and the next job of the project took the folder over and ran the changed code."""
    add_box(bare_sshd, tmp_path)
    open_to_agents()
    project = make_git_project(tmp_path / "p", {"a.py": REWRITER, "data.txt": "ORIGINAL\n"})
    first = submit(project, "a.py", "WRITE=1", "RUN=1")
    assert "TREE REWRITTEN" in first["log"], first["log"]
    second = submit(project, "a.py", "WRITE=0", "RUN=2")
    assert "DATA ORIGINAL" in second["log"], second["log"]
    assert SENTENCE in json.dumps(first["events"]), first["events"]
    assert "runtime was changed" not in json.dumps(second["events"])  # an honest run leaves it as sent
    jobs = tmp_path / "remote" / "jobs"
    assert (jobs / first["id"] / "code" / "data.txt").read_text() == "CORRUPTED\n"  # left for fetch


def test_without_bubblewrap_an_object_a_job_rewrote_is_not_built_from(bare_sshd, home: Path, tmp_path: Path) -> None:
    """The issue's second example: a job rewrote an object in the host's store, and another
    project's job was built from it."""
    add_box(bare_sshd, tmp_path)
    open_to_agents()
    one = make_git_project(tmp_path / "one", {"a.py": TAMPERER, "shared.py": SHARED})
    first = submit(one, "a.py", "TAMPER=1")
    assert "STORE REWRITTEN" in first["log"], first["log"]
    other = make_git_project(tmp_path / "other", {"b.py": "import pathlib\nexec(pathlib.Path('shared.py').read_text())\n",
                                                  "shared.py": SHARED})
    second = submit(other, "b.py")
    assert "SHARED ORIGINAL" in second["log"] and "TAMPERED" not in second["log"], second["log"]
    assert "did not match their hash" in json.dumps(second["events"]), second["events"]
    digest = hashlib.sha256(SHARED.encode()).hexdigest()
    stored = tmp_path / "remote" / "objects" / digest[:2] / digest[2:]
    assert stored.read_text() == SHARED  # sent again, whole


def test_with_bubblewrap_a_job_reaches_no_store_record_other_job_or_ssh_keys(sshd, home: Path, tmp_path: Path) -> None:
    """On a host with bubblewrap the job runs in the launcher's sandbox: the host's object
    store, wheelhouse, other jobs' folders, the record beside its own folder and `~/.ssh` are
    out of its reach; only its own folders are writable. The next job of the project still
    takes over an untouched folder (the take-over is safe there)."""
    added = add_box(sshd, tmp_path)
    assert added["probe"]["details"]["sandbox"]["ok"] is True, added["probe"]
    assert SENTENCE not in run_gpu("targets").stdout
    ssh_dir = sshd.root / "home" / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "id_ed25519").write_text("PRIVATE KEY\n")
    probe = r"""
import os, pathlib, sys
root = pathlib.Path(os.getcwd()).parents[2]
def reach(name, fn):
    try:
        fn()
        print('REACHED', name)
    except OSError as exc:
        print('UNREACHABLE', name, type(exc).__name__)
reach('store', lambda: os.listdir(root / 'objects'))
reach('wheelhouse', lambda: os.listdir(root / 'wheelhouse'))
def other_jobs():
    others = [n for n in os.listdir(root / 'jobs') if n != os.environ['GPU_ROUTER_JOB_ID']]
    if not others:
        raise FileNotFoundError('no other job seen')
    return others
reach('other jobs', other_jobs)
reach('record', lambda: open(os.path.join(os.path.dirname(os.getcwd()), 'code.tree')).read())
reach('ssh', lambda: open(sys.argv[1]).read())
pathlib.Path('written.txt').write_text('mine\n') if os.environ.get('WRITE') == '1' else None
print('WROTE OWN FOLDER')
"""
    project = make_git_project(tmp_path / "p", {"a.py": probe})
    key = str(ssh_dir / "id_ed25519")
    sub = gpu_json("submit", "a.py", key, "--provider", "box", "--hours", "0.1", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=180)["state"] == "done", run_gpu("logs", short).stdout
    log = run_gpu("logs", short).stdout
    assert "sandbox: bubblewrap" in log, log
    for name in ("store", "wheelhouse", "record", "ssh"):
        assert f"UNREACHABLE {name}" in log, log
    assert "REACHED" not in log and "WROTE OWN FOLDER" in log, log
    first = gpu_json("status", short, "--verbose")
    # the folder it left untouched is taken over by the next job (one inode, not a new copy)
    inode = (tmp_path / "remote" / "jobs" / first["id"] / "code" / "a.py").stat().st_ino
    again = gpu_json("submit", "a.py", key, "--provider", "box", "--hours", "0.1", "--env", "RUN=2",
                     "--wait-s", "10", cwd=project)
    assert wait_state(again["job"]["short_id"], {"done", "failed"}, timeout=180)["state"] == "done"
    second = gpu_json("status", again["job"]["short_id"], "--verbose")
    assert (tmp_path / "remote" / "jobs" / second["id"] / "code" / "a.py").stat().st_ino == inode
    # the first job's folder is there on the host, and out of the second job's sight
    assert (tmp_path / "remote" / "jobs" / first["id"] / "job.log").exists()
    log = run_gpu("logs", again["job"]["short_id"]).stdout
    for name in ("store", "wheelhouse", "other jobs", "record", "ssh"):
        assert f"UNREACHABLE {name}" in log, log


def _host(unsandboxed: str | None = None, **details) -> dict:
    from core.providers.base import TargetInfo

    info = TargetInfo("hpc", "slurm", True, gpus=[{"name": "A100", "memory_gb": 80}], unsandboxed_why=unsandboxed)
    info.details = {"sandbox": {"ok": unsandboxed is None, "why": "", "agents_without_sandbox": False}, **details}
    return {"hpc": info}


@pytest.mark.parametrize("where", ["request", "target"])
def test_a_job_in_a_container_is_not_in_the_sandbox_and_an_agents_waits(where: str) -> None:
    """A Slurm/PBS job that runs in a container (asked in gpu.yaml, which an agent can edit, or
    the target's own `container`) runs in the container's world, not in the launcher's sandbox
    (apptainer binds the home, and the target's root is bound for the job): however the host's
    bubblewrap answered, the plan says so and an agent's job waits for a person."""
    from core.config.request import JobRequest
    from core.config.user import Rules
    from core.planning.policy import evaluate
    from core.planning.router import route

    asked = {"container": "docker://pytorch"} if where == "request" else {}
    infos = _host(**({"container": "docker://pytorch"} if where == "target" else {}))
    chosen = route(JobRequest(project_dir="/p", script="a.py", hours=0.1, **asked), infos)
    assert any("container" in r and "can reach other jobs" in r for r in chosen.reasons), chosen.reasons
    holds = evaluate(hours=0.1, secrets=[], price=0.0, info=chosen.info, rules=Rules(), weekly_spend=0.0,
                     interactive=False)
    assert [h.rule for h in holds] == ["sandbox"], holds
    plain = route(JobRequest(project_dir="/p", script="a.py", hours=0.1), _host())  # its twin
    assert not any("sandbox" in r for r in plain.reasons)
    assert evaluate(hours=0.1, secrets=[], price=0.0, info=plain.info, rules=Rules(), weekly_spend=0.0,
                    interactive=False) == []


def test_a_slurm_job_runs_in_the_same_sandbox(slurm, home: Path, tmp_path: Path) -> None:
    """On a Slurm cluster whose nodes have bubblewrap the batch job's launcher makes the same
    sandbox: the target's root (object store, other jobs' folders) is out of the job's reach
    and its own folders are writable."""
    from tests.conftest import write_user_config

    root = tmp_path / "remote"
    write_user_config("targets:\n"
                      f"  box: {{kind: slurm, local: true, root: {root}, python: {PYTHON}, max_jobs: 2,\n"
                      f"        env: {{SLURM_CONF: {slurm.conf}}}}}\n")
    project = make_git_project(tmp_path / "p", {"a.py": r"""
import os, pathlib
root = pathlib.Path(os.getcwd()).parents[2]
for name in ('objects', 'bundles', 'wheelhouse'):
    print('SEES' if (root / name).exists() else 'UNREACHABLE', name)
pathlib.Path('mine.txt').write_text('ok')
print('WROTE OWN FOLDER')
"""})
    try:
        doc = submit(project, "a.py")
    finally:
        import pwd

        slurm.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name)
    assert "sandbox: bubblewrap" in doc["log"], doc["log"]
    for name in ("objects", "bundles", "wheelhouse"):
        assert f"UNREACHABLE {name}" in doc["log"], doc["log"]
    assert "WROTE OWN FOLDER" in doc["log"] and (root / "objects").is_dir()


# a job that first turns the host's copy of the verifier off, then rewrites an object
VERIFIER_OFF = r"""
import hashlib, os, pathlib
root = pathlib.Path(os.getcwd()).parents[2]
for tree in root.glob('runtime/*/codetree.py'):
    text = tree.read_text().replace('if __name__ == "__main__":',
        'copy_verified = lambda src, dst, digest, clone: copy_object(src, dst, clone)\nif __name__ == "__main__":')
    tree.write_text(text)
    print('VERIFIER OFF')
digest = hashlib.sha256(pathlib.Path('shared.py').read_bytes()).hexdigest()
obj = root / 'objects' / digest[:2] / digest[2:]
os.chmod(obj, 0o644)
obj.write_text("print('SHARED TAMPERED')\n")
print('STORE REWRITTEN')
"""


def test_without_bubblewrap_the_verifier_a_job_rewrote_is_not_run(bare_sshd, home: Path, tmp_path: Path) -> None:
    """The check of the objects is only as good as the code that checks them: a job on a host
    without a sandbox can rewrite the host's copy of the runtime (codetree.py, launch.py) as
    easily as an object. The build runs from the source sent with the command, and the runtime
    folder is checked against home's copy before a launch (a file changed or added is sent again)."""
    add_box(bare_sshd, tmp_path)
    open_to_agents()
    one = make_git_project(tmp_path / "one", {"a.py": VERIFIER_OFF, "shared.py": SHARED})
    first = submit(one, "a.py")
    assert "VERIFIER OFF" in first["log"] and "STORE REWRITTEN" in first["log"], first["log"]
    other = make_git_project(tmp_path / "other", {"b.py": "import pathlib\nexec(pathlib.Path('shared.py').read_text())\n",
                                                  "shared.py": SHARED})
    second = submit(other, "b.py")
    assert "SHARED ORIGINAL" in second["log"] and "TAMPERED" not in second["log"], second["log"]
    events = json.dumps(second["events"])
    assert "runtime" in events and "sent again" in events, events
    for tree in (tmp_path / "remote").glob("runtime/*/codetree.py"):
        assert "copy_verified = lambda" not in tree.read_text()
