"""Sparse files stay sparse when copied: their holes are skipped, not written out as zeros.

Standard library only (the runtime's rule: it may run on a target too). A checkpoint can be a
large sparse file (a preallocated buffer: 64 MiB long, a few blocks on disk); a plain copy
(`shutil.copyfile`, a read/write loop) writes every zero and takes its full length of disk.

- `copy_fd` copies only the data regions of the source (`SEEK_DATA`/`SEEK_HOLE`, on Linux and
  macOS; where the system or file system has no such thing, the whole file is read) and leaves
  each whole BLOCK of zeros in them as a hole too;
- `write` writes a block of bytes at a file's offset, leaving each whole BLOCK of zeros in it
  (aligned to the file's blocks) as a hole: for a stream (a tar member, a pipe) with no holes
  to ask for, such as the copy home of a remote checkpoint.

Both write into a file that is new (or empty): a hole reads as zeros only where nothing was
written before. The file keeps its full length (`ftruncate` at the end: one that ends in a
hole too). Caps count that full length (the apparent size), never the blocks on disk.
"""

from __future__ import annotations

import errno
import os

BLOCK = 4096  # a hole is made for whole blocks of zeros of this size (a file system block)
CHUNK = 1 << 20
_ZEROS = bytes(BLOCK)


def write(fd: int, data: bytes) -> None:
    """`data` at `fd`'s offset (which it advances by len(data)); each whole BLOCK of zeros,
    aligned to the file's blocks, is skipped (left a hole), and so are the zeros it ends
    with. The caller ends the file with `os.ftruncate(fd, length)` so that a file ending in
    zeros keeps its length."""
    n = len(data)
    if data.count(0) == n:  # all zeros (or nothing): one hole
        os.lseek(fd, n, os.SEEK_CUR)
        return
    start = os.lseek(fd, 0, os.SEEK_CUR)
    view = memoryview(data)
    done = look = 0  # written or skipped up to `done`; zero runs looked for from `look`
    while look < n:
        run = data.find(_ZEROS, look)  # a run of zeros long enough to hold a whole block
        if run < 0:
            break
        end = _run_end(data, run + BLOCK)
        first = -(-(start + run) // BLOCK) * BLOCK - start  # its whole blocks
        last = n if end == n else (start + end) // BLOCK * BLOCK - start
        if last > first:
            _write_all(fd, view[done:first])
            os.lseek(fd, start + last, os.SEEK_SET)
            done = last
        look = end
    _write_all(fd, view[done:])


def _run_end(data: bytes, at: int) -> int:
    """Where the zeros from `at` end (len(data) if they reach the end): looked at through
    windows that double, so a long run costs one pass and a short one a small copy."""
    width = 2 * BLOCK
    while at < len(data):
        stop = min(at + width, len(data))
        if data.count(0, at, stop) != stop - at:  # the run ends in this window
            window = data[at:stop]
            return stop - len(window.lstrip(b"\0"))
        at = stop
        width = min(width * 2, 1 << 22)
    return len(data)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def data_regions(fd: int, size: int) -> list[tuple[int, int]]:
    """[(start, end)] of the parts of the file's first `size` bytes that may hold data: all of
    it where the system cannot tell holes apart."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return [(0, size)] if size else []
    out: list[tuple[int, int]] = []
    at = 0
    try:
        while at < size:
            try:
                start = os.lseek(fd, at, seek_data)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole from here to the end
                    break
                raise
            if start >= size:
                break
            end = min(os.lseek(fd, start, seek_hole), size)
            out.append((start, end))
            at = end
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        return [(0, size)] if size else []  # this file system cannot say: read it all
    return out


def copy_fd(src: int, dst: int, size: int | None = None) -> int:
    """Copy the first `size` bytes of `src` (all of it: None) into the new file `dst`, holes
    kept; returns the length written (what counts against a cap: holes included)."""
    if size is None:
        size = os.fstat(src).st_size
    os.lseek(dst, 0, os.SEEK_SET)
    for start, end in data_regions(src, size):
        os.lseek(dst, start, os.SEEK_SET)
        at = start
        while at < end:
            block = os.pread(src, min(CHUNK, end - at), at)
            if not block:  # the file shrank while read: keep what there was
                end = at
                break
            write(dst, block)
            at += len(block)
    os.ftruncate(dst, size)
    return size


def copy_file(src: str | os.PathLike, dst: str | os.PathLike, mode: int = 0o644) -> int:
    """`src` copied to `dst` (emptied first), holes kept; returns its length. A link at
    either name is not followed (OSError)."""
    flags = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    sfd = os.open(src, os.O_RDONLY | flags)
    try:
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, mode)
        try:
            return copy_fd(sfd, dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def allocated(path: str | os.PathLike) -> int:
    """Bytes the file takes on disk (its blocks), for reports and tests."""
    return os.stat(path).st_blocks * 512
