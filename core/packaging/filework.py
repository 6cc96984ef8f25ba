"""One file's work in a pack: read its head for the gate, hash it, or store it as an object.

The same module-level functions run in the packing process and in its helper processes
(core.packaging.spread), so a file is judged and stored by one piece of code whichever core
does it. Each takes (context, job) of plain values and returns plain values: that is all
that crosses to a helper and back.

Files are opened with O_NOFOLLOW|O_NONBLOCK (a link swapped in is not followed, a FIFO cannot
hang a pack), only when the opened file is the one the listing judged (st_dev, st_ino: a file
replaced, or reached through a folder swapped for a symlink, is refused), and the bytes
actually stored are judged again, so a file rewritten or swapped after the listing judged it
is not shipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import posixpath
import stat

from core.errors import UserError
from core.packaging import credentials as cred
from core.packaging.filecache import CHUNK, FileHashCache, hash_fd
from core.runtime import objstore

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

FileId = tuple[int, int]


def read_head(path: str, expect: FileId | None = None) -> bytes | None:
    """The first CONTENT_HEAD bytes of a regular file, never following a link or blocking on a
    FIFO; None when it cannot be read or is no longer the file (st_dev, st_ino) `expect`s."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if expect is not None and (st.st_dev, st.st_ino) != tuple(expect):
            return None
        chunks = []
        left = cred.CONTENT_HEAD
        while left > 0:
            block = os.read(fd, left)
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def judge(context: dict, job: list) -> list | None:
    """The gate's content verdict on one file, job = [full path, dev, ino, size]: [content
    key, reason ('' when clean)], or None when it cannot be read now (packing it then fails
    with its own clear error). Env templates are judged by the gate itself (their rule is
    by name, and not cached by content)."""
    full, dev, ino, size = job
    head = read_head(full, expect=(dev, ino))
    if head is None:
        return None
    key = cred.content_key(head, size)
    return [key, cred.content_verdict(posixpath.basename(full), head, size, key=key) or ""]


def open_file(root: str, rel: str, expect: FileId) -> tuple[int, os.stat_result]:
    """The fd and fstat of `rel` under `root`, opened as every packed file is: O_NOFOLLOW (its
    own name), O_NONBLOCK (a FIFO), and only when it is still the regular file the listing
    judged, (st_dev, st_ino) `expect`. O_NOFOLLOW guards the last component only: a folder on
    the way swapped for a symlink since the listing (`c -> ~/.aws/sso/cache`) reaches another
    file under the same name, which this identity check refuses, for every file."""
    try:
        fd = os.open(f"{root}/{rel}", OPEN_FLAGS)
    except OSError as exc:
        raise UserError(f"cannot read {rel}: {exc.strerror}",
                        fix="fix its permissions or ignore it in .gitignore") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{rel} changed into a non-regular file while packing: nothing was shipped",
                            fix="submit again")
        if (st.st_dev, st.st_ino) != tuple(expect):
            raise UserError(f"{rel} changed while packing: it is no longer the file that was listed "
                            "(replaced, or reached through a folder swapped for a symlink): "
                            "nothing was shipped", fix="submit again")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def hash_only(context: dict, job: list) -> str:
    """The sha256 of one file as the packer would read it, job = [rel, dev, ino]; stores nothing."""
    rel, dev, ino = job
    fd, _ = open_file(context["root"], rel, (dev, ino))
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


