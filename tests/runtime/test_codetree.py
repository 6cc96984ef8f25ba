"""Bundles as manifests over file objects: the code folder a job gets, what a target accepts
as an object, and what gc frees (core/runtime/codetree.py, core/runtime/objstore.py,
core/packaging/objects.py)."""

from __future__ import annotations

import errno
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
from core.runtime import cachescan, codetree, objstore
from tests.conftest import make_git_project
from tests.codeobjects import store_obj as _store
from tests.props import examples


# a path part: ordinary names, dots, empty parts and slashes are all fair game
_part = st.sampled_from(["a", "b", "..", ".", "", "c.py", "/", "x/..", "../y"])
_rel = st.lists(_part, min_size=1, max_size=5).map("/".join)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_rel, st.sampled_from(["f", "x", "l"]), _rel), min_size=1, max_size=6))
# a link to "." under which later links climb further than their written depth says
@example(rows=[("d", "l", "."), ("d/d/e", "l", "../../outside")])
@example(rows=[("d", "l", "."), ("d/e", "l", "../outside"), ("d/e/f", "f", "")])
@example(rows=[("d", "l", ".."), ("d/f", "f", "")])
@example(rows=[("a", "l", "a//")])  # a loop: realpath answers "/" for it
@example(rows=[("a", "l", "x/../a//")])  # dangling through a missing folder: realpath says "/" too
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
                    try:
                        os.path.realpath(path, strict=True)
                    except OSError as exc:
                        if exc.errno == errno.ELOOP:
                            continue  # a loop (a -> a//) reaches nothing; realpath says "/" for it
                        if exc.errno == errno.ENOENT:  # dangling (a -> x/../a//): where it would lead
                            where = os.path.normpath(os.path.join(path.parent, os.readlink(path)))
                            assert where == str(dest) or where.startswith(str(dest) + "/"), (path, os.readlink(path))
                            continue
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
        objstore.receive(str(store), buf)
    assert Path(objstore.object_path(str(store), good_hash)).read_bytes() == good
    assert not Path(objstore.object_path(str(store), liar)).exists()
    assert [p.name for p in store.rglob("*") if p.is_file()] == [good_hash[2:]]  # no temp left
    assert not (tmp_path / "escape").exists()
    assert objstore.missing(str(store), [good_hash, liar, "not-a-hash"]) == [liar]


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
    objects.materialize(bundle.hash, three, reuse=one)  # offered job 1's (ended) folder: refused
    assert (three / "lib" / "a.py").read_text() == "A = 1\n"
    assert (three / "train.py").read_text() == "print('original')\n"
    assert (one / "train.py").read_text() == "print('tampered')\n"  # left as the job left it
    four = tmp_path / "job4" / "code"
    objects.materialize(bundle.hash, four, reuse=two)  # job 2 wrote nothing: taken over
    assert not two.exists() and (four / "train.py").read_text() == "print('original')\n"
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
    lately = _store(paths.objects_dir(), b"named a minute ago\n")
    old = time.time() - 2 * cachescan.MIN_AGE_S
    os.utime(objects.object_file(stale), (old, old))
    os.utime(objects.object_file(digest), (old, old))
    minute = time.time() - 60
    os.utime(objects.object_file(lately), (minute, minute))
    # what a submit does with the objects it finds (and one it lacks)
    assert objects.reuse_objects([digest, lately, "ab" * 32]) == {"ab" * 32}
    assert objects.object_file(lately).stat().st_mtime == pytest.approx(minute)  # fresh: not written again
    entry = [r for r in cachescan.scan(str(home)) if r["kind"] == "objects"]
    assert len(entry) == 1
    cachescan.evict(str(home), [entry[0]["path"]], cachescan.MIN_AGE_S)
    assert objects.object_file(digest).exists() and not objects.object_file(stale).exists()
    assert objects.object_file(lately).exists()


# -- reuse: an ended job's untouched folder taken over by the next build ----------------------

_NAMES = ["a.py", "b.py", "d/c.py", "d/e/f.txt", "g/h.bin", "run.sh", "ln"]
_CONTENT = [b"one\n", b"two\n", b"three\n", b""]


def _manifest(store: Path, rows: dict[str, tuple[str, object]]) -> list[list]:
    """{rel: (kind, content bytes, or a link target)} as manifest entries."""
    out = []
    for rel, (kind, what) in rows.items():
        if kind == "l":
            out.append([rel, "l", what, 0])
        else:
            out.append([rel, kind, _store(store, what), len(what)])
    return out


