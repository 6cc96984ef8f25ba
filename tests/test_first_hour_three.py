"""Issue 41, "The first hour, round three": the traps a new user met, each as they met it
(the installed `gpu` command, the MCP client over stdio, the dashboard)."""

from __future__ import annotations

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
