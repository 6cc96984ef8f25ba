"""A listing remembered (core/packaging/snapshot.py): an unchanged git tree is listed from
`lstat` alone, and anything that could change the gate's answer makes a full listing again.

The check for every case is the same one: the listing a submit gets (with the hash cache that
remembers) equals the one a fresh listing makes (no cache, nothing remembered), entry for
entry and left-out row for row. Files are dated a day back once written, each version
a second apart, so that they count as settled (the hash cache keeps nothing written in its
last two seconds) and no two versions share a signature.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import make_git_project
from tests.props import examples

from core.packaging.bundle import build
from core.packaging.filecache import FileHashCache
from core.packaging.listing import Listing, list_project

KEY = ("-----BEGIN RSA PRIVATE KEY-----\n"
       + "\n".join(base64.b64encode(bytes(range(i, i + 48))).decode() for i in range(0, 192, 48))
       + "\n-----END RSA PRIVATE KEY-----\n")
_CLOCK = [time.time() - 86_400]  # a day back: room for a second per version


def settle(*paths: Path) -> None:
    """Date these files back (each call a second later than the last, all in the past)."""
    _CLOCK[0] += 1
    for p in paths:
        os.utime(p, (_CLOCK[0], _CLOCK[0]), follow_symlinks=False)


def settle_tree(project: Path) -> None:
    for p in project.rglob("*"):
        if ".git" not in p.relative_to(project).parts and (p.is_file() or p.is_symlink()):
            settle(p)


def submit_listing(project: Path) -> Listing:
    """What a submit lists and bundles (core.engine.service.pack): one cache for both."""
    cache = FileHashCache()
    try:
        listing = list_project(project, [], cache=cache)
        build(listing, cache)
        return listing
    finally:
        cache.close()


def fresh_listing(project: Path) -> Listing:
    return list_project(project, [])  # its own cache: nothing remembered is read


def view(listing: Listing) -> tuple:
    entries = sorted((e.rel, e.kind, e.size, e.executable, e.link) for e in listing.entries.values())
    withheld = [(w["path"], w["reason"]) for w in listing.withheld]
    return entries, withheld, listing.ignored, listing.warnings


def assert_same(project: Path) -> Listing:
    got = submit_listing(project)
    assert view(got) == view(fresh_listing(project))
    return got


@pytest.fixture
def tree(home: Path, tmp_path: Path) -> Path:
    project = make_git_project(tmp_path / "p", {
        "train.py": "print('hi')\n", "lib/a.py": "A = 1\n", "lib/deep/b.py": "B = 2\n",
        "notes/key.txt": KEY, "id_rsa": "not really\n", ".env.example": "TOKEN=\n",
    }, gitignore="data/\n*.log\n")
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "run.sh").chmod(0o755)
    (project / "data").mkdir()
    (project / "data" / "big.bin").write_bytes(b"x" * 10)
    (project / "debug.log").write_text("log\n")
    (project / "untracked.py").write_text("U = 3\n")
    settle_tree(project)
    return project


def test_an_unchanged_tree_is_listed_from_what_was_remembered(tree: Path) -> None:
    first = assert_same(tree)
    assert not first.reused and first.snap is not None
    second = assert_same(tree)
    assert second.reused
    withheld = dict(view(second)[1])
    assert "credential" in withheld["id_rsa"] and "credential" in withheld["notes/key.txt"], withheld
    assert {e.rel for e in second.entries.values()} >= {"train.py", "run.sh", "untracked.py", ".env.example"}
    assert second.entries["run.sh"].executable
    # the bundle is the same one, its hashes taken from what was remembered
    cache = FileHashCache()
    try:
        again = list_project(tree, [], cache=cache)
        assert again.reused and all(e.sha256 for e in again.entries.values())
        assert build(again, cache).hash == build(fresh_listing(tree), cache).hash
    finally:
        cache.close()


def mutate(project: Path, what: str, outside: Path) -> None:
    lib = project / "lib"
    if what == "content becomes a key" and not lib.is_symlink():
        (lib / "a.py").write_text(KEY)
        settle(lib / "a.py")
    elif what == "a key becomes clean":
        (project / "notes" / "key.txt").write_text("nothing here\n")
        settle(project / "notes" / "key.txt")
    elif what == "a credential appears" and not lib.is_symlink():
        (lib / "id_ed25519").write_text("x\n")
        settle(lib / "id_ed25519")
    elif what == "a folder becomes a link out" and not lib.is_symlink():
        outside.mkdir(exist_ok=True)
        (outside / "a.py").write_text("A = 1\n")
        (outside / "deep").mkdir(exist_ok=True)
        (outside / "deep" / "b.py").write_text("B = 2\n")
        settle(outside / "a.py", outside / "deep" / "b.py")
        shutil.rmtree(lib)
        lib.symlink_to(outside, target_is_directory=True)
    elif what == "a hard link to a credential":
        target = project / "lib" / "deep" / "b.py"
        if target.exists() and not target.is_symlink():
            target.unlink()
            os.link(project / "id_rsa", target)
    elif what == "a file is made executable":
        (project / "train.py").chmod(0o755)
    elif what == "a file is deleted":
        (project / "untracked.py").unlink(missing_ok=True)
    elif what == "a new file":
        (project / "new.py").write_text("N = 1\n")
        settle(project / "new.py")
    elif what == "ignored no more":
        (project / ".gitignore").write_text("data/\n")
        settle(project / ".gitignore")
    elif what == "a file is replaced":
        tmp = project / "lib" / ".a.tmp"
        tmp.write_text(KEY)
        settle(tmp)
        if (lib / "a.py").exists() and not lib.is_symlink():
            os.replace(tmp, lib / "a.py")
        else:
            tmp.unlink()
    elif what == "touched":
        (project / "train.py").write_text("print('hi')\n")
        settle(project / "train.py")


MUTATIONS = ["content becomes a key", "a key becomes clean", "a credential appears",
             "a folder becomes a link out", "a hard link to a credential", "a file is made executable",
             "a file is deleted", "a new file", "ignored no more", "a file is replaced", "touched"]


@pytest.mark.parametrize("what", MUTATIONS)
def test_a_change_lists_again_in_full(tree: Path, tmp_path: Path, what: str) -> None:
    assert not assert_same(tree).reused
    assert assert_same(tree).reused
    mutate(tree, what, tmp_path / "outside")
    after = assert_same(tree)
    if what != "touched":  # touched: a new signature, the same bytes: listed again, all the same
        assert not after.reused, what
    if what == "content becomes a key":
        assert "lib/a.py" not in after.entries
    if what == "a folder becomes a link out":
        assert not any(rel.startswith("lib/") for rel in after.entries), sorted(after.entries)
    if what == "a hard link to a credential":
        assert "lib/deep/b.py" not in after.entries


SETTINGS = settings(max_examples=examples(40), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(steps=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=4))
def test_any_changes_list_as_a_fresh_listing_would(home: Path, tmp_path_factory: pytest.TempPathFactory,
                                                   steps: list[str]) -> None:
    """For any sequence of changes, each submit's listing is the one a fresh listing makes."""
    base = tmp_path_factory.mktemp("snap")
    project = make_git_project(base / "p", {"train.py": "print('hi')\n", "lib/a.py": "A = 1\n",
                                            "lib/deep/b.py": "B = 2\n", "notes/key.txt": KEY,
                                            "id_rsa": "x\n"}, gitignore="data/\n")
    (project / "untracked.py").write_text("U = 3\n")
    settle_tree(project)
    assert_same(project)
    for what in steps:
        mutate(project, what, base / "outside")
        assert_same(project)
        assert_same(project)


def test_a_just_written_file_is_not_remembered(home: Path, tmp_path: Path) -> None:
    """A file written within the hash cache's racy window may change again without a new
    signature: no listing with one is kept."""
    project = make_git_project(tmp_path / "p", {"train.py": "print('hi')\n"})
    settle_tree(project)
    (project / "fresh.py").write_text("F = 1\n")
    assert_same(project)
    assert not assert_same(project).reused
    settle(project / "fresh.py")
    assert_same(project)
    assert assert_same(project).reused


def test_include_and_nested_repositories_are_listed_in_full(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print('hi')\n"}, gitignore="data/\n")
    (project / "data").mkdir()
    (project / "data" / "x.csv").write_text("1\n")
    make_git_project(project / "vendor" / "dep", {"dep.py": "D = 1\n"})
    settle_tree(project)
    for _ in range(2):
        assert not assert_same(project).reused  # the nested repository is a folder in git's list
    cache = FileHashCache()
    try:
        for _ in range(2):
            listing = list_project(project, ["data/*.csv"], cache=cache)
            assert not listing.reused and listing.snap is None and "data/x.csv" in listing.entries
    finally:
        cache.close()
    subprocess.run(["git", "-C", str(project), "status"], capture_output=True, check=True)
