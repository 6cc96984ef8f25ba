"""Root is not a person's uid inside a job: when gpu-router runs as root, a local job is nobody in
its namespace and what only root may read (/etc/shadow, the SSH host keys) is covered.

CI runs as root, so the end-to-end case runs there; as another user it checks the opposite (no
uid change, nothing covered), which is what that user's job needs.
"""

from __future__ import annotations

import glob
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.runtime import boundary, rootonly
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state

PROBE = r'''
import glob, json, os
seen = {"uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid()}
for p in ["/etc/shadow", "/etc/gshadow", *glob.glob("/etc/ssh/ssh_host_*_key")]:
    try:
        with open(p, "rb") as f:
            seen[p] = "READ " + repr(f.read(40))
    except OSError as exc:
        seen[p] = "blocked " + type(exc).__name__
seen["hostname"] = open("/etc/hostname").read(5) if os.path.exists("/etc/hostname") else "none"
print("PROBE " + json.dumps(seen))
'''


@pytest.mark.slow
def test_a_job_root_started_cannot_read_what_only_root_may(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"probe.py": PROBE})
    short = gpu_json("submit", "probe.py", "--hours", "0.05", "--wait-s", "0", cwd=project)["job"]["short_id"]
    assert wait_state(short, {"done", "failed"}, timeout=120)["state"] == "done", run_gpu("logs", short).stdout
    line = next(ln for ln in run_gpu("logs", short).stdout.splitlines() if ln.startswith("PROBE "))
    import json
    seen = json.loads(line.removeprefix("PROBE "))
    if os.geteuid() != 0:
        assert seen["uid"] == os.getuid()  # an ordinary user's job keeps that user's uid
        return
    assert seen["uid"] == seen["euid"] == seen["gid"] == rootonly.UNPRIVILEGED_ID
    private = ["/etc/shadow", "/etc/gshadow", *glob.glob("/etc/ssh/ssh_host_*_key")]
    assert any(os.path.exists(p) for p in private)
    for p in private:
        if os.path.exists(p):
            assert seen[p].startswith("blocked") or seen[p] == "READ b''", (p, seen[p])
    assert seen["hostname"] != "none" or not os.path.exists("/etc/hostname")  # the rest of /etc still reads


def test_the_command_line_changes_uid_only_for_root() -> None:
    argv = boundary.bwrap_argv("/usr/bin/bwrap", {"workdir": "/", "network": True}, ["true"])
    if os.geteuid() == 0:
        at = argv.index("--uid")
        assert argv[at:at + 4] == ["--uid", "65534", "--gid", "65534"]
    else:
        assert "--uid" not in argv and rootonly.paths() == []


def test_root_only_paths_cover_the_issue_s_files_and_cache_the_package_walk(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        assert rootonly.paths(str(tmp_path / "c.json")) == []
        return
    cache = tmp_path / "root-only.json"
    first = rootonly.paths(str(cache))
    assert "/etc/shadow" in first
    for key in glob.glob("/etc/ssh/ssh_host_*_key"):
        assert key in first
    assert cache.exists() and stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert rootonly.paths(str(cache)) == first  # read back from the cache


MODES = st.sampled_from([0o755, 0o700, 0o711, 0o750, 0o644, 0o600, 0o640, 0o604])


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, bool, int]]:
    """(relative path, is folder, mode), parents before children."""
    out: list[tuple[str, bool, int]] = []
    folders = [""]
    for i in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from(folders))
        is_dir = draw(st.booleans())
        rel = f"{parent}/e{i}".lstrip("/")
        out.append((rel, is_dir, draw(MODES)))
        if is_dir:
            folders.append(rel)
    return out


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees())
def test_the_walk_finds_exactly_the_outermost_private_entries(tmp_path_factory: pytest.TempPathFactory,
                                                              tree: list[tuple[str, bool, int]]) -> None:
    """For any tree of folders and files with any modes, `walk` names each entry others may not
    read whose folders others may all enter, and nothing else; links are never followed."""
    top = tmp_path_factory.mktemp("walk")
    top.chmod(0o755)  # a system folder: open to all (mktemp makes it 0700)
    for rel, is_dir, _ in tree:
        (top / rel).mkdir() if is_dir else (top / rel).write_text("x")
    (top / "link").symlink_to("/etc/shadow")
    for rel, _, mode in reversed(tree):
        os.chmod(top / rel, mode)
    try:
        modes = {rel: (is_dir, mode) for rel, is_dir, mode in tree}

        def hidden(rel: str) -> bool:  # others may not read it (a folder: list and enter)
            is_dir, mode = modes[rel]
            return (mode & 0o005) != 0o005 if is_dir else not mode & 0o004

        want = []
        for rel, _, _ in tree:
            parts = rel.split("/")
            if any(hidden("/".join(parts[:i])) for i in range(1, len(parts))):
                continue  # inside a covered folder: gone with it
            if hidden(rel):
                want.append(str(top / rel))
        assert rootonly.walk(str(top)) == sorted(want), modes
    finally:
        for rel, is_dir, _ in tree:
            os.chmod(top / rel, 0o755 if is_dir else 0o644)
