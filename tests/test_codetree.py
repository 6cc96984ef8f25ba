"""Bundles as manifests over file objects: the code folder a job gets, what a target accepts
as an object, and what gc frees (core/runtime/codetree.py, core/packaging/objects.py)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core import paths
from core.packaging import objects
from core.packaging.bundle import make_bundle
from core.runtime import cachescan, codetree
from tests.conftest import make_git_project
from tests.props import examples


def _store(objects_dir: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = Path(codetree.object_path(str(objects_dir), digest))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


# a path part: ordinary names, dots, empty parts and slashes are all fair game
_part = st.sampled_from(["a", "b", "..", ".", "", "c.py", "/", "x/..", "../y"])
_rel = st.lists(_part, min_size=1, max_size=5).map("/".join)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_rel, st.sampled_from(["f", "x", "l"]), _rel), min_size=1, max_size=6))
# a link to "." under which later links climb further than their written depth says
@example(rows=[("d", "l", "."), ("d/d/e", "l", "../../outside")])
@example(rows=[("d", "l", "."), ("d/e", "l", "../outside"), ("d/e/f", "f", "")])
@example(rows=[("d", "l", ".."), ("d/f", "f", "")])
def test_a_built_folder_never_reaches_outside_itself(tmp_path: Path, rows: list) -> None:
    """For any manifest, build either refuses it whole or makes only paths inside the folder,
    whose links resolve inside it: a hostile or broken manifest writes nothing anywhere else."""
    work = Path(os.path.realpath(tmp_path)) / f"w{time.monotonic_ns()}"
    store = work / "objects"
    digest = _store(store, b"content\n")
    outside = work / "outside"
    outside.mkdir(parents=True)
    dest = work / "box" / "code"
    entries = [[rel, kind, ref if kind == "l" else digest, 8] for rel, kind, ref in rows]
    try:
        codetree.build(entries, str(store), str(dest))
    except (ValueError, OSError):
        assert not dest.exists() and not list((work / "box").iterdir())  # nothing half made
    else:
        for top, dirs, files in os.walk(dest):
            for name in dirs + files:
                path = Path(top) / name
                assert str(path).startswith(str(dest) + "/")
                if path.is_symlink():
                    assert os.path.realpath(path).startswith(str(dest)), (path, os.readlink(path))
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in work.iterdir()) == ["box", "objects", "outside"]


def test_receive_keeps_only_objects_whose_bytes_match_their_name(tmp_path: Path) -> None:
    good = b"the real content\n"
    good_hash = hashlib.sha256(good).hexdigest()
    liar = "0" * 64  # named as one hash, carrying other bytes
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in ((good_hash, good), (liar, b"evil\n"), ("../../escape", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    store = tmp_path / "objects"
    with pytest.raises(ValueError, match="other content"):
        codetree.receive(str(store), buf)
    assert Path(codetree.object_path(str(store), good_hash)).read_bytes() == good
    assert not Path(codetree.object_path(str(store), liar)).exists()
    assert [p.name for p in store.rglob("*") if p.is_file()] == [good_hash[2:]]  # no temp left
    assert not (tmp_path / "escape").exists()
    assert codetree.missing(str(store), [good_hash, liar, "not-a-hash"]) == [liar]


def test_a_job_rewriting_its_code_changes_no_other_job_and_no_object(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print('original')\n", "lib/a.py": "A = 1\n"})
    bundle = make_bundle(project)
    one, two = tmp_path / "job1" / "code", tmp_path / "job2" / "code"
    objects.materialize(bundle.hash, one)
    objects.materialize(bundle.hash, two)
    (one / "train.py").write_text("print('tampered')\n")  # what a job may do to its own copy
    os.chmod(one / "lib" / "a.py", 0o644)
    with open(one / "lib" / "a.py", "r+b") as f:  # in place, through the same inode
        f.write(b"B")
    assert (two / "train.py").read_text() == "print('original')\n"
    assert (two / "lib" / "a.py").read_text() == "A = 1\n"
    three = tmp_path / "job3" / "code"
    objects.materialize(bundle.hash, three)
    assert (three / "lib" / "a.py").read_text() == "A = 1\n"
    for rel, _, ref, _size in objects.entries(bundle.hash):
        assert hashlib.sha256(objects.object_file(ref).read_bytes()).hexdigest() == ref, rel


def test_one_changed_file_stores_one_object(home: Path, tmp_path: Path) -> None:
    files = {f"src/m{i}.py": f"X = {i}\n" for i in range(30)}
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", **files})
    first = make_bundle(project)
    before = {p for p in paths.objects_dir().rglob("*") if p.is_file()}
    assert len(before) == 31
    (project / "src" / "m7.py").write_text("X = 'changed'\n")
    second = make_bundle(project)
    after = {p for p in paths.objects_dir().rglob("*") if p.is_file()}
    assert second.hash != first.hash and second.packed
    new = after - before
    assert len(new) == 1 and next(iter(new)).read_bytes() == b"X = 'changed'\n"
    assert len(list(paths.bundles_dir().glob("*.json"))) == 2


def test_gc_frees_a_manifest_with_the_objects_only_it_names(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": "print(1)\n", "shared.py": "S = 1\n"})
    first = make_bundle(project)
    (project / "train.py").write_text("print(2)\n")
    second = make_bundle(project)
    old = time.time() - 2 * cachescan.MIN_AGE_S
    for p in paths.objects_dir().rglob("*"):
        os.utime(p, (old, old))
    rows = {r["key"]: r for r in cachescan.scan(str(home)) if r["kind"] == "bundle"}
    only_first = objects.object_file(hashlib.sha256(b"print(1)\n").hexdigest())
    assert rows[first.hash]["bytes"] >= only_first.stat().st_blocks * 512  # its own object counts
    done = cachescan.evict(str(home), [rows[first.hash]["path"]], cachescan.MIN_AGE_S)
    assert done["removed"] == [rows[first.hash]["path"]] and done["freed"] > 0
    assert not only_first.exists()
    objects.materialize(second.hash, tmp_path / "code")  # the other bundle is whole
    assert (tmp_path / "code" / "shared.py").read_text() == "S = 1\n"
    assert (tmp_path / "code" / "train.py").read_text() == "print(2)\n"


def test_an_object_used_lately_is_not_swept_though_no_manifest_names_it(home: Path, tmp_path: Path) -> None:
    """A submit reusing an object touches it before its manifest exists: gc leaves it."""
    digest = _store(paths.objects_dir(), b"about to be named\n")
    stale = _store(paths.objects_dir(), b"long unused\n")
    old = time.time() - 2 * cachescan.MIN_AGE_S
    os.utime(objects.object_file(stale), (old, old))
    os.utime(objects.object_file(digest), (old, old))
    assert objects.reuse_object(digest)  # what a submit does when it finds the object
    entry = [r for r in cachescan.scan(str(home)) if r["kind"] == "objects"]
    assert len(entry) == 1
    cachescan.evict(str(home), [entry[0]["path"]], cachescan.MIN_AGE_S)
    assert objects.object_file(digest).exists() and not objects.object_file(stale).exists()
