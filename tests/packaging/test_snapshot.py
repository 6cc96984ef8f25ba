"""A listing remembered (core/packaging/snapshot.py): in a git tree, a path whose inputs to the
gate are as they were is listed from `lstat` alone; anything that could change the gate's
answer for a path sends that path through the gate again.

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


def paths_of(listing: Listing) -> int:
    return len(listing.entries) + len(listing.withheld)


def test_an_unchanged_tree_is_listed_from_what_was_remembered(tree: Path) -> None:
    first = assert_same(tree)
    assert first.reused == 0 and first.snap is not None
    second = assert_same(tree)
    assert second.reused == paths_of(second) == paths_of(first)
    withheld = dict(view(second)[1])
    assert "credential" in withheld["id_rsa"] and "credential" in withheld["notes/key.txt"], withheld
    assert {e.rel for e in second.entries.values()} >= {"train.py", "run.sh", "untracked.py", ".env.example"}
    assert second.entries["run.sh"].executable
    # the bundle is the same one, its hashes taken from what was remembered
    cache = FileHashCache()
    try:
        again = list_project(tree, [], cache=cache)
        assert again.reused == paths_of(again) and all(e.sha256 for e in again.entries.values())
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
    elif what == "a folder moves into a credential folder, linked back" and not lib.is_symlink():
        os.rename(lib, project / ".ssh")  # its files keep their inodes and signatures
        lib.symlink_to(".ssh", target_is_directory=True)
    elif what == "touched":
        (project / "train.py").write_text("print('hi')\n")
        settle(project / "train.py")


MUTATIONS = ["content becomes a key", "a key becomes clean", "a credential appears",
             "a folder becomes a link out", "a hard link to a credential", "a file is made executable",
             "a file is deleted", "a new file", "ignored no more", "a file is replaced", "touched",
             "a folder moves into a credential folder, linked back"]


@pytest.mark.parametrize("what", MUTATIONS)
def test_a_change_is_judged_again(tree: Path, tmp_path: Path, what: str) -> None:
    """The changed paths go through the gate again (the rest is taken as it was), and the
    listing is the one a fresh listing makes."""
    assert assert_same(tree).reused == 0
    before = assert_same(tree)
    assert before.reused == paths_of(before)
    mutate(tree, what, tmp_path / "outside")
    after = assert_same(tree)
    if what == "a file is deleted":  # nothing else changed: all the rest is as it was
        assert "untracked.py" not in after.entries and after.reused == paths_of(after)
    else:
        assert after.reused < paths_of(after), what  # touched too: a new signature, judged again
    if what == "content becomes a key":
        assert "lib/a.py" not in after.entries
    if what in ("a folder becomes a link out", "a folder moves into a credential folder, linked back"):
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
    listing = assert_same(project)
    assert listing.reused == paths_of(listing) - 1 and "fresh.py" in listing.entries
    settle(project / "fresh.py")
    assert_same(project)
    listing = assert_same(project)
    assert listing.reused == paths_of(listing)


def test_include_and_nested_repositories_are_listed_in_full(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print('hi')\n"}, gitignore="data/\n")
    (project / "data").mkdir()
    (project / "data" / "x.csv").write_text("1\n")
    make_git_project(project / "vendor" / "dep", {"dep.py": "D = 1\n"})
    settle_tree(project)
    for _ in range(2):
        listing = assert_same(project)  # the nested repository: a folder in git's list, its files by its own
    assert "vendor/dep/dep.py" in listing.entries and listing.reused == paths_of(listing)
    cache = FileHashCache()
    try:
        for _ in range(2):
            listing = list_project(project, ["data/*.csv"], cache=cache)
            assert listing.reused == 0 and listing.snap is None and "data/x.csv" in listing.entries
    finally:
        cache.close()
    subprocess.run(["git", "-C", str(project), "status"], capture_output=True, check=True)


STAGE = r"""
import json, os, sys
from pathlib import Path
project, stage, code = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
# the copy, not the installed gpu-router: an editable install's finder comes before the path
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__]
sys.path.insert(0, str(code))
from core.packaging import listing  # imports the rules, as `gpu mcp` and the warm server do at start
assert Path(listing.__file__).resolve().is_relative_to(code.resolve()), listing.__file__
if stage == "old":  # gpu-router is edited on disk while this process runs the code it imported
    src = Path(listing.__file__).parent / "credentials.py"
    src.write_text(src.read_text().replace(
        '    (".cloudflared", "Cloudflare tunnel credentials"),\n',
        '    (".cloudflared", "Cloudflare tunnel credentials"),\n    (".pulumi", "Pulumi credentials"),\n'))
from core.packaging.bundle import build
from core.packaging.filecache import FileHashCache
cache = FileHashCache()
got = listing.list_project(project, [], cache=cache)
build(got, cache)
cache.close()
print(json.dumps({"ships": sorted(got.entries), "reused": got.reused}))
"""


def test_rows_made_by_code_since_edited_are_not_taken_by_the_new_code(home: Path, tmp_path: Path) -> None:
    """A long-lived process (gpu mcp) runs the rules it imported; if gpu-router is edited on
    disk meanwhile (an editable install's `git pull` adds a rule), what it remembers is keyed
    by the code it ran, and a process with the new rules judges the path itself."""
    import json
    import sys

    code = tmp_path / "code"
    shutil.copytree(Path(__file__).resolve().parents[2] / "core", code / "core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", ".pulumi/creds.txt": "hunter2\n"})
    settle_tree(project)
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}

    def stage(name: str) -> dict:
        out = subprocess.run([sys.executable, "-c", STAGE, str(project), name, str(code)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    old = stage("old")
    assert old["ships"] == [".pulumi/creds.txt", "train.py"]  # the old rules had no .pulumi/
    new = stage("new")
    assert new["ships"] == ["train.py"], new


def test_a_file_written_just_before_its_read_is_not_trusted_later(home: Path, tmp_path: Path) -> None:
    """Settled is judged from the time the bytes were read (the cache opens before any read),
    not the time the hash is remembered: a file written in the racy window before a long pack
    began may be rewritten within its mtime tick right after its read, with the same stat."""
    f = tmp_path / "model.py"
    f.write_text("A = 1\n")
    cache = FileHashCache()  # a pack starts: its reads come after this
    try:
        sig = FileHashCache.signature(os.lstat(f))
        time.sleep(2.2)  # the rest of a long pack: by now the file looks settled
        cache.remember(str(f), sig, "0" * 64)
        cache.remember_verdict(str(f), sig + "|rules", "")
        cache.flush()
        assert cache.lookup_many([(str(f), sig)]) == {}
        assert cache.lookup_verdicts([(str(f), sig + "|rules")]) == {}
    finally:
        cache.close()
    later = FileHashCache()  # a later pack, which reads it two seconds after it was written
    try:
        later.remember(str(f), sig, "0" * 64)
        later.flush()
        assert later.lookup_many([(str(f), sig)]) == {str(f): "0" * 64}
    finally:
        later.close()
