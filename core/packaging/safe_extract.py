"""Bring a job's outputs home without trusting them: an archive from a remote host, or the
folder a local job wrote. Both go through one writer with one set of rules and caps.

A remote job, or whoever controls the remote host, decides what the outputs archive holds; a
local job decides what its out/ folder holds (it may have replaced it with a link to ~ or /etc,
or left a 100 GB sparse file in it). `tarfile.extractall` or `shutil.copytree` would follow a
link out of the folder, write through `..`, create devices, and fill the disk. Here:

- only regular files and folders are created; links (symbolic and hard), devices, FIFOs and
  anything else are left out, each with a note; a local folder is read through
  core/runtime/nofollow.py (folder descriptors opened with O_NOFOLLOW from the job's folder
  down, the out/ folder itself included), so no link is followed, no FIFO or device is
  opened, and a file hard-linked in from another owner is refused;
- absolute names, `..` parts and names that leave the folder are rejected;
- the destination is opened by core/packaging/runswriter.py, the one writer under a
  project's runs/: `runs/` and `runs/<id>/` are opened without following a link and must be
  plain folders of this user (else `runswriter.Refused` is raised before anything is
  written, and the engine keeps the outputs at home); everything is written through folder
  descriptors into a fresh staging folder (mkdir, random name) beside the destination, with
  O_EXCL|O_NOFOLLOW, then renamed into place within the descriptors (a link in the
  destination is replaced, never followed);
- one byte cap (counted on the bytes actually written, not on a header's or a sparse file's
  word) and one file-count cap (`OutputCaps`, the same for every target: `max_output_bytes`,
  `max_output_files` in a target's options) stop a bomb; the file being written when a cap is
  hit is removed; runs of zeros are written as holes, so a sparse file stays sparse;
- a full disk at home stops the copy with "disk full at PATH (N MB free)";
- names are masked: inside `masked_names(mask)` (the engine wraps every bringing home of a job
  that holds secrets in it, core/secrets/names.py) every file and folder name, and every note,
  has each form of the job's secret values replaced by `[secret]` before anything is created,
  so no secret is ever written into a name at home, not even in the staging folder; a file's
  whole path is masked (a value with a '/' spans folders), and folders are made only as the
  parents of masked paths. Two names that mask alike keep the first file, with a note.

The result is a list of notes for the job's record; nothing is raised for a hostile member.
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

from core.packaging import runswriter
from core.runtime import nofollow, sparsefile
from core.runtime.diskspace import disk_full_text, is_enospc

MAX_BYTES = 20 * 1024**3  # 20 GiB of outputs
MAX_FILES = 100_000
MAX_NOTES = 50
MAX_DEPTH = 128  # folders deeper than this in a local out/ stay behind
_CHUNK = 1 << 20
_BROKEN = (tarfile.TarError, EOFError, zlib.error, OSError)  # a damaged or cut-off archive
_OPEN = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class OutputCaps:
    """How much of a job's outputs comes home: the one definition every target uses."""

    max_bytes: int = MAX_BYTES
    max_files: int = MAX_FILES

    @classmethod
    def from_options(cls, options: dict | None) -> "OutputCaps":
        """A target's caps: `max_output_bytes` and `max_output_files` (checked when the user
        config is read), else the defaults."""
        o = options or {}
        return cls(int(o.get("max_output_bytes") or MAX_BYTES), int(o.get("max_output_files") or MAX_FILES))


_DRIVE = re.compile(r"[A-Za-z]:([/\\]|\Z)")


def clean_name(name: str) -> str | None:
    """The member's relative path, or None when it is absolute (a Windows drive path too:
    `C:/x`, `C:\\x`) or leaves the folder. Any other ':' is a plain character of a name here
    (`0:1.txt`, `step:10.ckpt` come home)."""
    if not name or "\0" in name or name.startswith(("/", "\\")) or _DRIVE.match(name):
        return None
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/".join(parts)


_NAME_MASK: ContextVar[Callable[[str], str] | None] = ContextVar("gpu_router_name_mask", default=None)


@contextmanager
def masked_names(mask: Callable[[str], str] | None) -> Iterator[None]:
    """Every staging made inside (in this task, and in threads `asyncio.to_thread` starts from
    it) writes names through `mask`: the one rule for what a name at home may hold."""
    token = _NAME_MASK.set(mask)
    try:
        yield
    finally:
        _NAME_MASK.reset(token)


def current_name_mask() -> Callable[[str], str] | None:
    return _NAME_MASK.get()


