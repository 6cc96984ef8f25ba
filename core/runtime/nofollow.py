"""Read a job's folder without following a link: the one way gpu-router opens what a job wrote.

A job decides what its folders hold up to the moment gpu-router reads them. It may replace its
working folder, a folder on the way (`outputs/`), its `code/` or a file with a symbolic link to
`/` or to the person's home; swap a folder for a link between a check and an open; hard-link a
file from elsewhere; or leave a FIFO, which blocks whoever opens it. Everything that reads a
job's folder goes through here: `gpu fetch` (workdir.pack), the declared outputs
(workdir.collect), the local target's out/ (packaging.safe_extract.safe_copy_tree) and the
checkpoint listing and packing (ckptscan). The rules:

- a walk starts at a folder gpu-router made and the job cannot replace (the job's own folder,
  `jobs/<id>/`); every part below it is opened relative to its parent's descriptor with
  O_NOFOLLOW (O_DIRECTORY for folders). There is no check-then-open gap: a link swapped in at
  any moment makes that open fail (ELOOP or ENOTDIR) instead of leading anywhere;
- a file is opened only after lstat says it is regular, with O_NONBLOCK (a FIFO swapped in
  cannot block) and O_NOFOLLOW; fstat must then say regular, same inode;
- a hard link is not followed *out*: a regular file with more than one link whose owner is not
  the owner of the job's folder is refused. Why not every file with st_nlink > 1: a link
  gives the job nothing it could not read itself (Linux's protected_hardlinks lets a process
  link only a file it owns or may read and write; link(2) never crosses a mount, so a
  sandboxed job can link only inside its own folder), so such a file holds what the job could
  have copied, and jobs legitimately hard-link their own files (a `latest` checkpoint beside
  `step-100`, `cp -l`). What a link *can* add is reach where the reader has more rights than
  the job (a host with protected_hardlinks off, a job mapped to another user): then the file
  belongs to someone else, and that is what is refused;
- devices, FIFOs and sockets are never opened: they are named as skipped.

`cost(st)` is what a file counts against a byte cap: its length or its allocated blocks,
whichever is larger, so a 1 TB sparse file counts 1 TB (the bytes read, hashed, sent and
written by anything that is not sparse-aware).

Standard library only: this file runs with the target's Python beside workdir.py and
ckptscan.py (os.open with dir_fd works on Linux and macOS).
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, NamedTuple

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW
FILE_FLAGS = os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW
MAX_DEPTH = 128


class Refused(Exception):
    """`rel` is not a plain folder or file of the job's folder (a link, a device, a FIFO, a
    file hard-linked from someone else's); `why` says which, in words a person reads."""

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(f"{rel}: {why}")
        self.rel = rel
        self.why = why


class Entry(NamedTuple):
    """One thing met by `walk`: a regular file (`dir_fd`, `name` open it with `open_file`;
    valid only until the walk moves on) or something skipped (`why`)."""

    rel: str
    dir_fd: int
    name: str
    st: os.stat_result | None
    why: str | None


def kind(mode: int) -> str:
    """What an entry is where something else was wanted (a plain file, or a folder on the way),
    as a note names it: a regular file is named only where a folder was wanted."""
    if stat.S_ISREG(mode):
        return "a file, not a folder"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def cost(st: os.stat_result) -> int:
    """Bytes a file counts against a cap: its length, or its blocks where they are more."""
    return max(st.st_size, getattr(st, "st_blocks", 0) * 512)


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def open_dir_at(dir_fd: int, name: str, rel: str) -> int:
    """The folder `name` inside `dir_fd`, never through a link. FileNotFoundError when it is
    not there; Refused when it is a link or not a folder (also one swapped in just now)."""
    if name in ("", ".", "..") or "/" in name:
        raise Refused(rel, "not a plain name")
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            why = kind(st.st_mode)
        except OSError:
            why = exc.strerror or "could not be opened"
        raise Refused(rel, why if why != "a folder" else (exc.strerror or "could not be opened")) from None


def open_root(base: str, inner: str = "") -> int:
    """A descriptor of `base/inner`: `base` opened as it is (a folder gpu-router made, which the
    job cannot replace), each part of `inner` without following a link. FileNotFoundError when
    a part is missing; Refused (naming the part, relative to `base`) when one is a link."""
    fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    return _descend(fd, [p for p in inner.split("/") if p not in ("", ".")])


def _descend(fd: int, parts: list[str], make: bool = False) -> int:
    """From the open folder `fd` (taken over: closed on the way) down through `parts`, each
    opened without following a link (made first where missing, with `make`); the last
    folder's descriptor."""
    rel = ""
    try:
        for part in parts:
            rel = _join(rel, part)
            if make:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = open_dir_at(fd, part, rel)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def owner(fd: int) -> int:
    """The owner of an open folder: files hard-linked in from another owner are refused."""
    return os.fstat(fd).st_uid


