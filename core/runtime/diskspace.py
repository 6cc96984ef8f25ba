"""A full disk, said the same way everywhere: "disk full at PATH (N MB free)".

A write that fails for want of space (ENOSPC, or a quota: EDQUOT) is not a crash of gpu-router
or a lost job: it is a fact about one disk that a person can fix. The launcher (on any target)
and the engine (core.errors.DiskFull: submit, the store, the local target) both phrase it here,
so a job's reason and `gpu submit`'s error read alike, and the supervisor recognises the one
from the other by `says_disk_full`.

A small reserve file is kept where a full disk must still let gpu-router record what happened
(the attempt's exit.json, the store's last transaction): released when the disk fills, it gives
back just enough room to write that.

Standard library only: this file runs with the target's Python, beside the launcher.
"""

from __future__ import annotations

import errno
import os

DISK_FULL = "disk full at"
LOW_WATER_BYTES = 1 << 20  # less free than this, after a failure, counts as the disk being full
_MB = 1 << 20
_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes an ordinary user may still write on the disk holding `path` (or its nearest
    existing parent); None where that cannot be asked."""
    here = os.path.abspath(os.fspath(path))
    while not os.path.exists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    try:
        st = os.statvfs(here)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def disk_full_text(path: str | os.PathLike, free: int | None = None) -> str:
    """The one phrasing: "disk full at PATH (N MB free)"."""
    free = free_bytes(path) if free is None else free
    return f"{DISK_FULL} {os.fspath(path)} ({max(free or 0, 0) // _MB} MB free)"


def says_disk_full(text: str | None) -> bool:
    return bool(text) and text.startswith(DISK_FULL + " ")


def is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _ERRNOS


def is_low(path: str | os.PathLike) -> bool:
    free = free_bytes(path)
    return free is not None and free < LOW_WATER_BYTES


def first_full(paths: list[str]) -> str | None:
    """The first of `paths` whose disk is (nearly) full, or None."""
    return next((p for p in paths if p and is_low(p)), None)


def write_atomic(path: str, text: str) -> None:
    """`text` as the whole of the file at `path`, or the file as it was: written beside it,
    synced, then renamed over it. A disk that fills mid-write leaves no half of a record (the
    attempt's exit.json, its phase, an environment's ready marker) for a reader to misread."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def reserve(path: str | os.PathLike, size: int) -> bool:
    """Keep `size` bytes at `path` for a moment when the disk is full; False if no room now."""
    path = os.fspath(path)
    try:
        if os.path.getsize(path) >= size:
            return True
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return False
    try:
        block = b"\0" * 65536
        written = 0
        while written < size:  # real blocks (not a sparse file): they must free real space
            written += os.write(fd, block[:min(len(block), size - written)])
        return True
    except OSError:
        os.close(fd)
        fd = -1
        release(path)
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def release(path: str | os.PathLike) -> bool:
    """Give the reserved space back; True if there was any."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