class _Staging:
    """The one writer: a private folder beside `dest`, the caps, the notes; merged at the end.
    Every name (file, folder, note) passes the mask in force when it was made. `dest` is
    opened (and checked) by runswriter before anything is made: runswriter.Refused leaves here
    with nothing written."""

    def __init__(self, dest: Path, caps: OutputCaps) -> None:
        self.dest = Path(dest)
        self.caps = caps
        mask = _NAME_MASK.get()
        self.masking = mask is not None
        self.shown: Callable[[str], str] = mask or (lambda name: name)
        self.folder = runswriter.open_folder(self.dest)
        try:
            self.root_name, self.root = self.folder.staging()
        except BaseException:
            self.folder.close()
            raise
        self.notes: list[str] = []
        self.dropped = 0
        self.written = 0
        self.files = 0

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(self.shown(text))
        else:
            self.dropped += 1

    def mkdir(self, rel: str) -> bool:
        if self.masking:
            # under a mask a folder is made only as the parent of a file, from the file's whole
            # masked path: a secret with a '/' in it spans folders, and a folder named after its
            # first half would show most of it (an empty folder stays behind)
            return True
        try:
            os.close(nofollow.makedirs_at(self.root, rel))
            return True
        except nofollow.Refused as exc:
            self.note(f"{rel}/: could not be created ({exc.rel}: {_in_the_way(exc.why)})")
            return False
        except OSError as exc:
            self.note(f"{rel}/: could not be created ({exc.strerror})")
            return False

    def add_file(self, rel: str, mode: int, size: int, chunks: Iterator[bytes]) -> bool:
        """Write one file; False when a cap (or a full disk) stops everything after it. An
        error reading `chunks` removes the partial file and reaches the caller."""
        rel = self.shown(rel)
        if self.files >= self.caps.max_files:
            self.note(f"stopped: more than {self.caps.max_files} files; the rest stayed behind")
            return False
        if size > self.caps.max_bytes - self.written:
            self.note(f"stopped at {rel}: the outputs would pass the {self.caps.max_bytes} byte cap; "
                      "the rest stayed behind")
            return False
        parent, _, base = rel.rpartition("/")
        folder = -1
        try:
            folder = nofollow.makedirs_at(self.root, parent) if parent else os.dup(self.root)
            fd = os.open(base, _OPEN, 0o755 if mode & 0o111 else 0o644, dir_fd=folder)
        except FileExistsError:
            _close(folder)
            self.note(f"{rel}: appears twice; the first copy was kept")
            return True
        except nofollow.Refused as exc:
            _close(folder)
            self.note(f"{rel}: could not be written ({exc.rel}: {_in_the_way(exc.why)})")
            return True
        except OSError as exc:
            _close(folder)
            if is_enospc(exc):
                self.note(f"stopped at {rel}: {disk_full_text(self.dest.parent)}")
                return False
            self.note(f"{rel}: could not be written ({exc.strerror})")
            return True
        try:
            try:
                ok = self._fill(fd, rel, chunks)
            except BaseException:
                os.close(fd)
                _unlink_at(folder, base)
                raise
            os.close(fd)
            if not ok:
                _unlink_at(folder, base)
                return False
            self.files += 1
            return True
        finally:
            os.close(folder)

    def _fill(self, fd: int, rel: str, chunks: Iterator[bytes]) -> bool:
        length = 0
        for block in chunks:
            if self.written + len(block) > self.caps.max_bytes:
                self.note(f"stopped at {rel}: the outputs pass the {self.caps.max_bytes} byte cap; "
                          "the rest stayed behind")
                return False
            try:
                sparsefile.write(fd, block)  # each whole block of zeros left a hole
            except OSError as exc:
                if is_enospc(exc):
                    self.note(f"stopped at {rel}: {disk_full_text(self.dest.parent)}")
                    return False
                raise
            self.written += len(block)
            length += len(block)
        os.ftruncate(fd, length)  # a file that ends in a hole gets its length
        return True

    def finish(self) -> list[str]:
        if self.dropped:
            self.notes.append(f"... and {self.dropped} more entries left out")
        self.folder.merge(self.root)
        return self.notes

    def close(self) -> None:
        os.close(self.root)
        try:
            self.folder.remove_staging(self.root_name)
        finally:
            self.folder.close()


def safe_extract(archive: Path, dest: Path, *, max_bytes: int = MAX_BYTES,
                 max_files: int = MAX_FILES, caps: OutputCaps | None = None) -> list[str]:
    """Extract `archive` into `dest` (created if needed); return notes on what was left out."""
    caps = caps or OutputCaps(max_bytes, max_files)
    try:
        tar = tarfile.open(archive, "r:*")
    except _BROKEN as exc:
        return [f"outputs archive could not be read: {exc}"]
    with tar:
        sink = _Staging(dest, caps)
        try:
            _extract_members(tar, sink)
            return sink.finish()
        finally:
            sink.close()


def write_files(dest: Path, files: Iterable[tuple[str, int, Iterator[bytes]]], *,
                caps: OutputCaps = OutputCaps()) -> list[str]:
    """Write files named by someone else's listing (a Modal volume's) into `dest` by the rules
    above: each `(name, size, chunks)` is written from its chunks (read only when its turn
    comes) unless its name is absolute or leaves the folder; the caps stop the rest. An error
    reading a file's chunks removes everything staged and reaches the caller. Returns notes."""
    sink = _Staging(dest, caps)
    try:
        for name, size, chunks in files:
            rel = clean_name(name)
            if not rel:
                sink.note(f"{name!r}: an absolute path or one that leaves the folder, not brought home")
                continue
            if not sink.add_file(rel, 0o644, size, chunks):
                break
        return sink.finish()
    finally:
        sink.close()


