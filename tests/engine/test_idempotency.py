"""Safe to retry: the same request_id, or an identical live request, returns the same job."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import gpu_exe, gpu_json, make_git_project, run_gpu

pytestmark = pytest.mark.slow

SLEEPER = "import time\ntime.sleep(60)\n"


def test_fifty_concurrent_submits_with_one_request_id_make_one_job(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"sleep.py": SLEEPER})
    cmd = [gpu_exe(), "submit", "sleep.py", "--request-id", "train-yolo-3", "--hours", "0.1",
           "--wait-s", "0", "--json"]

    def one(_: int) -> dict:
        proc = subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    ids = {r["job"]["id"] for r in results}
    assert len(ids) == 1
    assert sum(r["submitted"] for r in results) == 1
    assert len(gpu_json("jobs")["jobs"]) == 1
    gpu_json("cancel", results[0]["job"]["short_id"])


def test_identical_request_while_active_returns_the_same_job(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"sleep.py": SLEEPER})
    first = gpu_json("submit", "sleep.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    again = gpu_json("submit", "sleep.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert first["submitted"] is True and again["submitted"] is False
    assert again["job"]["id"] == first["job"]["id"]
    assert "returned it instead of starting a second copy" in again["guidance"]["note"]
    # a different request (other args) is another job
    other = gpu_json("submit", "sleep.py", "--hours", "0.1", "--wait-s", "0", "--", "x", cwd=project)
    assert other["submitted"] is True and other["job"]["id"] != first["job"]["id"]
    # a changed tree is another job too
    (project / "extra.py").write_text("print(2)\n")
    changed = gpu_json("submit", "sleep.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert changed["submitted"] is True
    # once the job ended, the same request starts a new one
    gpu_json("cancel", first["job"]["short_id"])
    (project / "extra.py").unlink()
    after = gpu_json("submit", "sleep.py", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert after["submitted"] is True and after["job"]["id"] != first["job"]["id"]
    for j in gpu_json("jobs", "--active")["jobs"]:
        gpu_json("cancel", j["short_id"])


def test_same_request_id_with_a_different_request_is_an_error(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"sleep.py": SLEEPER})
    first = gpu_json("submit", "sleep.py", "--request-id", "r1", "--hours", "0.1", "--wait-s", "0", cwd=project)
    proc = run_gpu("submit", "sleep.py", "--request-id", "r1", "--hours", "0.5", "--wait-s", "0",
                   cwd=project)
    assert proc.returncode == 2
    assert "request_id 'r1' was already used for a different request" in proc.stderr
    assert first["job"]["short_id"] in proc.stderr
    gpu_json("cancel", first["job"]["short_id"])
    # the same request_id returns its job even after it ended
    same = gpu_json("submit", "sleep.py", "--request-id", "r1", "--hours", "0.1", "--wait-s", "0", cwd=project)
    assert same["submitted"] is False and same["job"]["id"] == first["job"]["id"]
