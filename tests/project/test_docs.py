"""The docs: the site builds strictly, the generated reference is current, the README stays a
first hour whose links resolve, and its test command is the one CI runs and works with or
without sudo.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs and mkdocs-material are not installed: run the README's test command "
                    "(pip install -e '.[test]')")
    # NO_MKDOCS_2_WARNING: material prints a banner about MkDocs 2 that is not a build warning
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)


def _gen_reference():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly_with_every_page(tmp_path: Path) -> None:
    built = _mkdocs_build(REPO, tmp_path / "site")
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert not [line for line in output.splitlines() if "WARNING" in line], output
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def pages(nav):
        for item in nav:
            for value in item.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    listed = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert listed == on_disk  # every page is in the nav, and the nav names no missing page
    for page in listed:
        html = page.removesuffix(".md").removesuffix("index").rstrip("/")
        assert (tmp_path / "site" / html / "index.html").is_file(), page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what keeps links from rotting: a link to a page or an anchor that is
    not there must fail it."""
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](targets/colab.md)\n")
    built = _mkdocs_build(tmp_path, tmp_path / "site")
    assert built.returncode != 0 and "targets/colab.md" in built.stdout + built.stderr
    index.write_text(index.read_text().replace("targets/colab.md", "jobs.md#no-such-heading"))
    built = _mkdocs_build(tmp_path, tmp_path / "site")
    assert built.returncode != 0 and "no-such-heading" in built.stdout + built.stderr


def test_the_build_needs_no_network() -> None:
    """Material's social and privacy plugins fetch fonts and images at build time: off. The
    theme's web font is off too, so a reader's browser asks Google for nothing."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["plugins"] == ["search"]
    assert config["theme"]["name"] == "material" and config["theme"]["font"] is False
    assert config["strict"] is True


def test_the_configuration_reference_is_what_the_script_writes() -> None:
    committed = (REPO / "docs" / "reference" / "configuration.md").read_text()
    assert committed == _gen_reference().render(), "run python docs/gen_reference.py"
    from core.config import schema, targetopts, user

    for key in schema.SCHEMA:
        assert f"| `{key}` |" in committed
    for key in (targetopts.COMMON | targetopts.SCHEDULER) - {"gpus_per_job"}:
        assert f"| `{key}` |" in committed
    for section in user.SECTIONS:
        assert f"### {section}" in committed


def test_a_key_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.config import targetopts

    gen = _gen_reference()
    monkeypatch.setattr(targetopts, "COMMON", targetopts.COMMON | {"jump_host"})
    with pytest.raises(SystemExit, match="remote.jump_host"):
        gen.render()
    monkeypatch.undo()
    monkeypatch.setitem(gen.DESCRIBE, "rules.gone_rule", "a rule the code no longer has")
    with pytest.raises(SystemExit, match="rules.gone_rule"):
        gen.render()


def _blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_is_a_first_hour_that_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 320
    first, second = _blocks(text)[:2]
    assert text.index("```sh") < text.index("\n## ")  # the commands come before any section
    assert "pip install . && cd examples/quickstart && gpu submit && gpu logs -f last" in first
    assert "python -m pytest" in second
    for section in ("## A first job", "## Watching a job", "## The dashboard",
                    "## Agents: the MCP server", "## Where to read on"):
        assert section in text
    assert '{"mcpServers": {"gpu-router": {"command": "gpu", "args": ["mcp"]}}}' in text


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    relative = [link for link in links if not re.match(r"[a-z]+://|#", link)]
    assert any(link.startswith("docs/") for link in relative)
    missing = [link for link in relative if not (REPO / link.split("#")[0]).exists()]
    assert not missing


def _readme_test_command() -> str:
    lines = [line for line in _blocks(README.read_text())[1].splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(lines) == 1, "the README's test command is one copy-pasteable line"
    return lines[0]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = _readme_test_command()
    assert ci.count(command) == 1 and ci[-1] == command  # the last thing CI does
    assert not [line for line in ci if "sudo()" in line]  # no shim: the line itself copes


STUB = """#!/bin/sh
echo "$(basename "$0") DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-} $*" >> "$LOG"
"""
SUDO = """#!/bin/sh
echo "sudo $1" >> "$LOG"
exec /usr/bin/env -i PATH="$PATH" LOG="$LOG" "$@"   # sudo resets the environment
"""


@pytest.mark.parametrize("with_sudo", [False, True], ids=["root-without-sudo", "user-with-sudo"])
def test_the_test_command_runs_with_or_without_sudo(tmp_path: Path, with_sudo: bool) -> None:
    """The line as written, in a shell whose PATH has only stand-ins for apt-get, pip and python
    (and sudo, or none): apt-get goes through sudo where there is one, directly where there is
    not, non-interactively either way, then pip and pytest run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("apt-get", "pip", "python"):
        (bin_dir / name).write_text(STUB)
    if with_sudo:
        (bin_dir / "sudo").write_text(SUDO)
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    for tool in ("env", "basename"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    log = tmp_path / "log"
    run = subprocess.run(["/bin/bash", "-c", _readme_test_command()], cwd=tmp_path,
                         env={"PATH": str(bin_dir), "LOG": str(log), "HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    apt = ["apt-get DEBIAN_FRONTEND= update",
           "apt-get DEBIAN_FRONTEND=noninteractive install -y dbus gnome-keyring libsecret-tools "
           "bubblewrap openssh-server slurmd slurmctld slurm-client munge rsync tmux git"]
    if with_sudo:
        apt = ["sudo apt-get", apt[0], "sudo env", apt[1]]
    assert calls == [*apt, "pip DEBIAN_FRONTEND= install -e .[test]",
                     "python DEBIAN_FRONTEND= -m pytest -q -n 2 --dist loadgroup"]


def test_no_file_holds_the_markers_a_merge_left() -> None:
    """A conflict resolved by hand and committed with its markers still in (a docs page once
    shipped `<<<<<<< HEAD` to readers): no tracked text file holds a marker line."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
    found = []
    for name in tracked.stdout.splitlines():
        path = REPO / name
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", "") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{name}: {m.group(0)}" for m in marker.finditer(text)]
    assert not found, found