def _tree(top: Path) -> dict[str, tuple]:
    """What a person would see in the folder: each path's kind, content or link target, mode."""
    seen = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(dirpath) / name
            rel = str(path.relative_to(top))
            if path.is_symlink():
                seen[rel] = ("l", os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("d",)
            else:
                seen[rel] = ("f", path.read_bytes(), path.stat().st_mode & 0o777)
    return seen


_rows = st.dictionaries(st.sampled_from(_NAMES[:-1]), st.tuples(st.sampled_from(["f", "x"]), st.sampled_from(_CONTENT)),
                        max_size=6)

# what a job may do to its folder before it ends (None: nothing)
_TOUCH = st.sampled_from([None, "write", "append", "chmod", "utime-back", "new-file", "new-dir", "remove",
                          "replace-by-rename", "relink", "pycache", "pycache-link"])


def _touch(top: Path, how: str | None) -> bool:
    """Do `how` to the folder as a job might; False when there was nothing to do it to."""
    files = sorted(p for p in top.rglob("*") if p.is_file() and not p.is_symlink())
    if how is None:
        return True
    if how == "new-file":
        (top / "model.pt").write_bytes(b"weights")
        return True
    if how == "new-dir":
        (top / "cache").mkdir()
        return True
    if how == "pycache":  # what importing a module writes: derived, so the folder is still reusable
        (top / "__pycache__").mkdir()
        (top / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"planted bytecode")
        return True
    if how == "pycache-link":  # a "__pycache__" that is a link: the job's own doing
        (top / "__pycache__").symlink_to("/")
        return True
    if how == "relink":
        links = [p for p in top.rglob("*") if p.is_symlink()]
        if not links:
            return False
        links[0].unlink()
        links[0].symlink_to("a.py")
        return True
    if not files:
        return False
    f = files[0]
    st_ = f.stat()
    if how == "write":
        f.write_bytes(b"changed by the job\n")
    elif how == "append":
        with open(f, "ab") as out:
            out.write(b"# more\n")
    elif how == "chmod":
        f.chmod(0o600)
        f.chmod(st_.st_mode & 0o777)  # and back: the ctime still moved
    elif how == "utime-back":
        f.write_bytes(f.read_bytes())  # the same bytes again, then the times set back
        os.utime(f, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    elif how == "remove":
        f.unlink()
    elif how == "replace-by-rename":
        tmp = f.with_name(f.name + ".tmp")
        tmp.write_bytes(f.read_bytes())
        os.replace(tmp, f)
    return True


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=_rows, new=_rows, link=st.booleans(), how=_TOUCH)
@example(old={"a.py": ("f", b"one\n"), "d/c.py": ("f", b"two\n")}, new={"a.py": ("f", b"one\n"), "d/c.py": ("f", b"three\n")},
         link=False, how=None)
@example(old={"d/c.py": ("f", b"two\n")}, new={"d/c.py": ("x", b"two\n")}, link=False, how=None)
@example(old={"a.py": ("f", b"one\n")}, new={"a.py": ("f", b"one\n")}, link=False, how="utime-back")
@example(old={"a.py": ("f", b"one\n")}, new={"a.py": ("f", b"one\n")}, link=False, how="pycache")
@example(old={"a.py": ("f", b"one\n")}, new={"a.py": ("f", b"one\n")}, link=False, how="pycache-link")
def test_a_reused_folder_is_the_new_build_and_a_touched_one_is_left_whole(
        tmp_path: Path, old: dict, new: dict, link: bool, how: str | None) -> None:
    """For any two manifests of a project and anything the first job did to its folder: the
    second job's folder is exactly what a fresh build makes; when the first job changed, added
    or removed anything (a write, chmod, same bytes with the times set back, a rename over a
    file, a new file or folder, a link pointed elsewhere), its folder is left as it left it, for
    `gpu fetch`, and nothing of it reaches the second job. Bytecode caches Python wrote are
    not the job's work: the folder is reused and the caches are gone from it."""
    work = Path(os.path.realpath(tmp_path)) / f"w{time.monotonic_ns()}"
    store = work / "objects"
    store.mkdir(parents=True)
    if link:
        old = {**old, "ln": ("l", "a.py")}
    first, second, fresh = work / "j1" / "code", work / "j2" / "code", work / "j3" / "code"
    codetree.build(_manifest(store, old), str(store), str(first))
    changed = _touch(first, how) and how not in (None, "pycache")
    left = _tree(first)
    time.sleep(0.002)  # past the timestamp tick: a touch never shares its ctime with the build
    entries = _manifest(store, new)
    codetree.build(entries, str(store), str(second), reuse=str(first))
    codetree.build(entries, str(store), str(fresh))
    assert _tree(second) == _tree(fresh)
    if changed:
        assert _tree(first) == left  # whole, as the job left it
    else:
        assert not first.exists()  # taken over
        assert sorted(p.name for p in (work / "j1").iterdir()) == ["code.reused"]  # its record went
    # every build leaves its record, and only the reused folder's is gone
    assert (work / "j2" / "code.tree").is_file() and (work / "j3" / "code.tree").is_file()


def test_reuse_writes_only_what_differs(tmp_path: Path) -> None:
    store = tmp_path / "objects"
    old = {f"src/m{i}.py": ("f", f"print({i})\n".encode()) for i in range(50)}
    new = {**old, "src/m7.py": ("f", b"print('seven')\n")}
    first, second = tmp_path / "j1" / "code", tmp_path / "j2" / "code"
    codetree.build(_manifest(store, old), str(store), str(first))
    inodes = {p.name: p.stat().st_ino for p in (first / "src").iterdir()}
    written = codetree.build(_manifest(store, new), str(store), str(second), reuse=str(first))
    assert written == len(b"print('seven')\n")  # one file's bytes, not fifty
    after = {p.name: p.stat().st_ino for p in (second / "src").iterdir()}
    assert all(after[n] == inodes[n] for n in inodes if n != "m7.py")  # the same files, not copies
    assert (second / "src" / "m7.py").read_bytes() == b"print('seven')\n"


def test_two_builds_never_share_one_folder(tmp_path: Path) -> None:
    """Two jobs launched together, both offered the same ended job's folder: one takes it, the
    other builds its own; each folder is whole."""
    store = tmp_path / "objects"
    rows = {f"f{i}.py": ("f", f"{i}\n".encode()) for i in range(20)}
    entries = _manifest(store, rows)
    first = tmp_path / "j1" / "code"
    codetree.build(entries, str(store), str(first))
    a, b = tmp_path / "j2" / "code", tmp_path / "j3" / "code"
    codetree.build(entries, str(store), str(a), reuse=str(first))
    codetree.build(entries, str(store), str(b), reuse=str(first))  # already taken: a build of its own
    assert _tree(a) == _tree(b) and len(_tree(a)) == 20
    assert {p.stat().st_ino for p in a.iterdir()}.isdisjoint({p.stat().st_ino for p in b.iterdir()})


def test_a_build_killed_half_way_leaves_nothing_the_next_build_keeps(tmp_path: Path) -> None:
    """A build killed mid-way (no exception handler runs) leaves its temporary folder beside
    the job's; the job's next build clears it."""
    store = tmp_path / "objects"
    entries = _manifest(store, {"a.py": ("f", b"one\n")})
    job = tmp_path / "job"
    (job / (codetree.BUILDING + "x1y2")).mkdir(parents=True)
    (job / (codetree.BUILDING + "x1y2") / "half.py").write_text("half")
    (job / (codetree.REUSING + "77-abcd")).mkdir()
    (job / ".code-ready").write_text("")  # the job's marker is not a build's leftover
    codetree.build(entries, str(store), str(job / "code"))
    assert sorted(p.name for p in job.iterdir()) == [".code-ready", "code", "code.tree"]


def test_a_taken_over_folder_takes_its_jobs_ready_mark_and_a_refused_one_keeps_it(tmp_path: Path) -> None:
    """The mark that a job's folder is built goes only with a folder taken over (its job, if
    resumed, builds again); a folder refused for what its job wrote keeps its mark, so a resume
    keeps what the job wrote."""
    store = tmp_path / "objects"
    entries = _manifest(store, {"a.py": ("f", b"one\n")})
    for name in ("clean", "wrote"):
        codetree.build(entries, str(store), str(tmp_path / name / "code"))
        (tmp_path / name / codetree.READY).write_text("")
    (tmp_path / "wrote" / "code" / "out.txt").write_text("the job's own\n")
    codetree.build(entries, str(store), str(tmp_path / "next1" / "code"), reuse=str(tmp_path / "clean" / "code"))
    codetree.build(entries, str(store), str(tmp_path / "next2" / "code"), reuse=str(tmp_path / "wrote" / "code"))
    assert not (tmp_path / "clean" / codetree.READY).exists() and not (tmp_path / "clean" / "code").exists()
    assert (tmp_path / "wrote" / codetree.READY).exists()
    assert (tmp_path / "wrote" / "code" / "out.txt").read_text() == "the job's own\n"
    # built again (its job resumed): the stale record and note of the take-over go
    codetree.build(entries, str(store), str(tmp_path / "clean" / "code"))
    assert sorted(p.name for p in (tmp_path / "clean").iterdir()) == ["code", "code.tree"]


def test_a_verified_build_refuses_an_object_rewritten_in_the_store(tmp_path: Path) -> None:
    """On a host without a sandbox a job runs as the store's user and can rewrite an object
    (issue 36, item 5): a `--verify` build hashes every object it reads, builds nothing from
    one that lies, removes it from the store (so the sender is asked for it again) and exits
    4 naming it; an unverified build (what the engine used before) copies the lie."""
    import json
    import subprocess
    import sys

    store = tmp_path / "objects"
    good = _store(store, b"print('ORIGINAL')\n")
    other = _store(store, b"untouched\n")
    rows = [["a.py", "f", good, 18], ["b.txt", "f", other, 10]]
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"version": codetree.MANIFEST_VERSION, "entries": rows}))
    obj = Path(objstore.object_path(str(store), good))
    obj.chmod(0o644)
    obj.write_bytes(b"print('TAMPERED')\n")

    codetree.build(rows, str(store), str(tmp_path / "plain"))
    assert (tmp_path / "plain" / "a.py").read_bytes() == b"print('TAMPERED')\n"  # the lie, copied

    with pytest.raises(codetree.BadObjects) as caught:
        codetree.build(rows, str(store), str(tmp_path / "checked"), verify=True)
    assert caught.value.digests == [good]
    assert not (tmp_path / "checked").exists() and not obj.exists()
    assert Path(objstore.object_path(str(store), other)).exists()  # the honest one stays

    obj.write_bytes(b"print('TAMPERED')\n")  # again, through the command a host runs
    run = subprocess.run([sys.executable, codetree.__file__, "build", "--verify", str(manifest), str(store),
                          str(tmp_path / "cli")], capture_output=True, text=True)
    assert run.returncode == 4 and json.loads(run.stdout) == {"bad": [good]}, run
    assert not (tmp_path / "cli").exists() and not obj.exists()
    _store(store, b"print('ORIGINAL')\n")  # sent again: the build goes through
    run = subprocess.run([sys.executable, codetree.__file__, "build", "--verify", str(manifest), str(store),
                          str(tmp_path / "cli")], capture_output=True, text=True)
    assert run.returncode == 0, run
    assert (tmp_path / "cli" / "a.py").read_bytes() == b"print('ORIGINAL')\n"

    obj.unlink()  # a FIFO under the object's name: refused at once, not waited on
    os.mkfifo(obj)
    with pytest.raises(codetree.BadObjects):
        codetree.build(rows, str(store), str(tmp_path / "fifo"), verify=True)
    assert not obj.exists()


