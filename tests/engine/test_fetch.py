"""`gpu fetch ID PATH`: undeclared work comes home on demand, from the local target and from a
real ssh host, by the rules every output follows (no link followed, nothing outside the job's
folder), until the storage clean-up frees the job's folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.engine.fetch import clean_path
from core.errors import UserError
from tests.conftest import gpu_json, let_run, make_git_project, run_gpu, wait_state

pytestmark = pytest.mark.slow

WRITER = '''
import os
os.makedirs("outputs/deep", exist_ok=True)
open("outputs/model.pkl", "w").write("weights")
open("outputs/deep/curve.csv", "w").write("1,2\\n")
open("notes.txt", "w").write("remember")
secret = os.environ["OUTSIDE"]
os.symlink(secret, "outputs/leak.txt")           # a link to a file outside the job's folder
os.symlink(os.path.dirname(secret), "linked")    # and a linked folder
print("wrote", flush=True)
'''


def _run_writer(tmp_path: Path, *submit: str) -> tuple[Path, str]:
    outside = tmp_path / "outside" / "private.txt"
    outside.parent.mkdir()
    outside.write_text("PRIVATE-CONTENT")
    project = make_git_project(tmp_path / "w", {"train.py": WRITER}, gitignore="runs/\n")
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--env",
                   f"OUTSIDE={outside}", *submit, cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    return project, short


def _fetch_all_ways(project: Path, short: str) -> None:
    runs = project / "runs" / short
    doc = gpu_json("fetch", short, "outputs/", "notes.txt", cwd=project)
    assert doc["files"] == 3 and doc["dest"] == str(runs)
    assert (runs / "outputs" / "model.pkl").read_text() == "weights"
    assert (runs / "outputs" / "deep" / "curve.csv").read_text() == "1,2\n"
    assert (runs / "notes.txt").read_text() == "remember"
    assert not os.path.lexists(runs / "outputs" / "leak.txt")  # the link was not followed
    # through a linked folder, or the link itself: refused, said, nothing written
    doc = gpu_json("fetch", short, "linked/private.txt", "outputs/leak.txt", cwd=project)
    assert doc["files"] == 0 and {r["path"] for r in doc["refused"]} == {"linked/private.txt", "outputs/leak.txt"}
    assert "PRIVATE-CONTENT" not in "".join(p.read_text(errors="replace") for p in runs.rglob("*") if p.is_file())
    # a path that is not there is said, and with nothing else it is an error
    proc = run_gpu("fetch", short, "no/such.file", cwd=project)
    assert proc.returncode == 2 and "no such path" in proc.stderr and f"gpu status {short}" in proc.stderr
    partly = gpu_json("fetch", short, "notes.txt", "gone.txt", cwd=project)
    assert partly["files"] == 1 and partly["missing"] == ["gone.txt"]
    human = run_gpu("fetch", short, "notes.txt", "gone.txt", cwd=project)
    assert human.returncode == 0 and "not there: gone.txt" in human.stdout


def test_fetch_from_the_local_target(home: Path, tmp_path: Path) -> None:
    project, short = _run_writer(tmp_path)
    _fetch_all_ways(project, short)


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "~/.ssh/id_rsa", "a/../../b", ""])
def test_paths_outside_the_job_folder_are_refused(home: Path, tmp_path: Path, bad: str) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n"})
    short = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]["short_id"]
    wait_state(short, {"done", "failed"}, timeout=120)
    proc = run_gpu("fetch", short, bad, cwd=project)
    assert proc.returncode == 2 and "gpu fetch PATH" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["..", ".", "a", "b", "", "~", "/"]), min_size=1, max_size=6))
def test_a_cleaned_path_never_leaves_the_folder(parts: list[str]) -> None:
    """For any PATH: either refused, or a relative path that stays inside the job's folder."""
    text = "/".join(parts)
    try:
        rel = clean_path(text)
    except UserError:
        return
    assert not os.path.isabs(rel)  # a name "~" deep inside is a plain file name: never expanded
    assert os.path.normpath(os.path.join("/job", rel)).startswith("/job")