def file_problem(st: os.stat_result, own: int | None) -> str | None:
    """Why a file is not read (not regular; hard-linked from another owner), or None."""
    if not stat.S_ISREG(st.st_mode):
        return kind(st.st_mode)
    if st.st_nlink > 1 and own is not None and st.st_uid != own:
        return f"a hard link to a file of another owner (uid {st.st_uid})"
    return None


def open_file(dir_fd: int, name: str, rel: str, own: int | None) -> tuple[int, os.stat_result]:
    """A regular file inside `dir_fd`, read-only, never through a link and never a FIFO or a
    device (those are not opened at all). Raises Refused, or OSError when it vanished."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    problem = file_problem(st, own)
    if problem:
        raise Refused(rel, problem)
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a link swapped in after the lstat
        raise Refused(rel, f"changed while it was read ({exc.strerror})") from None
    fst = os.fstat(fd)
    problem = file_problem(fst, own)
    if problem is None and (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
        problem = "changed while it was read"
    if problem:
        os.close(fd)
        raise Refused(rel, problem)
    return fd, fst


def parent_of(top_fd: int, rel: str) -> tuple[int, str]:
    """The folder holding `rel` (opened part by part from `top_fd`, never through a link; the
    caller closes it) and the last part's name. FileNotFoundError or Refused on the way."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise Refused(rel, "not a path inside the folder")
    return _descend(os.dup(top_fd), parts[:-1]), parts[-1]


def walk(top_fd: int, prefix: str = "", *, skip_names: frozenset[str] = frozenset(),
         skip_ids: frozenset[tuple[int, int]] = frozenset(),
         max_depth: int = MAX_DEPTH) -> Iterator[Entry]:
    """Every regular file under the open folder `top_fd` (names relative to it, after `prefix`),
    depth first in name order, through folder descriptors only; what is not a plain folder or
    file comes as a skipped entry. Folders named in `skip_names`, or whose (st_dev, st_ino)
    is in `skip_ids`, are not entered. `top_fd` stays open (the caller's)."""
    stack: list[tuple[int, str, Iterator[str]]] = [(top_fd, prefix, iter(_names(top_fd)))]
    try:
        while stack:
            dfd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                if dfd != top_fd:
                    os.close(dfd)
                stack.pop()
                continue
            child = _join(rel, name)
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISDIR(st.st_mode):
                if name in skip_names or (st.st_dev, st.st_ino) in skip_ids:
                    continue
                if len(stack) > max_depth:
                    yield Entry(child, dfd, name, st, f"more than {max_depth} folders deep")
                    continue
                try:
                    fd = open_dir_at(dfd, name, child)
                except Refused as exc:
                    yield Entry(child, dfd, name, None, exc.why)
                    continue
                except OSError:
                    continue
                try:
                    names_in = iter(_names(fd))
                except OSError as exc:
                    os.close(fd)
                    yield Entry(child, dfd, name, None, f"could not be read ({exc.strerror})")
                    continue
                stack.append((fd, child, names_in))
            elif stat.S_ISREG(st.st_mode):
                yield Entry(child, dfd, name, st, None)
            else:
                yield Entry(child, dfd, name, st, kind(st.st_mode))
    finally:
        for dfd, _, _ in stack:
            if dfd != top_fd:
                os.close(dfd)


def _names(dfd: int) -> list[str]:
    with os.scandir(dfd) as it:
        return sorted(e.name for e in it)


def makedirs_at(top_fd: int, rel: str) -> int:
    """The folder `rel` under `top_fd`, created part by part where missing, never through a
    link (a link or file in the way raises Refused). The caller closes the descriptor."""
    return _descend(os.dup(top_fd), [p for p in rel.split("/") if p not in ("", ".")], make=True)


def create_file(dir_fd: int, name: str, mode: int = 0o644) -> int:
    """A new file `name` in `dir_fd` for writing: whatever had that name (a link, a hard link
    to someone's file, a FIFO) is removed first, so the write lands in a fresh file only."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise Refused(name, "a folder is in the way")
        os.unlink(name, dir_fd=dir_fd)
    return os.open(name, WRITE_FLAGS, mode, dir_fd=dir_fd)


class ExactReader:
    """A file descriptor read as exactly `size` bytes (cut when it grew, zero-padded when it
    shrank after fstat), so tarfile.addfile never writes a broken member."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.left = size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if n is None or n < 0 else min(n, self.left)
        parts: list[bytes] = []
        got = 0
        while got < want:
            block = os.read(self.fd, min(want - got, 1 << 20))
            if not block:
                parts.append(b"\0" * (want - got))
                break
            parts.append(block)
            got += len(block)
        self.left -= want
        return b"".join(parts)
