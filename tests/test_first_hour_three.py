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
