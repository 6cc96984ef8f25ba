"""What a person reads of job logs through the installed `gpu` command, on real local jobs:
a progress bar as its last state (`gpu logs`), and `gpu grep` across jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import paths
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state

pytestmark = pytest.mark.slow

BAR = r'''
import sys, time
for i in range(0, 101, 5):
    sys.stdout.write(f"\rtrain {i:3d}%|{'#' * (i // 10):<10}| {i}/100")
    sys.stdout.flush()
sys.stdout.write("\r\n")
print("all done")
'''


def _run(project: Path, script: str, name: str) -> str:
    short = gpu_json("submit", script, "--hours", "0.1", "--wait-s", "0", "--name", name,
                     cwd=project)["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    return short


def test_logs_show_a_progress_bar_as_one_line_in_its_final_state(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"bar.py": BAR})
    short = _run(project, "bar.py", "bar")
    out = run_gpu("logs", short).stdout
    bar_lines = [line for line in out.splitlines() if "train" in line]
    assert bar_lines == ["train 100%|##########| 100/100"]
    assert "\r" not in out and "all done" in out
    tail = gpu_json("logs", short, "--tail", "5")["log"]
    assert "train 100%|##########| 100/100\n" in tail and "train  95%" not in tail
    job_id = gpu_json("status", short)["id"]
    raw = (paths.jobs_dir() / job_id / "job.log").read_bytes()
    assert b"\rtrain  50%|#####     | 50/100\rtrain  55%" in raw  # job.log keeps every step


JOB_A = '''
print("alpha starts")
print("hit one in alpha")
print("nothing here")
print("hit \\x1b]52;c;ZXZpbA==\\x07 with \\x1b[31mred\\x1b[0m colour and a \\x1b]0;title\\x07 title")
'''
JOB_B = '''
for i in range(3):
    print(f"beta line {i}")
    print(f"hit {i} in beta")
'''


def test_grep_searches_every_job_newest_first_bounded_and_sanitized(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": JOB_A, "b.py": JOB_B})
    older = _run(project, "a.py", "alpha")
    newer = _run(project, "b.py", "beta")

    doc = gpu_json("grep", r"^hit \d|^hit one|^hit  with", cwd=project)
    assert [h["job"] for h in doc["hits"]] == [newer] * 3 + [older] * 2
    assert doc["jobs_searched"] == 2 and doc["truncated"] is False and doc["stopped"] is None
    for hit in doc["hits"]:  # line numbers are those of the job's log as gpu logs prints it
        lines = run_gpu("logs", hit["job"]).stdout.split("\n")
        assert lines[hit["line"] - 1] == hit["text"]
    escaped = doc["hits"][-1]["text"]
    assert escaped == "hit  with red colour and a  title"

    text = run_gpu("grep", "hit", older, cwd=project)
    assert text.returncode == 0 and "\x1b" not in text.stdout and "\x07" not in text.stdout
    first = text.stdout.splitlines()[0]
    assert first.startswith(f"{older}:") and first.endswith(": hit one in alpha")

    bounded = run_gpu("grep", "hit", "--max", "2", cwd=project)
    assert bounded.returncode == 0 and len(bounded.stdout.splitlines()) == 2
    assert all(line.startswith(f"{newer}:") for line in bounded.stdout.splitlines())
    assert "stopped at 2 hits" in bounded.stderr and "--max" in bounded.stderr
    capped = json.loads(run_gpu("grep", "hit", "--max", "3", "--json", cwd=project).stdout)
    assert len(capped["hits"]) == 3 and capped["truncated"] is True
    assert "1 older job not searched" in capped["stopped"]

    none = run_gpu("grep", "no such words", cwd=project)
    assert none.returncode == 1 and none.stdout == "" and "no line matches in 2 job logs" in none.stderr
    bad = run_gpu("grep", "loss(", cwd=project)
    assert bad.returncode == 2 and "bad pattern 'loss('" in bad.stderr and "backslash" in bad.stderr
    helped = run_gpu("grep", "--help")
    assert helped.returncode == 0 and "PATTERN" in helped.stdout and "--max N" in helped.stdout