def test_a_job_that_never_ran_has_nothing_to_fetch(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n"})
    held = gpu_json("submit", "train.py", "--wait-s", "0", cwd=project)  # no hours: held for a person
    assert held["job"]["state"] == "awaiting_approval"
    proc = run_gpu("fetch", held["job"]["short_id"], "x", cwd=project)
    assert proc.returncode == 2 and "never started on a target" in proc.stderr


def test_fetch_from_an_ssh_host_until_gc_frees_the_folder(sshd, home: Path, tmp_path: Path) -> None:
    from tests.providers.test_ssh import add_box

    add_box(sshd, tmp_path)
    project, short = _run_writer(tmp_path, "--provider", "box")
    _fetch_all_ways(project, short)
    job_id = gpu_json("status", short)["id"]
    remote_code = tmp_path / "remote" / "jobs" / job_id / "code"
    assert remote_code.is_dir()
    assert not list((tmp_path / "remote" / "jobs" / job_id).glob("fetch-*"))  # no archive left behind
    # the storage clean-up frees an ended job's working folder once unused for a while ...
    fresh = gpu_json("gc", "--all", "--dry-run", "--where", "box")["locations"][0]
    assert not [e for e in fresh["evict"] if e["kind"] == "workdir"]  # just ended: kept
    then = time.time() - 3600
    for p in (remote_code, remote_code.parent / ".code-ready"):
        os.utime(p, (then, then))
    plan = gpu_json("gc", "--all", "--dry-run")
    kinds = {(loc["where"], e["kind"]) for loc in plan["locations"] for e in loc["evict"]}
    assert ("box", "workdir") in kinds, plan
    gpu_json("gc", "--all", "--where", "box")
    assert not remote_code.exists()
    # ... after which fetch says the files are gone, and how to keep them next time
    proc = run_gpu("fetch", short, "notes.txt", cwd=project)
    assert proc.returncode == 2 and "was cleaned up" in proc.stderr and "outputs:" in proc.stderr


REPLACER = '''
import os
here = os.getcwd()                               # the job's working folder (code/)
open("notes.txt", "w").write("mine")
os.makedirs("outputs", exist_ok=True)
open("outputs/model.pkl", "w").write("weights")
outside = os.environ["OUTSIDE"]
os.symlink(outside, os.path.join(os.environ["GPU_ROUTER_OUTPUT_DIR"], "outputs"))  # out/outputs -> outside
if os.environ.get("HARDLINK"):
    os.link(os.environ["HARDLINK"], "stolen.txt")
os.rename(here, here + ".moved")                 # and the whole working folder -> outside
os.symlink(outside, here)
print("replaced", flush=True)
'''


def test_a_working_folder_replaced_by_a_link_is_never_followed(home: Path, tmp_path: Path, unsandboxed) -> None:
    """The job swaps its whole working folder for a link to a folder of the person's (and
    plants out/outputs -> that folder): `gpu fetch` refuses and says why, the declared outputs
    are not written through the link, and nothing of the person's folder comes home. (In the
    local sandbox the working folder is a mount the job cannot move: this is the unsandboxed
    case, as on a remote host.)"""
    outside = tmp_path / "person-home"
    outside.mkdir()
    (outside / "notes.txt").write_text("PRIVATE-CONTENT")
    (outside / ".bashrc").write_text("PRIVATE-CONTENT")
    project = make_git_project(tmp_path / "w", {"train.py": REPLACER}, gitignore="runs/\n")
    sub = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--output", "outputs/",
                   "--env", f"OUTSIDE={outside}", cwd=project)
    short = sub["job"]["short_id"]
    let_run(sub["job"])
    done = wait_state(short, {"done", "failed"}, timeout=180)
    assert done["state"] == "done", run_gpu("logs", short).stdout
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc", "notes.txt"]  # nothing written there
    assert "code/ is a link: the working folder was not read" in run_gpu("logs", short).stdout
    for asked in (["notes.txt"], ["."], ["outputs/"]):
        proc = run_gpu("fetch", short, *asked, cwd=project)
        assert proc.returncode == 2 and "was replaced by the job" in proc.stderr, proc.stderr
        assert "code is a link" in proc.stderr and "Traceback" not in proc.stderr
    runs = project / "runs" / short
    text = "".join(p.read_text(errors="replace") for p in runs.rglob("*") if p.is_file()) if runs.exists() else ""
    assert "PRIVATE-CONTENT" not in text


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another owner needs root to make (chown)")
def test_a_hard_link_to_another_owners_file_is_not_fetched(home: Path, tmp_path: Path, unsandboxed) -> None:
    foreign = tmp_path / "foreign" / "id_ed25519"
    foreign.parent.mkdir()
    foreign.write_text("PRIVATE-KEY")
    os.chown(foreign, 4242, 4242)
    script = ('import os\nopen("mine.txt", "w").write("ok")\n'
              'os.link(os.environ["HARDLINK"], "stolen.txt")\n')
    project = make_git_project(tmp_path / "h", {"train.py": script}, gitignore="runs/\n")
    job = gpu_json("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--env",
                   f"HARDLINK={foreign}", cwd=project)["job"]
    let_run(job)  # in the sandbox the file is not even visible: the unsandboxed case
    short = job["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=180)["state"] == "done", run_gpu("logs", short).stdout
    doc = gpu_json("fetch", short, "mine.txt", "stolen.txt", cwd=project)
    assert doc["files"] == 1 and doc["refused"][0]["path"] == "stolen.txt"
    assert "another owner" in doc["refused"][0]["why"]
    runs = project / "runs" / short
    assert (runs / "mine.txt").read_text() == "ok" and not (runs / "stolen.txt").exists()