def test_a_take_over_with_a_pin_refuses_a_record_rewritten_to_match_a_changed_folder(tmp_path: Path) -> None:
    """A job that runs unsandboxed can rewrite a file of its folder and then the `.tree`
    record beside it so the record describes the change (issue 36, item 5). The record's
    hash at build time, kept where no job writes (the engine's home), is the pin: a
    take-over asks for it, and a rewritten record no longer has it."""
    import json

    store = tmp_path / "objects"
    digest = _store(store, b"ORIGINAL\n")
    rows = [["data.txt", "f", digest, 9]]
    first = tmp_path / "jobs" / "one" / "code"
    codetree.build(rows, str(store), str(first))
    pin = codetree.record_digest(str(first))
    assert pin is not None

    (first / "data.txt").write_text("CORRUPTED\n")  # the job's change, then its forged record
    tree = Path(f"{first}.tree")
    doc = json.loads(tree.read_text())
    st = (first / "data.txt").stat()
    doc["rows"][0][3:5] = [st.st_ino, st.st_ctime_ns]
    tree.write_text(json.dumps(doc))

    second = tmp_path / "jobs" / "two" / "code"
    codetree.build(rows, str(store), str(second), reuse=str(first), pin=pin)
    assert (second / "data.txt").read_text() == "ORIGINAL\n"
    assert (first / "data.txt").read_text() == "CORRUPTED\n"  # left whole, for `gpu fetch`

    third = tmp_path / "jobs" / "three" / "code"  # the same forgery, no pin: taken over
    codetree.build(rows, str(store), str(third), reuse=str(first))
    assert (third / "data.txt").read_text() == "CORRUPTED\n"
