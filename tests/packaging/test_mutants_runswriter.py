"""The writer under runs/ (core/packaging/runswriter.py), the parts its other tests left open:
the survivors of `python bench/mutation.py --module runswriter` (issue 40). Each test names the
part of the rule it holds:

- a refusal names where and why, in its text too; a folder that vanishes between its making
  and its opening, or keeps coming back where a file goes, is refused as such, and the
  temporary file of the write is gone;
- what the writer makes has the modes it asks for (folders 0o755, files 0o644, a copied file
  its own mode), whatever the umask lets through;
- a random name already taken is skipped, and when every one is, the error says so;
- a copy across disks that fails leaves no half-made folder; a hard link to another owner's
  file in it is refused, naming it;
- a merge into a folder swapped for a link replaces the link (never writes through it) and
  keeps no descriptor open; every entry after a merged folder arrives too;
- missing parents of the project, of runs/ and of a folder moved home are made.

Quick: real folders, links and renames; a race is played by wrapping the call it falls between.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

import pytest

from core.packaging import runswriter
from core.runtime import nofollow
from tests.conftest import rename_across_disks


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def no_umask() -> Iterator[None]:
    """umask 0: a mode the writer asks for is the mode the file gets, all of it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)



def _merge(dest: Path, staged: Path) -> None:
    """Merge the staged folder into `dest` as the runs writer does (the staged side by descriptor)."""
    sfd = os.open(staged, os.O_RDONLY)
    try:
        with runswriter.open_folder(dest, make=False) as folder:
            folder.merge(sfd)
    finally:
        os.close(sfd)

def test_a_refusal_names_where_and_why_in_its_text_too(tmp_path: Path) -> None:
    """A descriptor that is not a folder (what O_DIRECTORY alone would not catch where a system
    lacks it) is refused by the check itself, naming the place and what it is."""
    (tmp_path / "f").write_text("x")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        with pytest.raises(runswriter.Refused) as err:
            runswriter._check_dir(fd, "proj/runs")
    finally:
        os.close(fd)
    assert (err.value.where, err.value.why) == ("proj/runs", "not a folder")
    assert str(err.value) == "proj/runs: not a folder"


def test_runs_removed_between_its_making_and_its_opening_is_refused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent removes runs/ right after the writer made it: refused, saying it vanished."""
    real_mkdir = os.mkdir

    def made_then_removed(name, mode=0o777, *, dir_fd=None):
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(name, dir_fd=dir_fd)

    monkeypatch.setattr(runswriter.os, "mkdir", made_then_removed)
    with pytest.raises(runswriter.Refused) as err:
        runswriter.open_folder(tmp_path / "runs" / "j")
    assert (err.value.where, err.value.why) == (str(tmp_path / "runs"), "vanished while it was opened")


def test_a_folder_that_keeps_coming_back_is_refused_and_no_temporary_file_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file goes where a folder is: the folder is removed, the agent puts it back before the
    rename, and the write is refused naming the file; its temporary file is removed."""
    (tmp_path / "runs" / "j" / "out").mkdir(parents=True)
    real_rmtree = shutil.rmtree

    def removed_and_put_back(path, *args, **kwargs):
        real_rmtree(path, *args, **kwargs)
        os.mkdir(tmp_path / "runs" / "j" / "out")
        (tmp_path / "runs" / "j" / "out" / "planted").write_text("p")

    monkeypatch.setattr(runswriter.shutil, "rmtree", removed_and_put_back)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        with pytest.raises(runswriter.Refused) as err:
            folder.write("out", b"the job's output")
    assert (err.value.where, err.value.why) == (f"{tmp_path / 'runs' / 'j'}/out", "a folder is in the way")
    assert sorted(p.name for p in (tmp_path / "runs" / "j").iterdir()) == ["out"]
    assert (tmp_path / "runs" / "j" / "out" / "planted").read_text() == "p"


