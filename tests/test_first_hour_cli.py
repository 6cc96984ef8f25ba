"""The first hour at the command line (issue 25): what a person meets when they pipe output,
work from a subfolder, mistype a command, or add a cloud target with no network.

Each test runs the installed `gpu` command as a user would, on real files, a real git
repository and real SQLite.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import gpu_json, make_git_project, run_gpu, write_user_config

LONG = "a-target-with-a-rather-long-name-for-a-lab-box"


def test_piped_tables_are_whole(home: Path) -> None:
    """`gpu targets | grep` and `gpu jobs | cat` get every column, however wide the rows."""
    write_user_config("targets:\n"
                      f"  {LONG}:\n"
                      "    kind: local\n"
                      "    gpus: [{name: NVIDIA-GeForce-RTX-4090-with-a-long-label, memory_gb: 24}]\n")
    proc = run_gpu("targets", env={"COLUMNS": ""})  # a pipe: no terminal, no COLUMNS
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    for col in ("TARGET", "KIND", "GPU", "VRAM", "STATUS", "QUOTA LEFT", "PRICE/H", "RUNNING"):
        assert col in header, header
    row = next((r for r in rows if LONG in r), "")
    assert row.split()[:4] == [LONG, "local", "1x", "NVIDIA-GeForce-RTX-4090-with-a-long-label"], row
    assert len(row.rstrip()) > 80  # laid out whole, not cut to 80 columns
    # the jobs table too: a long name and every column, piped into grep
    project = make_git_project(home.parent / "proj", {"run.py": "print('hi')\n"})
    name = "a-job-name-long-enough-to-push-the-row-past-eighty-columns"
    sub = gpu_json("submit", "run.py", "--name", name, "--hours", "0.1", "--wait-s", "0", cwd=project)
    proc = run_gpu("jobs", env={"COLUMNS": ""})
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "TARGET", "ELAPSED", "HOURS", "LAST", "METRIC", "AGE"]
    assert rows[0].split()[:2] == [sub["job"]["short_id"], name], rows
