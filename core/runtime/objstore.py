"""The content-addressed object store on a machine (home, or an ssh, Slurm or PBS host): one
object per distinct file content, under OBJECTS/<hash[:2]>/<hash[2:]> (or, at home after a big
first pack, in a pack file: see PACKS), put in place only once checked against its hash, and
copied out privately for the code folders built from it (codetree.py).

It is a module of its own because more than the code-folder build reads and writes it: the
engine's packing and sending (core/packaging: objects, bundle, filework, wheelhouse), gc
(cachescan.py, which sweeps it under `sweep_lock`), and the hosts' `missing` and `receive`
(run through codetree.py's command line). Standard library only, like all of the runtime: on
a host it is executed beside codetree.py (imported as a sibling, or registered before it when
codetree.py is sent as source: core/providers/runtimeship.py RUNTIME_NEEDS).

Copies, not hard links: every target runs a job as the same user that owns the object store,
and that user may chmod and rewrite any file it owns, so a hard-linked code folder would let one
job rewrite the files of every other job (and of every later submit) through the shared object.
A copy is private to its job. Where the file system can share blocks copy-on-write (a reflink:
btrfs, XFS, overlay on those) the copy is one ioctl and takes no room until the job writes.

`receive` trusts nothing it reads: a member is an object only when its name is a sha256 and its
bytes hash to that name, and it is renamed into place only once checked, so a broken or hostile
stream leaves no object that lies about its content.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import stat
import struct
import tarfile
import tempfile
import time

HASH = re.compile(r"[0-9a-f]{64}")
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write
CHUNK = 1 << 20


def object_path(objects: str, digest: str) -> str:
    return os.path.join(objects, digest[:2], digest[2:])


# -- packs: many objects in one file --------------------------------------------------------
#
# A first pack of a 20,000-file project at home would make 20,000 files, and making a file
# costs this VM's ext4 50 to 100 us of kernel time: more than a whole `tar | gzip -1` of the
# tree. So a big pack goes into pack files instead, OBJECTS/packs/<id>.pack (the objects' bytes
# one after another) with <id>.idx beside it (magic, then per object its sha256, offset and
# size): written whole, the pack renamed into place first and its index last, so an index
# that exists names bytes that are there. Objects are found in packs first, then loose; hosts
# receive objects loose (receive) and never hold packs. gc (cachescan.py) removes a pack once
# no manifest names its objects, and turns a mostly dead one's live objects into loose files.
PACKS = "packs"
_IDX_MAGIC = b"GRIDX1\n"
_IDX_ROW = struct.Struct("<32sQQ")
_INDEXES: dict[str, tuple[frozenset, dict]] = {}  # objects dir -> (index names, table), per process


@contextlib.contextmanager
def sweep_lock(objects: str, exclusive: bool):
    """Held shared by a pack from the moment it finds objects stored (and counts on them) until
    its manifest names them, and exclusively by gc while it removes objects: gc then sees every
    manifest that names what it would take. (An object's recent use, its mtime, guarded this
    alone before; one stale look at a pack's mtime covers thousands of objects.)"""
    lock = os.path.normpath(objects) + ".lock"  # beside the store: nothing in it is ever swept
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def packed(objects: str) -> dict[str, tuple[str, int, int]]:
    """digest -> (pack file, offset, size) for every object held in a pack under `objects`
    (the indexes are read again only when the set of them changed: one listdir a call)."""
    folder = os.path.join(objects, PACKS)
    try:
        names = frozenset(n for n in os.listdir(folder) if n.endswith(".idx") and not n.startswith("."))
    except OSError:
        return {}
    cached = _INDEXES.get(objects)
    if cached is not None and cached[0] == names:
        return cached[1]
    table: dict[str, tuple[str, int, int]] = {}
    for name in sorted(names):
        table.update(read_index(os.path.join(folder, name)))
    _INDEXES[objects] = (names, table)
    return table


def read_index(idx: str) -> dict[str, tuple[str, int, int]]:
    """One pack's index: digest -> (pack file, offset, size); {} when unreadable or broken."""
    try:
        with open(idx, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    body = data[len(_IDX_MAGIC):]
    if not data.startswith(_IDX_MAGIC) or len(body) % _IDX_ROW.size:
        return {}
    pack = idx[:-len(".idx")] + ".pack"
    try:
        end = os.stat(pack).st_size
    except OSError:
        return {}
    rows = list(_IDX_ROW.iter_unpack(body))
    if any(off + size > end for _, off, size in rows):
        return {}  # an index that names bytes its pack lacks: none of it is trusted
    return {d.hex(): (pack, off, size) for d, off, size in rows}


def publish_pack(objects: str, tmp_pack: str, rows: list[tuple[str, int, int]]) -> str:
    """Put a written pack file (`tmp_pack`, holding `rows`: digest, offset, size) in place
    under OBJECTS/packs with its index; returns the pack's path."""
    end = os.stat(tmp_pack).st_size
    if any(off + size > end for _, off, size in rows):
        raise OSError(f"pack {tmp_pack} is shorter than its objects: not put in place")
    folder = os.path.join(objects, PACKS)
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, secrets.token_hex(10))
    os.replace(tmp_pack, name + ".pack")
    data = _IDX_MAGIC + b"".join(_IDX_ROW.pack(bytes.fromhex(d), off, size) for d, off, size in rows)
    fd, tmp = tempfile.mkstemp(prefix=".idx-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, name + ".idx")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return name + ".pack"


def open_object(objects: str, digest: str, packs: dict | None = None):
    """(a binary file positioned at the object's first byte, its size): from its pack, else
    its loose file. A pack gc took since its index was read is looked for loose (gc makes a
    live object loose before it removes a pack). `packs`: `packed(objects)`, for a caller
    opening many objects (one listdir, not one per object)."""
    where = (packed(objects) if packs is None else packs).get(digest)
    if where is not None:
        pack, offset, size = where
        try:
            f = open(pack, "rb")
        except FileNotFoundError:
            pass
        else:
            f.seek(offset)
            return f, size
    f = open(object_path(objects, digest), "rb")
    return f, os.fstat(f.fileno()).st_size


def make_loose(objects: str, digest: str, pack: str, offset: int, size: int) -> None:
    """A packed object as a file of its own (copied out beside its final name, then renamed
    into place): for a reader that takes files (Modal's mount), and for gc before it removes
    a pack whose object is still needed."""
    final = object_path(objects, digest)
    if os.path.isfile(final):
        return
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{final}.loose-{os.getpid()}-{secrets.token_hex(4)}"  # two at once never share one
    try:
        if copy_range(pack, offset, size, tmp) != size:
            if os.path.isfile(final):
                return  # gc made it loose and took the pack meanwhile
            raise OSError(f"pack {pack} lost object {digest[:12]}")
        os.chmod(tmp, 0o444)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def read_object(objects: str, digest: str) -> bytes:
    f, size = open_object(objects, digest)
    with f:
        return f.read(size)


def missing(objects: str, digests: list[str]) -> list[str]:
    """The objects of `digests` the store lacks (one round trip answers a whole manifest).

    Each one present is touched (`touch_if_stale`, its pack for a packed one): gc frees only
    objects unused for a while (cachescan.py), so one a new manifest is about to name is not
    taken between this answer and that manifest."""
    lacking = []
    now = time.time()
    in_packs = packed(objects)
    packs_used: set[str] = set()
    for d in dict.fromkeys(digests):
        if not HASH.fullmatch(d):
            continue
        where = in_packs.get(d)
        if where is not None:
            packs_used.add(where[0])
            continue
        path = object_path(objects, d)
        try:
            touch_if_stale(path, now)
        except FileNotFoundError:
            lacking.append(d)
        except OSError:  # not ours to touch: present is what counts
            if not os.path.isfile(path):
                lacking.append(d)
    for pack in packs_used:
        with contextlib.suppress(OSError):
            touch_if_stale(pack, now)
    return lacking


FRESH_S = 300.0  # half of gc's MIN_AGE_S (cachescan.py): an object touched since is not freed


def touch_if_stale(path: str, now: float) -> None:
    """Mark an object used now, unless it was within FRESH_S (then gc, which frees only what
    is unused for MIN_AGE_S, cannot take it before the manifest that names it is written).
    A stat is a read; a utime is an inode write, 80 us each on an ext4 VM disk: touching all
    20,000 objects of a tree at every submit cost 1.7 s. Raises FileNotFoundError if absent."""
    if now - os.stat(path).st_mtime >= FRESH_S:
        os.utime(path)


def receive(objects: str, stream) -> list[str]:
    """Objects from a tar stream (members named by their hash), each written to a temporary
    file, hashed, and renamed into place only when its bytes are what its name says."""
    placed = []
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            name = os.path.basename(member.name)
            if not member.isreg() or not HASH.fullmatch(name):
                continue
            src = tar.extractfile(member)  # a reader for every regular member (None only for others)
            if _store(objects, name, src):
                placed.append(name)
    return placed


def _store(objects: str, digest: str, src) -> bool:
    """Write one object from `src`, checked against its name; False when it is already there."""
    final = object_path(objects, digest)
    if os.path.isfile(final):
        while src.read(CHUNK):
            pass
        return False
    os.makedirs(os.path.dirname(final), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".obj-", dir=os.path.dirname(final))
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != digest:
            raise ValueError(f"object {digest[:12]} arrived with other content: refused")
        os.chmod(tmp, 0o444)
        os.replace(tmp, final)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def holds(path: str, digest: str) -> bool:
    """Does the file at `path` hash to `digest`?"""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest() == digest


def copy_verified(src: str, dst: str, digest: str, clone: list[bool]) -> int:
    """A private copy of one object, checked against its hash: -1 (and no `dst`) when its bytes
    are not what its name says. Where the file system shares blocks (a reflink) the copy is
    made first and the copy is hashed, so what is checked is what the job will read; elsewhere
    the bytes are hashed as they are copied (one read, as an unchecked copy makes). Only a
    regular file is read (opened without blocking, then checked): a FIFO or device a job put in
    the store under an object's name would otherwise hold the build forever."""
    fd_in = os.open(src, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd_in).st_mode):
        os.close(fd_in)
        return -1
    with os.fdopen(fd_in, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fout:
            cloned = False
            if clone[0]:
                try:
                    fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
                    cloned = True
                except OSError:
                    clone[0] = False
            if cloned:
                ok, n = holds(dst, digest), 0
            else:
                h = hashlib.sha256()
                while chunk := fin.read(CHUNK):
                    h.update(chunk)
                    fout.write(chunk)
                ok, n = h.hexdigest() == digest, fout.tell()
    if not ok:
        os.unlink(dst)
        return -1
    return n


def copy_range(pack: str, offset: int, size: int, dst: str) -> int:
    """A private copy of one packed object; -1 when its pack is gone (gc made it loose)."""
    try:
        src = os.open(pack, os.O_RDONLY)
    except FileNotFoundError:
        return -1
    try:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            done = 0
            while done < size:
                block = os.pread(src, min(CHUNK, size - done), offset + done)
                if not block:
                    raise OSError(f"pack {pack} ends inside an object")
                write_all(fd, block)
                done += len(block)
            return done
        finally:
            os.close(fd)
    finally:
        os.close(src)


def write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    """All of `data` to `fd` (a write may take less than it was given), at `offset` if one is
    given (pwrite: wherever the file's position is)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[n:]
        if offset is not None:
            offset += n


def copy_object(src: str, dst: str, clone: list[bool] | None = None) -> int:
    """A private copy of one object: a reflink where the file system offers one, else bytes
    (`clone[0]` is cleared by the first refusal, so a tree does not ask 20,000 times)."""
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fout:
            if clone is None or clone[0]:
                try:
                    fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
                    return 0
                except OSError:
                    if clone is not None:
                        clone[0] = False
            shutil.copyfileobj(fin, fout, CHUNK)
            return fout.tell()