def test_a_failed_rename_that_is_not_a_folder_in_the_way_is_not_called_one(tmp_path: Path) -> None:
    """The temporary file removed under the writer (its rename finds nothing): the OS's error,
    not a refusal whose reason would be false."""
    dest = tmp_path / "runs" / "j"

    def blocks() -> Iterator[bytes]:
        yield b"data"
        for p in dest.iterdir():  # the agent removes the temporary file before the rename
            if ".tmp-" in p.name:
                p.unlink()

    with runswriter.open_folder(dest) as folder:
        with pytest.raises(FileNotFoundError):
            folder.write("out.txt", blocks())
    assert list(dest.iterdir()) == []


def test_what_the_writer_makes_has_the_modes_it_asks_for(tmp_path: Path, no_umask: None) -> None:
    """With nothing masked: runs/ and runs/<id>/ 0o755, a written file and runs/.gitignore 0o644
    (no one else may write into what the job left in the project)."""
    dest = tmp_path / "runs" / "j"
    runswriter.write_file(dest, "job.log", b"L")
    runswriter.ensure_ignored(tmp_path / "runs", "*\n")
    assert (_mode(tmp_path / "runs"), _mode(dest)) == (0o755, 0o755)
    assert (_mode(dest / "job.log"), _mode(tmp_path / "runs" / ".gitignore")) == (0o644, 0o644)


def test_a_copy_across_disks_keeps_each_files_mode_and_makes_its_folder_0o755(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_umask: None) -> None:
    rename_across_disks(monkeypatch)
    src = tmp_path / "home" / "ckpt"
    src.mkdir(parents=True)
    os.chmod(src, 0o700)
    (src / "private.pt").write_bytes(b"p")
    os.chmod(src / "private.pt", 0o600)
    (src / "shared.pt").write_bytes(b"s")
    os.chmod(src / "shared.pt", 0o640)
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        folder.move_in(src, "checkpoint")
    got = dest / "checkpoint"
    assert _mode(got) == 0o755
    assert (_mode(got / "private.pt"), _mode(got / "shared.pt")) == (0o600, 0o640)


def test_a_file_without_any_mode_bit_is_copied_readable(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, no_umask: None) -> None:
    """Mode 0 (only root reads it) is copied as 0o644, not as a file no one can open."""
    if os.geteuid() != 0:
        pytest.skip("reading a file of mode 0 needs root")
    rename_across_disks(monkeypatch)
    src = tmp_path / "home" / "ckpt"
    src.mkdir(parents=True)
    (src / "w.pt").write_bytes(b"w")
    os.chmod(src / "w.pt", 0)
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        folder.move_in(src, "checkpoint")
    assert _mode(dest / "checkpoint" / "w.pt") == 0o644


def test_a_hard_link_to_another_owners_file_is_not_copied_across_disks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint folder holding a hard link to someone else's file: the copy is refused
    naming it and the owner, and nothing is left half-made in runs/<id>/."""
    if os.geteuid() != 0:
        pytest.skip("a file of another owner needs root")
    rename_across_disks(monkeypatch)
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("someone else's")
    os.chown(theirs, 4321, 4321)
    src = tmp_path / "home" / "ckpt"
    (src / "sub").mkdir(parents=True)
    os.link(theirs, src / "sub" / "leak.pt")
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        with pytest.raises(nofollow.Refused) as err:
            folder.move_in(src, "checkpoint")
    assert (err.value.rel, err.value.why) == ("sub/leak.pt", "a hard link to a file of another owner (uid 4321)")
    assert list(dest.iterdir()) == [] and (src / "sub" / "leak.pt").exists()


def test_a_copy_across_disks_that_fails_leaves_no_half_made_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills during the copy: the error is the disk's, the half-made folder is removed,
    and the checkpoint is still whole at home."""
    rename_across_disks(monkeypatch)

    def disk_full(rfd: int, wfd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runswriter.sparsefile, "copy_fd", disk_full)
    src = tmp_path / "home" / "ckpt"
    src.mkdir(parents=True)
    (src / "model.pt").write_bytes(b"weights")
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        with pytest.raises(OSError) as err:
            folder.move_in(src, "checkpoint")
    assert err.value.errno == errno.ENOSPC
    assert list(dest.iterdir()) == []
    assert (src / "model.pt").read_bytes() == b"weights"


