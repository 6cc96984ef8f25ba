"""No-follow reads and writes, one test per part of the rule (issue 40; core/runtime/nofollow.py,
the one reader of a job's folder, and core/packaging/runswriter.py, the one writer under runs/):

- reads: for any tree of links (at any component, to folders and files outside, dangling,
  `..`), a walk from the job's folder yields exactly the regular files reached through plain
  folders; every link, FIFO, socket or device is named as skipped with what it is; opening a
  path through a link is refused naming the part and "a link"; a file hard-linked from another
  owner is refused naming that owner;
- writes: for any tree of links at runs/, runs/<id>, any folder below it or the file's own
  name, no write lands outside runs/<id>/ and nothing outside it changes; a write either lands
  whole or is refused naming the first part that is not a plain folder and what it is
  ("a link", "a file, not a folder", "a FIFO", another user's folder); a planted `*.tmp` link is
  never written through; a name leaving the folder is refused as such.

Quick: real folders and links, no job.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.packaging import runswriter
from core.runtime import nofollow


def snapshot(root: Path) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(top) / name
            s = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(s.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(s.st_mode):
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("dir",) if stat.S_ISDIR(s.st_mode) else ("other",)
    return out


def outside_tree(base: Path) -> Path:
    out = base / "outside"
    (out / "folder" / "deeper").mkdir(parents=True)
    (out / "folder" / "victim.txt").write_text("the person's file")
    (out / "folder" / "deeper" / "f.txt").write_text("the person's other file")
    return out


# -- reads ---------------------------------------------------------------------------------

KINDS = ["dir", "file", "link-dir", "link-file", "link-dangling", "link-up", "fifo"]
SPOTS = ["a", "a/b", "a/b/c.txt", "a/d.txt", "e", "e/f.txt", "g.txt"]


@st.composite
def trees(draw) -> list[tuple[str, str]]:
    picks = draw(st.lists(st.tuples(st.sampled_from(SPOTS), st.sampled_from(KINDS)), max_size=7,
                          unique_by=lambda t: t[0]))
    return sorted(picks, key=lambda t: t[0].count("/"))


def plant(top: Path, outside: Path, tree: list[tuple[str, str]]) -> None:
    for rel, kind in tree:
        p = top / rel
        try:
            if kind == "dir":
                p.mkdir()
            elif kind == "file":
                p.write_text(f"inside {rel}")
            elif kind == "link-dir":
                p.symlink_to(outside / "folder")
            elif kind == "link-file":
                p.symlink_to(outside / "folder" / "victim.txt")
            elif kind == "link-dangling":
                p.symlink_to(outside / "folder" / "missing")
            elif kind == "link-up":
                p.symlink_to("..")
            else:
                os.mkfifo(p)
        except OSError:
            pass  # its parent is not a plain folder here: not planted


def expected_read(top: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """What a no-follow walk must give: regular files through plain folders; the rest named."""
    files, skipped = {}, {}
    for dirpath, dirs, names in os.walk(top, followlinks=False):
        for name in dirs + names:
            p = Path(dirpath) / name
            rel = str(p.relative_to(top))
            m = p.lstat().st_mode
            if stat.S_ISREG(m):
                files[rel] = p.read_bytes()
            elif stat.S_ISLNK(m):
                skipped[rel] = "a link"
            elif stat.S_ISFIFO(m):
                skipped[rel] = "a FIFO"
    return files, skipped


@settings(max_examples=examples(150), deadline=None)
@given(trees())
def test_a_walk_reads_exactly_the_files_inside_and_names_every_link(tree: list[tuple[str, str]]) -> None:
    base = Path(tempfile.mkdtemp(prefix="nofollow-read-"))
    try:
        outside = outside_tree(base)
        job = base / "job"
        job.mkdir()
        plant(job, outside, tree)
        want_files, want_skipped = expected_read(job)
        top = nofollow.open_root(str(base), "job")
        got_files, got_skipped = {}, {}
        try:
            own = nofollow.owner(top)
            for entry in nofollow.walk(top):
                if entry.why is not None:
                    got_skipped[entry.rel] = entry.why
                    continue
                fd, _ = nofollow.open_file(entry.dir_fd, entry.name, entry.rel, own)
                try:
                    got_files[entry.rel] = os.read(fd, 1 << 16)
                finally:
                    os.close(fd)
        finally:
            os.close(top)
        assert got_files == want_files, tree
        assert got_skipped == want_skipped, tree
        assert b"the person's" not in b"".join(got_files.values())
    finally:
        shutil.rmtree(base)


@settings(max_examples=examples(150), deadline=None)
@given(trees(), st.sampled_from(["a/b", "a/b/c.txt", "e", "a"]))
@example([("a", "file")], "a/b")
@example([("a", "dir"), ("a/b", "link-dir")], "a/b/c.txt")
def test_opening_a_path_through_a_link_is_refused_naming_the_part(tree, path: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="nofollow-open-"))
    try:
        outside = outside_tree(base)
        job = base / "job"
        job.mkdir()
        plant(job, outside, tree)
        parts = path.split("/")
        first_bad = None
        for i in range(len(parts)):
            rel = "/".join(parts[:i + 1])
            p = job / rel
            if not os.path.lexists(p):
                first_bad = (rel, "missing")
                break
            m = p.lstat().st_mode
            if not stat.S_ISDIR(m):
                first_bad = (rel, {True: "a link"}.get(stat.S_ISLNK(m))
                             or ("a FIFO" if stat.S_ISFIFO(m) else "a file, not a folder"))
                break
        try:
            fd = nofollow.open_root(str(job), path)
            os.close(fd)
            said = None
        except FileNotFoundError:
            said = "missing"
        except nofollow.Refused as exc:
            said = (exc.rel, exc.why)
        if first_bad is None:
            assert said is None
        elif first_bad[1] == "missing":
            assert said == "missing"
        else:
            assert said == first_bad, (tree, path)
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_a_name_that_is_not_a_plain_name_is_refused(tmp_path: Path, name: str) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_dir_at(fd, name, "rel")
        assert (err.value.rel, err.value.why) == ("rel", "not a plain name")
    finally:
        os.close(fd)


@pytest.mark.parametrize("rel", ["", ".", "a/../b", "..", "./"])
def test_a_path_leaving_the_folder_is_refused(tmp_path: Path, rel: str) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.parent_of(fd, rel)
        assert (err.value.rel, err.value.why) == (rel, "not a path inside the folder")
    finally:
        os.close(fd)


def make_special(p: Path, kind: str, outside: Path) -> None:
    if kind == "a link":
        p.symlink_to(outside / "folder" / "victim.txt")
    elif kind == "a FIFO":
        os.mkfifo(p)
    elif kind == "a socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    elif kind == "a device":
        os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "a folder":
        p.mkdir()


@pytest.mark.parametrize("kind", ["a link", "a FIFO", "a socket", "a device", "a folder"])
def test_a_file_that_is_not_regular_is_refused_saying_what_it_is(tmp_path: Path, kind: str) -> None:
    outside = outside_tree(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    try:
        make_special(job / "x", kind, outside)
    except PermissionError:
        pytest.skip("mknod needs root")
    fd = os.open(job, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_file(fd, "x", "out/x", nofollow.owner(fd))
        assert (err.value.rel, err.value.why) == ("out/x", kind)
        assert str(err.value) == f"out/x: {kind}"
    finally:
        os.close(fd)


def test_a_hard_link_to_another_owners_file_is_refused_naming_the_owner(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file of another owner needs root")
    job = tmp_path / "job"
    job.mkdir()
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("someone else's")
    os.chown(theirs, 4321, 4321)
    os.link(theirs, job / "x")
    (job / "mine").write_text("mine")
    os.link(job / "mine", job / "mine2")
    fd = os.open(job, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_file(fd, "x", "x", nofollow.owner(fd))
        assert err.value.why == "a hard link to a file of another owner (uid 4321)"
        rfd, st_ = nofollow.open_file(fd, "mine2", "mine2", nofollow.owner(fd))  # one's own: read
        assert os.read(rfd, 10) == b"mine" and st_.st_nlink == 2
        os.close(rfd)
        single = tmp_path / "job" / "single"
        single.write_text("s")
        os.chown(single, 4321, 4321)  # another owner, one link: it is the job's folder's file
        rfd, _ = nofollow.open_file(fd, "single", "single", nofollow.owner(fd))
        os.close(rfd)
    finally:
        os.close(fd)


def test_a_file_in_the_way_of_a_folder_is_named_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a file")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_dir_at(fd, "a", "out/a")
        assert (err.value.rel, err.value.why) == ("out/a", "a file, not a folder")
        with pytest.raises(nofollow.Refused) as err:
            nofollow.makedirs_at(fd, "a/b")
        assert (err.value.rel, err.value.why) == ("a", "a file, not a folder")
    finally:
        os.close(fd)


def test_makedirs_makes_each_part_and_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    top = tmp_path / "top"
    top.mkdir()
    (top / "a").mkdir()
    (top / "a" / "l").symlink_to(outside / "folder")
    fd = os.open(top, os.O_RDONLY)
    try:
        made = nofollow.makedirs_at(fd, "a/new/deeper")
        os.close(made)
        assert (top / "a" / "new" / "deeper").is_dir()
        with pytest.raises(nofollow.Refused) as err:
            nofollow.makedirs_at(fd, "a/l/x")
        assert (err.value.rel, err.value.why) == ("a/l", "a link")
        assert sorted(p.name for p in (outside / "folder").iterdir()) == ["deeper", "victim.txt"]
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["a link", "a FIFO", "hard link"])
def test_create_file_replaces_what_had_the_name_and_never_writes_through_it(tmp_path: Path, kind: str) -> None:
    outside = outside_tree(tmp_path)
    victim = outside / "folder" / "victim.txt"
    top = tmp_path / "top"
    top.mkdir()
    if kind == "hard link":
        os.link(victim, top / "x")
    else:
        make_special(top / "x", kind, outside)
    fd = os.open(top, os.O_RDONLY)
    try:
        wfd = nofollow.create_file(fd, "x")
        os.write(wfd, b"written")
        os.close(wfd)
    finally:
        os.close(fd)
    assert (top / "x").read_bytes() == b"written" and not (top / "x").is_symlink()
    assert (top / "x").stat().st_nlink == 1
    assert victim.read_text() == "the person's file"


def test_create_file_refuses_a_folder_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(nofollow.Refused) as err:
            nofollow.create_file(fd, "x")
        assert (err.value.rel, err.value.why) == ("x", "a folder is in the way")
    finally:
        os.close(fd)


# -- writes under runs/ ----------------------------------------------------------------------------

WKINDS = ["dir", "absent", "link-dir", "link-file", "link-up", "link-dangling", "file", "fifo"]
WHY = {"link-dir": "a link", "link-file": "a link", "link-up": "a link", "link-dangling": "a link",
       "file": "a file, not a folder", "fifo": "a FIFO"}


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.sampled_from(WKINDS), job=st.sampled_from(WKINDS), sub=st.sampled_from(WKINDS),
       deeper=st.sampled_from(WKINDS), name=st.sampled_from(["absent", "link-file", "link-dangling", "file"]),
       tmp_link=st.booleans())
@example(runs="dir", job="dir", sub="file", deeper="absent", name="absent", tmp_link=False)
@example(runs="dir", job="absent", sub="dir", deeper="link-up", name="absent", tmp_link=False)
@example(runs="dir", job="dir", sub="dir", deeper="dir", name="link-file", tmp_link=True)
@example(runs="file", job="absent", sub="absent", deeper="absent", name="absent", tmp_link=False)
@example(runs="dir", job="fifo", sub="absent", deeper="absent", name="absent", tmp_link=False)
def test_a_write_lands_whole_in_runs_id_or_is_refused_naming_the_first_part_in_the_way(
        runs: str, job: str, sub: str, deeper: str, name: str, tmp_link: bool) -> None:
    """runs/, runs/j, runs/j/sub, runs/j/sub/deeper and the file's own name each planted as any
    kind: the write of sub/deeper/f.txt lands whole when every folder on the way is a plain one
    (or absent: made), and is refused naming the first that is not, with what it is; nothing
    outside runs/j changes either way."""
    base = Path(tempfile.mkdtemp(prefix="runswriter-"))
    try:
        outside = outside_tree(base)
        project = base / "project"
        project.mkdir()
        spots = [("runs", runs), ("runs/j", job), ("runs/j/sub", sub), ("runs/j/sub/deeper", deeper),
                 ("runs/j/sub/deeper/f.txt", name)]
        first_bad = None
        for rel, kind in spots:
            p = project / rel
            if not p.parent.is_dir() or p.parent.is_symlink():
                break
            if kind in ("dir", "absent") and rel.endswith("f.txt"):
                continue
            if kind == "dir":
                p.mkdir()
            elif kind == "file":
                p.write_text("planted")
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "link-dir":
                p.symlink_to(outside / "folder")
            elif kind == "link-file":
                p.symlink_to(outside / "folder" / "victim.txt")
            elif kind == "link-up":
                p.symlink_to("..")
            elif kind == "link-dangling":
                p.symlink_to(outside / "folder" / "made-by-a-write")
            if first_bad is None and kind not in ("dir", "absent") and not rel.endswith("f.txt"):
                first_bad = (rel, WHY[kind])
        if tmp_link and (project / "runs/j").is_dir() and not (project / "runs/j").is_symlink():
            for planted in ("f.txt.tmp", ".f.txt.tmp", "job.json.tmp"):
                try:
                    (project / "runs/j/sub/deeper" / planted).symlink_to(outside / "folder" / "victim.txt")
                except OSError:
                    pass
        before_out = snapshot(outside)
        before = snapshot(project)

        try:
            with runswriter.open_folder(project / "runs" / "j") as folder:
                folder.write("sub/deeper/f.txt", b"the job's output")
                folder.write("job.json.tmp", b"{}") if tmp_link else None
            said = "written"
        except runswriter.Refused as exc:
            said = (exc.where, exc.why)

        assert snapshot(outside) == before_out
        if first_bad is None:
            assert said == "written"
            f = project / "runs/j/sub/deeper/f.txt"
            assert f.read_bytes() == b"the job's output" and not f.is_symlink() and f.stat().st_nlink == 1
        else:
            rel, why = first_bad
            where = (str(project / rel) if rel in ("runs", "runs/j")
                     else "j/" + rel[len("runs/j/"):])
            assert said == (where, why), (spots, said)
        after = snapshot(project)
        for rel in set(before) | set(after):
            if before.get(rel) != after.get(rel):
                assert rel in ("runs", "runs/j") or rel.startswith("runs/j/"), rel
                assert first_bad is None or rel in ("runs", "runs/j") or rel.startswith("runs/j/sub"), rel
        assert [r for r in after if ".tmp-" in r] == []  # no temporary file left behind
    finally:
        shutil.rmtree(base)


def test_a_runs_id_of_another_user_is_refused_naming_the_uid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a folder of another owner needs root")
    (tmp_path / "runs" / "j").mkdir(parents=True)
    os.chown(tmp_path / "runs" / "j", 4321, 4321)
    with pytest.raises(runswriter.Refused) as err:
        runswriter.open_folder(tmp_path / "runs" / "j")
    assert (err.value.where, err.value.why) == (
        str(tmp_path / "runs" / "j"), "a folder owned by another user (uid 4321), not by you")
    os.chown(tmp_path / "runs" / "j", 0, 0)
    os.chown(tmp_path / "runs", 4321, 4321)
    with pytest.raises(runswriter.Refused) as err:
        runswriter.open_folder(tmp_path / "runs" / "j")
    assert (err.value.where, err.value.why) == (
        str(tmp_path / "runs"), "a folder owned by another user (uid 4321), not by you")


@pytest.mark.parametrize("rel", ["", "..", "../x", "a/../../x", "."])
def test_a_name_leaving_runs_id_is_refused(tmp_path: Path, rel: str) -> None:
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        with pytest.raises(runswriter.Refused) as err:
            folder.write(rel, b"x")
    assert (err.value.where, err.value.why) == (rel, "not a path inside the folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_without_make_a_missing_runs_id_is_not_made(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    with pytest.raises(FileNotFoundError):
        runswriter.open_folder(tmp_path / "runs" / "j", make=False)
    assert not (tmp_path / "runs" / "j").exists()


def test_a_folder_where_the_file_goes_is_replaced_by_the_file(tmp_path: Path) -> None:
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        (tmp_path / "runs" / "j" / "out.txt" / "inner").mkdir(parents=True)
        folder.write("out.txt", b"file")
    assert (tmp_path / "runs" / "j" / "out.txt").read_bytes() == b"file"


def test_check_dir_refuses_a_link_and_accepts_a_folder(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        (tmp_path / "runs" / "j" / "ckpt").symlink_to(outside / "folder")
        (tmp_path / "runs" / "j" / "real").mkdir()
        with pytest.raises(runswriter.Refused) as err:
            folder.check_dir("ckpt")
        assert (err.value.where, err.value.why) == (str(tmp_path / "runs" / "j" / "ckpt"), "a link")
        folder.check_dir("real")
        with pytest.raises(FileNotFoundError):
            folder.check_dir("missing")
        assert folder.exists("ckpt") is True and folder.exists("missing") is False


def test_move_out_refuses_a_link_and_moves_a_folder(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        (tmp_path / "runs" / "j" / "checkpoint").symlink_to(outside / "folder")
        with pytest.raises(runswriter.Refused) as err:
            folder.move_out("checkpoint", tmp_path / "home" / "ckpt")
        assert (err.value.where, err.value.why) == ("j/checkpoint", "a link")
        assert not (tmp_path / "home" / "ckpt").exists()
        assert sorted(p.name for p in (outside / "folder").iterdir()) == ["deeper", "victim.txt"]
        (tmp_path / "runs" / "j" / "real").mkdir()
        (tmp_path / "runs" / "j" / "real" / "w.pt").write_bytes(b"w")
        folder.move_out("real", tmp_path / "home" / "ckpt")
    assert (tmp_path / "home" / "ckpt" / "w.pt").read_bytes() == b"w"
    assert not (tmp_path / "runs" / "j" / "real").exists()


def test_move_in_refuses_a_name_already_there(tmp_path: Path) -> None:
    src = tmp_path / "home" / "ckpt"
    src.mkdir(parents=True)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        (tmp_path / "runs" / "j" / "checkpoint").symlink_to(tmp_path)
        with pytest.raises(FileExistsError):
            folder.move_in(src, "checkpoint")
    assert src.is_dir()


def test_the_ignore_file_is_made_once_and_a_planted_link_is_left_alone(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    runswriter.ensure_ignored(tmp_path / "runs", "*\n")
    assert (tmp_path / "runs" / ".gitignore").read_text() == "*\n"
    runswriter.ensure_ignored(tmp_path / "runs", "other\n")
    assert (tmp_path / "runs" / ".gitignore").read_text() == "*\n"
    other = tmp_path / "p2"
    (other / "runs").mkdir(parents=True)
    (other / "runs" / ".gitignore").symlink_to(outside / "folder" / "victim.txt")
    runswriter.ensure_ignored(other / "runs", "*\n")
    assert (outside / "folder" / "victim.txt").read_text() == "the person's file"
    third = tmp_path / "p3"
    third.mkdir()
    (third / "runs").symlink_to(outside / "folder")
    with pytest.raises(runswriter.Refused) as err:
        runswriter.ensure_ignored(third / "runs", "*\n")
    assert (err.value.where, err.value.why) == (str(third / "runs"), "a link")
    assert not (outside / "folder" / ".gitignore").exists()


def test_a_merge_replaces_links_and_files_and_merges_folders(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        j = tmp_path / "runs" / "j"
        (j / "sub").mkdir()
        (j / "sub" / "keep.txt").write_text("kept")
        (j / "sub" / "a.txt").symlink_to(outside / "folder" / "victim.txt")
        (j / "b").symlink_to(outside / "folder")
        (j / "c").mkdir()
        name, sfd = folder.staging()
        try:
            staged = tmp_path / "runs" / name
            (staged / "sub").mkdir()
            (staged / "sub" / "a.txt").write_text("A")
            (staged / "b").mkdir()
            (staged / "b" / "x.txt").write_text("X")
            (staged / "c").write_text("C")
            folder.merge(sfd)
        finally:
            os.close(sfd)
            folder.remove_staging(name)
    assert snapshot(j) == {
        "sub": ("dir",), "sub/keep.txt": ("file", hashlib.sha256(b"kept").hexdigest()),
        "sub/a.txt": ("file", hashlib.sha256(b"A").hexdigest()), "b": ("dir",),
        "b/x.txt": ("file", hashlib.sha256(b"X").hexdigest()), "c": ("file", hashlib.sha256(b"C").hexdigest())}
    assert sorted(p.name for p in (outside / "folder").iterdir()) == ["deeper", "victim.txt"]
    assert (outside / "folder" / "victim.txt").read_text() == "the person's file"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["j"]


# -- the walk's bounds, what a file costs, exact reads ----------------------------------------------

def walked(top: Path, **kw) -> list[tuple[str, str | None]]:
    fd = os.open(top, os.O_RDONLY)
    try:
        return [(e.rel, e.why) for e in nofollow.walk(fd, **kw)]
    finally:
        os.close(fd)


def test_a_walk_goes_depth_first_in_name_order_with_its_prefix(tmp_path: Path) -> None:
    for rel in ("b/z.txt", "b/a/y.txt", "a.txt", "c/x.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert [e.rel for e in nofollow.walk(fd, "out")] == \
            ["out/a.txt", "out/b/a/y.txt", "out/b/z.txt", "out/c/x.txt"]
        os.fstat(fd)  # the caller's descriptor stays open
    finally:
        os.close(fd)


def test_a_walk_leaves_out_the_folders_it_is_told_to_skip(tmp_path: Path) -> None:
    for rel in ("keep/a.txt", "skip/b.txt", "byid/c.txt", "deep/skip/d.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    s = (tmp_path / "byid").stat()
    assert walked(tmp_path, skip_names=frozenset({"skip"}), skip_ids=frozenset({(s.st_dev, s.st_ino)})) == \
        [("keep/a.txt", None)]


def test_a_walk_stops_at_its_depth_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "top.txt").write_text("t")
    (tmp_path / "a" / "one.txt").write_text("1")
    (tmp_path / "a" / "b" / "two.txt").write_text("2")
    (tmp_path / "a" / "b" / "c" / "three.txt").write_text("3")
    assert walked(tmp_path, max_depth=2) == [
        ("a/b/c", "more than 2 folders deep"), ("a/b/two.txt", None), ("a/one.txt", None), ("top.txt", None)]
    assert walked(tmp_path, max_depth=1) == [
        ("a/b", "more than 1 folders deep"), ("a/one.txt", None), ("top.txt", None)]
    assert nofollow.MAX_DEPTH == 128


def test_a_folder_that_cannot_be_read_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "x.txt").write_text("x")
    real = nofollow._names

    def names(dfd: int) -> list[str]:
        if os.fstat(dfd).st_ino == (tmp_path / "locked").stat().st_ino:
            raise PermissionError(13, "Permission denied")
        return real(dfd)

    monkeypatch.setattr(nofollow, "_names", names)
    assert walked(tmp_path) == [("locked", "could not be read (Permission denied)")]


def test_a_block_device_is_named_a_device(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(tmp_path / "blk", 0o600 | stat.S_IFBLK, os.makedev(7, 250))
    assert walked(tmp_path) == [("blk", "a device")]
    assert nofollow.kind(stat.S_IFREG) == "a file, not a folder"
    assert nofollow.kind(stat.S_IFDIR) == "a folder"
    assert nofollow.kind(0) == "not a regular file"


def test_a_file_costs_its_length_or_its_blocks_whichever_is_more(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(1 << 24)
    dense = tmp_path / "dense"
    dense.write_bytes(b"x" * 10)
    assert nofollow.cost(sparse.stat()) == 1 << 24
    assert nofollow.cost(dense.stat()) == max(10, dense.stat().st_blocks * 512)
    assert nofollow.cost(dense.stat()) == dense.stat().st_blocks * 512 > 10


def test_a_file_swapped_between_the_look_and_the_open_is_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x").write_text("the job's")
    (tmp_path / "other").write_text("another")
    other = (tmp_path / "other").stat()
    real_stat = os.stat

    def stale(name, *a, **k):  # the look saw another inode than the one opened
        return other if name == "x" else real_stat(name, *a, **k)

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        monkeypatch.setattr(nofollow.os, "stat", stale)
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_file(fd, "x", "out/x", None)
        assert (err.value.rel, err.value.why) == ("out/x", "changed while it was read")
    finally:
        monkeypatch.undo()
        os.close(fd)


def test_a_link_swapped_in_after_the_look_is_refused_as_changed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x").symlink_to(tmp_path / "target")
    (tmp_path / "target").write_text("t")
    regular = (tmp_path / "target").stat()
    real_stat = os.stat

    def stale(name, *a, **k):  # the look saw a regular file; a link was there at the open
        return regular if name == "x" else real_stat(name, *a, **k)

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        monkeypatch.setattr(nofollow.os, "stat", stale)
        with pytest.raises(nofollow.Refused) as err:
            nofollow.open_file(fd, "x", "x", None)
        assert (err.value.rel, err.value.why) == ("x", "changed while it was read (Too many levels of symbolic links)")
    finally:
        monkeypatch.undo()
        os.close(fd)


def test_an_exact_reader_gives_the_size_it_was_told(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abcdef")
    fd = os.open(f, os.O_RDONLY)
    try:
        r = nofollow.ExactReader(fd, 4)  # the file grew past what was listed: cut
        assert (r.read(3), r.read(), r.read()) == (b"abc", b"d", b"")
        os.lseek(fd, 0, 0)
        r = nofollow.ExactReader(fd, 9)  # it shrank: zero-padded to the listed size
        assert r.read(-1) == b"abcdef\0\0\0" and r.read(5) == b""
        os.lseek(fd, 0, 0)
        r = nofollow.ExactReader(fd, 6)
        assert r.read(None) == b"abcdef"
    finally:
        os.close(fd)


def test_a_new_file_gets_the_mode_asked(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.umask(old := os.umask(0))
        os.close(nofollow.create_file(fd, "a"))
        os.close(nofollow.create_file(fd, "b", 0o600))
    finally:
        os.close(fd)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644 & ~old
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o600 & ~old


def test_open_root_opens_the_base_as_given_even_a_link(tmp_path: Path) -> None:
    """The base is gpu-router's own folder (the job's, made by it): taken as it is; the parts
    inside are not."""
    (tmp_path / "real" / "in").mkdir(parents=True)
    (tmp_path / "base").symlink_to(tmp_path / "real")
    fd = nofollow.open_root(str(tmp_path / "base"), "./in/")
    try:
        assert os.fstat(fd).st_ino == (tmp_path / "real" / "in").stat().st_ino
    finally:
        os.close(fd)
    fd = nofollow.open_root(str(tmp_path / "real"))
    try:
        assert os.fstat(fd).st_ino == (tmp_path / "real").stat().st_ino
    finally:
        os.close(fd)


# -- the writer's own files and names ---------------------------------------------------------------

def test_write_from_copies_gpu_routers_own_file_and_refuses_a_link_for_it(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    src = tmp_path / "home" / "job.log"
    src.parent.mkdir()
    src.write_bytes(b"line\n" * 1000)
    runswriter.copy_file(tmp_path / "runs" / "j", "job.log", src)
    assert (tmp_path / "runs" / "j" / "job.log").read_bytes() == b"line\n" * 1000
    linked = tmp_path / "home" / "metrics.jsonl"
    linked.symlink_to(outside / "folder" / "victim.txt")
    with pytest.raises(OSError):
        runswriter.copy_file(tmp_path / "runs" / "j", "metrics.jsonl", linked)
    assert not (tmp_path / "runs" / "j" / "metrics.jsonl").exists()
    runswriter.write_file(tmp_path / "runs" / "j", "job.json", b"{}")
    assert (tmp_path / "runs" / "j" / "job.json").read_bytes() == b"{}"


def test_written_files_get_the_mode_asked_and_no_temporary_file_stays(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
            folder.write("a.txt", b"a")
            folder.write("sub/b.txt", [b"b", b"c"], mode=0o600)
    finally:
        os.umask(old)
    j = tmp_path / "runs" / "j"
    assert (j / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (j / "sub" / "b.txt").stat().st_mode & 0o777 == 0o600 and (j / "sub" / "b.txt").read_bytes() == b"bc"
    assert sorted(str(p.relative_to(j)) for p in j.rglob("*")) == ["a.txt", "sub", "sub/b.txt"]


def test_a_temporary_name_is_fresh_and_random_and_gives_up_after_100_tries(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        name, wfd = runswriter.new_temp(fd, "job.json", 0o600)
        os.close(wfd)
        assert name.startswith(".job.json.tmp-") and len(name) == len(".job.json.tmp-") + 12
        os.umask(mask := os.umask(0))
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600 & ~mask
        long, wfd = runswriter.new_temp(fd, "x" * 300)
        os.close(wfd)
        assert long == "." + "x" * 200 + long[201:] and long[201:].startswith(".tmp-")
        monkeypatch.setattr(runswriter.secrets, "token_hex", lambda n: "0" * 12)
        (tmp_path / ".f.tmp-000000000000").symlink_to(tmp_path / "elsewhere")
        with pytest.raises(FileExistsError) as err:
            runswriter.new_temp(fd, "f")
        assert (err.value.errno, err.value.strerror, err.value.filename) == (17, "no free temporary name", "f")
        assert not (tmp_path / "elsewhere").exists()
    finally:
        os.close(fd)


def test_a_staging_folder_is_private_beside_runs_id_and_removed_whole(tmp_path: Path) -> None:
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        name, sfd = folder.staging()
        os.close(sfd)
        staged = tmp_path / "runs" / name
        assert name.startswith(".j.extract-") and len(name) == len(".j.extract-") + 12
        assert staged.is_dir() and staged.stat().st_mode & 0o777 == 0o700
        (staged / "deep").mkdir()
        (staged / "deep" / "f").write_text("f")
        (staged / "l").symlink_to(tmp_path / "runs" / "j")
        folder.remove_staging(name)
        folder.remove_staging(name)  # gone already: nothing to do
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["j"]


def test_a_closed_folder_closes_both_descriptors_once(tmp_path: Path) -> None:
    folder = runswriter.open_folder(tmp_path / "runs" / "j")
    fds = (folder.fd, folder.parent_fd)
    folder.close()
    assert (folder.fd, folder.parent_fd) == (-1, -1)
    folder.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_check_makes_runs_id_and_refuses_a_link(tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    runswriter.check(tmp_path / "p" / "runs" / "j")
    assert (tmp_path / "p" / "runs" / "j").is_dir()
    (tmp_path / "p" / "runs" / "k").symlink_to(outside / "folder")
    with pytest.raises(runswriter.Refused) as err:
        runswriter.check(tmp_path / "p" / "runs" / "k")
    assert (err.value.where, err.value.why) == (str(tmp_path / "p" / "runs" / "k"), "a link")


def test_an_exact_reader_reads_past_a_mebibyte_and_zero_bytes_when_asked_none(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    (tmp_path / "big").write_bytes(data)
    fd = os.open(tmp_path / "big", os.O_RDONLY)
    try:
        r = nofollow.ExactReader(fd, len(data))
        assert r.read(0) == b"" and r.left == len(data)
        assert r.read() == data
    finally:
        os.close(fd)


def test_a_walk_goes_on_after_a_folder_it_cannot_read_or_open(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for rel in ("a/x.txt", "b/y.txt", "c/z.txt", "d.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    real_names, real_open = nofollow._names, nofollow.open_dir_at

    def names(dfd: int) -> list[str]:
        if os.fstat(dfd).st_ino == (tmp_path / "a").stat().st_ino:
            raise PermissionError(13, "Permission denied")
        return real_names(dfd)

    def open_dir(dfd: int, name: str, rel: str) -> int:
        if name == "b":
            raise nofollow.Refused(rel, "a link")
        if name == "c":
            raise OSError(5, "Input/output error")
        return real_open(dfd, name, rel)

    monkeypatch.setattr(nofollow, "_names", names)
    monkeypatch.setattr(nofollow, "open_dir_at", open_dir)
    assert walked(tmp_path) == [("a", "could not be read (Permission denied)"), ("b", "a link"), ("d.txt", None)]


def test_makedirs_skips_empty_and_dot_parts_and_makes_folders_0o755(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    old = os.umask(0o022)
    try:
        os.close(nofollow.makedirs_at(fd, "a//b/./c/"))
    finally:
        os.umask(old)
        os.close(fd)
    assert [(str(p.relative_to(tmp_path)), p.stat().st_mode & 0o777) for p in sorted(tmp_path.rglob("*"))] == \
        [("a", 0o755), ("a/b", 0o755), ("a/b/c", 0o755)]


def test_create_file_replaces_a_link_to_a_folder_without_looking_through_it(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "x").symlink_to(tmp_path / "folder")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.close(nofollow.create_file(fd, "x"))
    finally:
        os.close(fd)
    assert (tmp_path / "x").is_file() and not (tmp_path / "x").is_symlink()
    assert list((tmp_path / "folder").iterdir()) == []


def test_a_skipped_entry_names_its_folder_its_name_and_what_was_seen(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deep" / "deeper").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "refused").mkdir()
    (tmp_path / "unread").mkdir()
    real_open, real_names = nofollow.open_dir_at, nofollow._names
    monkeypatch.setattr(nofollow, "open_dir_at", lambda dfd, name, rel: (_ for _ in ()).throw(
        nofollow.Refused(rel, "a link")) if name == "refused" else real_open(dfd, name, rel))
    monkeypatch.setattr(nofollow, "_names", lambda dfd: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if os.fstat(dfd).st_ino == (tmp_path / "unread").stat().st_ino else real_names(dfd))
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        got = []
        for e in nofollow.walk(fd, max_depth=1):
            here = os.fstat(e.dir_fd).st_ino
            got.append((e.rel, e.name, e.why, None if e.st is None else stat.S_IFMT(e.st.st_mode), here))
    finally:
        os.close(fd)
    top, deep = tmp_path.stat().st_ino, (tmp_path / "deep").stat().st_ino
    assert got == [
        ("deep/deeper", "deeper", "more than 1 folders deep", stat.S_IFDIR, deep),
        ("fifo", "fifo", "a FIFO", stat.S_IFIFO, top),
        ("refused", "refused", "a link", None, top),
        ("unread", "unread", "could not be read (Permission denied)", None, top),
    ]


def _open_fds() -> set[str]:
    """The descriptors this process holds (Linux: /proc/self/fd)."""
    return set(os.listdir("/proc/self/fd"))


def test_a_walk_left_partway_closes_its_folders_and_not_the_callers(tmp_path: Path) -> None:
    """A caller may stop a walk inside a folder (the output capture at its cap, the snapshot of a
    working folder past MAX_FILES): closing the walk then closes every folder it opened, and only
    those; the caller's descriptor stays open for the caller to close."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.txt").write_text("x")
    (tmp_path / "a" / "b" / "y.txt").write_text("y")
    (tmp_path / "z.txt").write_text("z")
    before = _open_fds()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        walk = nofollow.walk(fd)
        assert next(walk).rel == "a/b/x.txt"  # two folders below the caller's are open now
        walk.close()
        os.fstat(fd)  # still the caller's
    finally:
        os.close(fd)
    assert _open_fds() == before


def test_a_walk_goes_on_after_an_entry_gone_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry removed between the folder's listing and its look (a job still writing) is passed
    over, and the entries after it in that folder are walked all the same. The race is played by
    removing the file just before the walk looks at it."""
    for rel in ("a.txt", "b.txt", "c.txt", "sub/b.txt", "sub/d.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    real_stat = os.stat

    def stat_after_removal(path, *args, dir_fd=None, **kw):
        if dir_fd is not None and path == "b.txt":
            os.unlink(path, dir_fd=dir_fd)
        return real_stat(path, *args, dir_fd=dir_fd, **kw)

    monkeypatch.setattr(os, "stat", stat_after_removal)
    assert walked(tmp_path) == [("a.txt", None), ("c.txt", None), ("sub/d.txt", None)]
