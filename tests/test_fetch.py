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

from core.engine.fetch import clean_path
from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state

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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    from tests.test_ssh import add_box

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