def test_a_name_already_there_is_said_as_such(tmp_path: Path) -> None:
    src = tmp_path / "home" / "ckpt"
    src.mkdir(parents=True)
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        (tmp_path / "runs" / "j" / "checkpoint").mkdir()
        with pytest.raises(FileExistsError) as err:
            folder.move_in(src, "checkpoint")
    assert (err.value.errno, err.value.strerror, err.value.filename) == (errno.EEXIST, "already there", "checkpoint")


def _names(*hexes: str) -> Iterator[str]:
    yield from hexes
    while True:
        yield hexes[-1]


def test_a_staging_name_already_taken_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent planted the first random name (a folder, or a link): the next one is used."""
    runs = tmp_path / "runs"
    (runs / ".j.extract-aaaaaaaaaaaa").mkdir(parents=True)
    names = _names("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    monkeypatch.setattr(runswriter.secrets, "token_hex", lambda n: next(names))
    with runswriter.open_folder(runs / "j") as folder:
        name, fd = folder.staging()
        os.close(fd)
    assert name == ".j.extract-bbbbbbbbbbbb" and (runs / name).is_dir() and _mode(runs / name) == 0o700


def test_when_every_staging_name_is_taken_the_error_says_so(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    (runs / ".j.extract-aaaaaaaaaaaa").mkdir(parents=True)
    monkeypatch.setattr(runswriter.secrets, "token_hex", lambda n: "aaaaaaaaaaaa")
    with runswriter.open_folder(runs / "j") as folder:
        with pytest.raises(FileExistsError) as err:
            folder.staging()
    assert (err.value.errno, err.value.strerror, err.value.filename) == (errno.EEXIST, "no free staging name", str(runs))


def test_a_temporary_name_already_taken_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link planted at the first temporary name is neither written through nor replaced."""
    dest = tmp_path / "runs" / "j"
    dest.mkdir(parents=True)
    (tmp_path / "victim").write_text("the person's")
    os.symlink(tmp_path / "victim", dest / ".job.json.tmp-aaaaaaaaaaaa")
    names = _names("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    monkeypatch.setattr(runswriter.secrets, "token_hex", lambda n: next(names))
    runswriter.write_file(dest, "job.json", b"{}")
    assert (dest / "job.json").read_bytes() == b"{}"
    assert (tmp_path / "victim").read_text() == "the person's"
    assert sorted(p.name for p in dest.iterdir()) == [".job.json.tmp-aaaaaaaaaaaa", "job.json"]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_merge_into_a_folder_swapped_for_a_link_replaces_the_link(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """runs/<id>/sub/ is a folder when the merge looks and a link to the person's folder when it
    opens it: the link is replaced by the staged folder, nothing lands in what it names, and
    no descriptor is left open."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counts descriptors through /proc")
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "runs" / "j"
    (dest / "sub").mkdir(parents=True)
    staged = tmp_path / "staged"
    (staged / "sub").mkdir(parents=True)
    (staged / "sub" / "new.txt").write_text("N")
    dest_ino = os.stat(dest).st_ino
    real_open_dir_at = nofollow.open_dir_at

    def swapped(dir_fd: int, name: str, rel: str) -> int:
        if os.fstat(dir_fd).st_ino == dest_ino and name == "sub":  # the agent's move
            os.rmdir(dest / "sub")
            os.symlink(outside, dest / "sub")
        return real_open_dir_at(dir_fd, name, rel)

    monkeypatch.setattr(runswriter.nofollow, "open_dir_at", swapped)
    before = _open_fds()
    sfd = os.open(staged, os.O_RDONLY)
    with runswriter.open_folder(dest, make=False) as folder:
        folder.merge(sfd)
    os.close(sfd)
    assert list(outside.iterdir()) == []
    assert not (dest / "sub").is_symlink() and (dest / "sub" / "new.txt").read_text() == "N"
    assert _open_fds() == before


def test_every_entry_after_a_merged_folder_arrives(tmp_path: Path) -> None:
    dest = tmp_path / "runs" / "j"
    (dest / "a").mkdir(parents=True)
    (dest / "a" / "old.txt").write_text("O")
    staged = tmp_path / "staged"
    (staged / "a").mkdir(parents=True)
    (staged / "a" / "x.txt").write_text("X")
    (staged / "b.txt").write_text("B")
    (staged / "c").mkdir()
    _merge(dest, staged)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["a", "a/old.txt", "a/x.txt", "b.txt", "c"]


def test_a_dangling_link_is_there(tmp_path: Path) -> None:
    """`exists` asks about the name itself: a link whose target is gone still holds the name."""
    with runswriter.open_folder(tmp_path / "runs" / "j") as folder:
        os.symlink(tmp_path / "gone", tmp_path / "runs" / "j" / "checkpoint")
        assert folder.exists("checkpoint") is True


def test_missing_parents_are_made(tmp_path: Path) -> None:
    """A project whose own parents are not there yet, the same for runs/'s ignore file, and a
    folder moved home under folders not made yet."""
    dest = tmp_path / "a" / "b" / "project" / "runs" / "j"
    runswriter.write_file(dest, "job.log", b"L")
    assert (dest / "job.log").read_bytes() == b"L"
    runswriter.ensure_ignored(tmp_path / "c" / "d" / "project" / "runs", "*\n")
    assert (tmp_path / "c" / "d" / "project" / "runs" / ".gitignore").read_text() == "*\n"
    (dest / "checkpoint").mkdir()
    (dest / "checkpoint" / "w.pt").write_bytes(b"w")
    back = tmp_path / "home" / "e" / "f" / "ckpt"
    with runswriter.open_folder(dest, make=False) as folder:
        folder.move_out("checkpoint", back)
    assert (back / "w.pt").read_bytes() == b"w"


def test_a_link_given_as_the_folder_to_move_in_is_not_copied_across_disks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What moves into runs/<id>/ is a folder of gpu-router's own: a link there (to a folder
    elsewhere) is refused by name, and what it names is neither copied nor removed."""
    rename_across_disks(monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("s")
    (tmp_path / "home").mkdir()
    os.symlink(elsewhere, tmp_path / "home" / "ckpt")
    dest = tmp_path / "project" / "runs" / "j"
    with runswriter.open_folder(dest) as folder:
        with pytest.raises(nofollow.Refused) as err:
            folder.move_in(tmp_path / "home" / "ckpt", "checkpoint")
    assert (err.value.rel, err.value.why) == ("ckpt", "a link")
    assert list(dest.iterdir()) == [] and (elsewhere / "secret.txt").read_text() == "s"


def test_a_link_gone_before_it_is_looked_at_is_refused_with_the_opens_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runs/<id> is a link when the writer opens it (refused: never followed) and gone when it
    looks at what it was: the refusal says why the open failed, the system's own words."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "runs" / "j")
    real_stat = os.stat

    def removed_then_looked_at(path, *args, dir_fd=None, follow_symlinks=True):
        if path == "j" and dir_fd is not None:  # the agent's move, between the open and the look
            os.unlink(path, dir_fd=dir_fd)
        return real_stat(path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(runswriter.os, "stat", removed_then_looked_at)
    with pytest.raises(runswriter.Refused) as err:
        runswriter.open_folder(tmp_path / "runs" / "j", make=False)
    assert err.value.where == str(tmp_path / "runs" / "j")
    # O_NOFOLLOW | O_DIRECTORY on a link: ENOTDIR on Linux, ELOOP elsewhere
    assert err.value.why in (os.strerror(errno.ENOTDIR), os.strerror(errno.ELOOP))
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_merge_goes_on_after_a_staged_entry_gone_meanwhile(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged entry removed between the merge's listing and its look is passed over; the
    entries after it arrive all the same (the race played by removing it just before the look)."""
    dest = tmp_path / "runs" / "j"
    dest.mkdir(parents=True)
    staged = tmp_path / "staged"
    staged.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (staged / name).write_text(name)
    staged_ino = os.stat(staged).st_ino
    real_stat = os.stat

    def removed_then_looked_at(path, *args, dir_fd=None, follow_symlinks=True):
        if path == "b.txt" and dir_fd is not None and os.fstat(dir_fd).st_ino == staged_ino:
            os.unlink(path, dir_fd=dir_fd)
        return real_stat(path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(runswriter.os, "stat", removed_then_looked_at)
    _merge(dest, staged)
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "c.txt"]
