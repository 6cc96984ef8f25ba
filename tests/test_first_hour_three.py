"""Issue 41, "The first hour, round three": the traps a new user met, each as they met it
(the installed `gpu` command, the MCP client over stdio, the dashboard)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_example, gpu_json, run_gpu, wait_state


# -- 11: MCP resources can be discovered ------------------------------------------------------

async def test_mcp_publishes_the_job_resource_template_before_any_job(home: Path) -> None:
    """An agent lists the resources of a fresh server: the address of a job is published as a
    template (resources/templates/list was "Method not found")."""
    from tests.test_mcp import session

    async with session() as s:
        listed = await s.list_resource_templates()
        templates = {t.uri_template: t for t in listed.resource_templates}
        assert "gpu://jobs/{id}" in templates, templates
        assert templates["gpu://jobs/{id}"].mime_type == "application/json"
        assert (await s.list_resources()).resources == []  # no job yet: nothing to list by name


# -- 9: a new notify URL is not sent the backlog ----------------------------------------------

def test_a_notify_url_added_now_gets_only_what_happens_after(home: Path, tmp_path: Path) -> None:
    """A job ended before the person set up notifications; they add a URL and run `gpu notify
    test` while the supervisor runs: the URL gets the test message and the next job's end, never
    a message about the job that ended before it existed."""
    from tests.conftest import make_git_project, write_user_config
    from tests.test_notify import Webhook

    project = make_git_project(tmp_path / "p", {"a.py": "print('ran', flush=True)\n"})
    before = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    assert wait_state(before["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
    hook = Webhook()
    try:
        write_user_config(f"notify:\n  - {hook.url()}\n")
        assert run_gpu("notify", "test").returncode == 0
        after = gpu_json("submit", "a.py", "--name", "after", "--hours", "0.1", "--wait-s", "0",
                         cwd=project)["job"]
        assert wait_state(after["short_id"], {"done", "failed"}, timeout=90)["state"] == "done"
        deadline = time.monotonic() + 60
        while not any(after["short_id"] in m.get("title", "") for m in hook.messages):
            assert time.monotonic() < deadline, hook.messages
            time.sleep(0.2)
        time.sleep(1.0)  # anything else queued with it arrives too
        titles = [m.get("title", "") for m in hook.messages]
        assert not any(before["short_id"] in t for t in titles), titles
        assert len(titles) == 2 and "test" in titles[0], titles
    finally:
        hook.close()


# -- 7: small traps in fetching and shipping --------------------------------------------------

PREDICT = ("open('predict1.pdf', 'w').write('one')\n"
           "open('predict2.pdf', 'w').write('two')\n"
           "open('notes.txt', 'w').write('n')\n"
           "print('wrote', flush=True)\n")


def test_two_files_left_behind_are_both_named_and_a_glob_fetches_them(home: Path, tmp_path: Path) -> None:
    """The job wrote predict1.pdf and predict2.pdf beside the script: the note names both, and
    `gpu fetch ID 'predict*.pdf'` (a glob, as --output takes) brings both home."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": PREDICT})
    job = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
    short = job["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=90)["state"] == "done"
    log = run_gpu("logs", short).stdout
    note = next(ln for ln in log.splitlines() if "stayed on the target" in ln)
    assert "predict1.pdf" in note and "predict2.pdf" in note and "notes.txt" in note, note

    proc = run_gpu("fetch", short, "predict*.pdf", cwd=project)
    assert proc.returncode == 0, proc.stderr
    runs = project / "runs" / short
    assert (runs / "predict1.pdf").read_text() == "one" and (runs / "predict2.pdf").read_text() == "two"
    assert not (runs / "notes.txt").exists()  # only what the glob matched
    nothing = run_gpu("fetch", short, "*.png", cwd=project)
    assert nothing.returncode != 0 and "*.png" in nothing.stderr


def test_a_folder_given_as_data_is_not_called_left_out(home: Path, tmp_path: Path) -> None:
    """`--data mnist=mnist_data` of a git-ignored folder: it travels as data, so the submit does
    not list it as LEFT OUT (another ignored folder still is)."""
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "import gpu, os\nprint(sorted(os.listdir(gpu.data_dir())))\n"},
                               gitignore="mnist_data/\nscratch/\n")
    for folder in ("mnist_data", "scratch"):
        (project / folder).mkdir()
        (project / folder / "x.bin").write_bytes(b"x" * 10)
    proc = run_gpu("submit", "a.py", "--data", "mnist=mnist_data", "--hours", "0.1", "--wait-s", "0",
                   cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "scratch/" in out  # still left out
    assert "mnist_data" not in out, out
    doc = gpu_json("submit", "a.py", "--name", "again", "--data", "mnist=mnist_data", "--hours", "0.1",
                   "--wait-s", "0", cwd=project)
    assert [row["path"] for row in doc["bundle"].get("left_out", [])] == ["scratch/"]
    ended = wait_state(doc["job"]["short_id"], {"done", "failed"}, timeout=90)
    assert ended["state"] == "done"
    assert "['mnist']" in run_gpu("logs", doc["job"]["short_id"]).stdout  # it did travel, as data