class _HashingReader:
    """Reads an fd while hashing, so a cold file is read from disk once; keeps the
    first bytes so the packer can judge what it actually packed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.h = hashlib.sha256()
        self.head = bytearray()

    def read(self, n: int = -1) -> bytes:
        block = os.read(self.fd, n if n and n > 0 else CHUNK)
        self.h.update(block)
        if len(self.head) < cred.CONTENT_HEAD:
            self.head += block[:cred.CONTENT_HEAD - len(self.head)]
        return block


def store(context: dict, job: list) -> list:
    """One file into the object store, job = [rel, dev, ino, clean key or None]: opened by
    `open_file` (O_NOFOLLOW, and only while it is the file (dev, ino) the listing judged),
    judged again on the bytes actually read, and kept under its hash. Returns
    [stat signature, hash, size, pack file or None, offset]. context = {root, objects, tmp
    (the temporary names' prefix), pack (whether objects go into pack files)}.

    With `pack` (a big pack: objstore.PACKS) the bytes are appended to this process's own
    temporary pack file, which the packer puts in place with its index once every object is
    in; else each object is a file, written under a temporary name and renamed into place (an
    object already there is replaced by the same bytes: one call, and its new mtime is the
    "used lately" that keeps gc off it). Bytes that fail the second look are taken back out.

    The clean key is the content key the listing judged clean for this file: bytes that hash
    to it need no second scan (in a helper, which has not seen the listing's verdicts).

    Few system calls per file, since a cold pack of 20,000 small files is mostly their cost:
    the temporary name is a prefix and a counter (no random names, no retries), it is created
    read-only (no chmod), and a folder is made only when the rename says it lacks one."""
    rel, dev, ino, clean_key = job
    store_dir = context["objects"]
    fd, st = open_file(context["root"], rel, (dev, ino))  # the file listed, or a clear error
    out_fd, tmp_name, start = -1, "", -1
    pack = _pack_file(store_dir, context["tmp"]) if context.get("pack") else None
    try:
        reader = _HashingReader(fd)
        if pack is not None:
            out_fd, start = pack.fd, pack.end
        else:
            out_fd, tmp_name = _open_temp(store_dir, context["tmp"])
        size = 0
        while block := reader.read(CHUNK):
            # in a pack: at the offset the index will name, wherever the file's position is
            objstore.write_all(out_fd, block, None if pack is None else start + size)
            size += len(block)
        if pack is None:
            os.close(out_fd)
        out_fd = -1
        if clean_key:
            cred.remember_verdict(clean_key, "")
        _check_packed_content(rel, bytes(reader.head), size)
        digest = reader.h.hexdigest()
        if pack is not None:
            pack.end = start + size
            return [FileHashCache.signature(st), digest, size, pack.path, start]
        final = objstore.object_path(store_dir, digest)
        try:
            os.replace(tmp_name, final)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(tmp_name, final)
        return [FileHashCache.signature(st), digest, size, None, 0]
    except BaseException:
        if pack is not None and start >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(pack.fd, start)  # the pack ends where this object began
        elif out_fd >= 0:
            os.close(out_fd)
        if tmp_name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
        raise
    finally:
        os.close(fd)


class _Pack:
    """This process's temporary pack file for one pack run (objects appended at `end`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        self.end = 0


_PACKS: dict[tuple[str, str], _Pack] = {}


def _pack_file(store_dir: str, prefix: str) -> _Pack:
    key = (store_dir, prefix)
    if key not in _PACKS:
        _PACKS[key] = _Pack(f"{store_dir}/{prefix}{os.getpid()}.pack")
    return _PACKS[key]


def close_packs(context: dict) -> None:
    """Close this process's temporary pack file of the run `context` names (if it made one):
    the packer's own, once every object is in; a helper's closes when it exits."""
    pack = _PACKS.pop((context["objects"], context["tmp"]), None)
    if pack is not None:
        os.close(pack.fd)


def _open_temp(store_dir: str, prefix: str) -> tuple[int, str]:
    """A new read-only file for one object's bytes, named by the pack's prefix (what the
    packer removes, whatever ends a pack), this process and a counter."""
    name = f"{store_dir}/{prefix}{os.getpid()}-{next(_TMP_SEQ)}"
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), name


_TMP_SEQ = itertools.count()  # next() on it is atomic under the GIL: one name per object


def _check_packed_content(rel: str, head: bytes, size: int) -> None:
    """The bytes that went into the object are judged again, so a file rewritten between
    listing and packing cannot carry a credential out; the object is then discarded."""
    reason = cred.content_verdict(posixpath.basename(rel), head, size)
    if reason:
        raise UserError(f"{rel} changed while packing and is now withheld "
                        f"({reason.removeprefix('withheld: ')}): nothing was shipped",
                        fix="submit again; the file will be left out")