def _extract_members(tar: tarfile.TarFile, sink: _Staging) -> None:
    entries = 0
    limit = sink.caps.max_files * 2 + 1000
    while True:
        try:
            member = tar.next()
        except _BROKEN as exc:
            sink.note(f"outputs archive is damaged after {sink.files} files: {exc}")
            return
        if member is None:
            return
        entries += 1
        if entries > limit:
            sink.note(f"stopped: the archive has more than {limit} entries")
            return
        rel = clean_name(member.name)
        if rel is None:
            sink.note(f"{member.name!r}: an absolute path or one that leaves the folder, not brought home")
            continue
        if not rel:
            continue
        if member.isdir():
            sink.mkdir(rel)
            continue
        if not member.isreg():
            what = ("a link" if member.issym() or member.islnk() else
                    "a device" if member.ischr() or member.isblk() else
                    "a FIFO" if member.isfifo() else "not a regular file")
            sink.note(f"{rel}: {what}, not brought home")
            continue
        try:
            if not sink.add_file(rel, member.mode, member.size, _chunks(tar.extractfile(member))):
                return
        except _BROKEN as exc:
            sink.note(f"outputs archive is damaged at {rel}: {exc}")
            return


def _chunks(src) -> Iterator[bytes]:
    while src is not None:
        block = src.read(_CHUNK)
        if not block:
            return
        yield block


def safe_copy_tree(src: Path, dest: Path, *, caps: OutputCaps = OutputCaps(),
                   only: Iterable[str] | None = None) -> list[str]:
    """Copy the folder a job wrote into `dest` by the rules above (no link followed, the folder
    itself included; caps); `only` limits it to those top-level names. Returns notes. `src`'s
    parent is the job's folder, made by gpu-router; everything from `src` down is read through
    core/runtime/nofollow.py, the one reader of a job's folders."""
    sink = _Staging(dest, caps)
    try:
        src = Path(src)
        try:
            top = nofollow.open_root(str(src.parent), src.name)
        except FileNotFoundError:
            return sink.finish()
        except nofollow.Refused as exc:
            sink.note(f"{src.name}/: {exc.why}, not brought home")
            return sink.finish()
        except OSError as exc:
            sink.note(f"{src.name}/: not a readable folder ({exc.strerror}), not brought home")
            return sink.finish()
        try:
            _copy_from(top, sink, set(only) if only is not None else None)
        finally:
            os.close(top)
        return sink.finish()
    finally:
        sink.close()


def _copy_from(top: int, sink: _Staging, only: set[str] | None) -> None:
    """Every regular file under `top` (or under the `only` names in it), through nofollow."""
    own = nofollow.owner(top)
    for entry in _entries(top, only, sink):
        if entry.why is not None:
            sink.note(f"{entry.rel}: {entry.why}, not brought home")
            continue
        if not _copy_file(entry.dir_fd, entry.name, entry.rel, own, sink):
            return


def _entries(top: int, only: set[str] | None, sink: _Staging) -> Iterator[nofollow.Entry]:
    if only is None:
        yield from nofollow.walk(top, max_depth=MAX_DEPTH)
        return
    for name in sorted(only):
        try:
            st = os.stat(name, dir_fd=top, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            yield nofollow.Entry(name, top, name, st, None if stat.S_ISREG(st.st_mode) else nofollow.kind(st.st_mode))
            continue
        try:
            fd = nofollow.open_dir_at(top, name, name)
        except nofollow.Refused as exc:
            yield nofollow.Entry(name, top, name, None, exc.why)
            continue
        except OSError:
            continue
        try:
            if sink.mkdir(name):
                yield from nofollow.walk(fd, name, max_depth=MAX_DEPTH)
        finally:
            os.close(fd)


def _copy_file(dfd: int, name: str, rel: str, own: int, sink: _Staging) -> bool:
    try:
        fd, st = nofollow.open_file(dfd, name, rel, own)
    except nofollow.Refused as exc:  # a link swapped in after the lstat, a foreign hard link
        sink.note(f"{rel}: {exc.why}, not brought home")
        return True
    except OSError as exc:
        sink.note(f"{rel}: could not be read ({exc.strerror}), not brought home")
        return True
    try:
        try:
            return sink.add_file(rel, st.st_mode, st.st_size, _fd_chunks(fd, st.st_size))
        except OSError as exc:
            sink.note(f"{rel}: could not be read ({exc.strerror}), not brought home")
            return True
    finally:
        os.close(fd)


def _fd_chunks(fd: int, size: int) -> Iterator[bytes]:
    """The file's bytes, no more than the size it had when opened (a file still growing)."""
    left = size
    while left > 0:
        block = os.read(fd, min(_CHUNK, left))
        if not block:
            return
        left -= len(block)
        yield block


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _unlink_at(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _in_the_way(why: str) -> str:
    """nofollow's word for what stands where a folder goes, as a note says it."""
    return "a file is in the way" if why == "a file, not a folder" else f"{why} is in the way"
