"""A job's code folder, built from a bundle's manifest over content-addressed file objects.

    python codetree.py missing OBJECTS < hashes          -> the hashes OBJECTS lacks, a line each
    python codetree.py missing OBJECTS MANIFEST          -> the same for the objects MANIFEST names
    python codetree.py receive OBJECTS < tar             -> objects placed, each checked by its hash
    python codetree.py build [--verify] MANIFEST OBJECTS DEST [FROM [PIN]]
                                                         -> DEST made from the manifest (FROM:
                                                            an ended job's folder to reuse, PIN:
                                                            the sha256 its record must have;
                                                            prints {"bytes", "record"};
                                                            --verify: each object read is checked
                                                            against its hash; exit 4 and
                                                            {"bad": [...]} when one is not)

Standard library only: the same code builds a local job's folder and, sent to a host's Python,
an ssh, Slurm or PBS job's. A bundle is a manifest (path, kind, hash or link target, size) and
one object per distinct file content, stored once under OBJECTS/<hash[:2]>/<hash[2:]> (or, at
home after a big first pack, in a pack file: see PACKS); a submit sends only the objects a
target lacks, so a one-line change ships one file.

Copies, not hard links: every target runs a job as the same user that owns the object store,
and that user may chmod and rewrite any file it owns, so a hard-linked code folder would let one
job rewrite the files of every other job (and of every later submit) through the shared object.
A copy is private to its job. Where the file system can share blocks copy-on-write (a reflink:
btrfs, XFS, overlay on those) the copy is one ioctl and takes no room until the job writes.

Reuse: making 20,000 files is most of a re-submit's time on a host (ext4 here: 5 to 6 s of
file creation, more than the whole transfer of a one-line change). So a build may take over
the code folder of an ended job of the same project (FROM, chosen by the engine) and change
only what differs. It does so only when that folder is exactly as its own build left it: each
build records every entry's inode and change time (ctime: any write, chmod, rename or utime
moves it, and no process can set it back) in DEST + ".tree", and a folder with any entry
changed, added or missing is left where it is, whole, for `gpu fetch` (what a job wrote into
its folder is its output); only the `__pycache__` folders Python adds beside imported modules
are not counted as the job's work (they are removed before the folder is reused). The folder
is claimed by renaming it away first, so two builds never share one; the job it came from
loses its READY marker with it, so if resumed it builds its folder again. What this guards
is a job's accidental writes reaching the next job. Against a job that sets out to tamper, the
boundary is where the job runs: on a host with bubblewrap the job's sandbox shows it neither
the store, nor the `.tree` record beside its folder, nor other jobs' folders (remote.py asks the
launcher for it); on a host without one the engine never asks for a take-over (a job there could
have rewritten its folder and the record together), and `--verify` checks every object a build
reads against its hash (a job there could have rewritten an object in the store): an object
that fails is removed from the store, named in the answer (exit status 4), and sent again.

`receive` trusts nothing it reads: a member is an object only when its name is a sha256 and its
bytes hash to that name, and it is renamed into place only once checked, so a broken or hostile
stream leaves no object that lies about its content.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import struct
import sys
import tarfile
import tempfile
import time

HASH = re.compile(r"[0-9a-f]{64}")
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write
CHUNK = 1 << 20
MANIFEST_VERSION = 1


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


def read_manifest(path: str) -> list[list]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        doc = json.load(f)
    if doc.get("version") != MANIFEST_VERSION:
        raise ValueError(f"{path}: manifest version {doc.get('version')!r} is not {MANIFEST_VERSION}")
    return doc["entries"]


def safe_rel(rel: str) -> bool:
    """A manifest path that stays inside the folder it is built in."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def link_stays_inside(rel: str, target: str) -> bool:
    """A link whose target, read from where it sits, names something inside the folder (the
    rule of tarfile's "data" filter, which the archives this replaces were unpacked with)."""
    if not target or target.startswith("/"):
        return False
    depth = rel.count("/")
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


class BadObjects(ValueError):
    """Objects in the store whose bytes are not what their name says (rewritten after they
    were received): removed from the store by the build that found them, so the sender's next
    `missing` asks for them again."""

    def __init__(self, digests: list[str]) -> None:
        self.digests = sorted(set(digests))
        super().__init__(f"{len(self.digests)} object(s) in the store do not match their hash "
                         f"({', '.join(d[:12] for d in self.digests[:5])}): removed, to be sent again")


def build(entries: list[list], objects: str, dest: str, workers: int = 4, reuse: str | None = None,
          verify: bool = False, pin: str | None = None) -> int:
    """Make `dest` (which must not exist yet) from the manifest's entries; returns the bytes
    written. Built beside `dest` and renamed into place, so a folder that exists is whole.
    With `reuse`, an ended job's folder is taken over when it is untouched (see the module's
    docstring), and only the entries that differ are written.

    Folders are made one part at a time and a part that is a link is refused, so no write ever
    passes through a link (a manifest's own link `d -> .` cannot carry a later `d/e` elsewhere);
    links are made last. Files are copied by `workers` threads: the copies are system calls
    that release the GIL, and a 20,000-file tree is mostly their latency.

    `pin`: the sha256 the record beside `reuse` must have (`record_digest` after its build,
    kept where its job could not write): without it a job that rewrote its folder and then
    the record to match could pass its change on.

    `verify`: every object copied is hashed as it is read (the store may hold what a job wrote:
    a host without a sandbox); one that does not match is removed from the store and the build
    fails with BadObjects naming all of them."""
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    for row in entries:  # every entry judged before anything is made or taken over
        rel, kind, ref = row[0], row[1], row[2]
        if not safe_rel(rel):
            raise ValueError(f"manifest path {rel!r} leaves the folder: refused")
        if kind == "l" and not link_stays_inside(rel, ref):
            raise ValueError(f"manifest link {rel!r} -> {ref!r} leaves the folder: refused")
    _drop_half_builds(parent)
    for stale in (".tree", ".reused"):  # a folder built again (its job resumed after a take-over)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dest + stale)
    taken = _take_over(reuse, parent, pin) if reuse else None
    if taken is not None:
        tmp, old, made = taken
    else:
        tmp, old, made = tempfile.mkdtemp(prefix=BUILDING, dir=parent), {}, set()
    keep = {}
    try:
        if old:
            keep = _clear_differing(tmp, old, entries, made)
        copies: list[tuple[str, str, int]] = []
        links: list[tuple[str, str]] = []
        for row in entries:
            rel, kind, ref = row[0], row[1], row[2]
            if rel in keep:
                continue
            _make_parents(tmp, rel, made)
            path = os.path.join(tmp, rel)
            if kind == "l":
                links.append((ref, path))
            else:
                copies.append((ref, path, 0o755 if kind == "x" else 0o644))
        written = _copy_all(objects, copies, workers, verify)
        for ref, path in links:
            if os.path.lexists(path):
                raise ValueError(f"manifest names {path[len(tmp) + 1:]!r} twice: refused")
            os.symlink(ref, path)
        record = _record(tmp, entries, keep)
        os.rename(tmp, dest)
        _write_record(dest, record)
        return written
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


RECORD_VERSION = 1
BUILDING, REUSING = ".code-build-", ".code-reuse-"  # a folder being made, one being taken over
READY = ".code-ready"  # beside a job's folder: the targets' mark that it is built (not built again)


def _drop_half_builds(parent: str) -> None:
    """What a build killed half-way left beside its job's folder (a build that fails any other
    way removes its own): the next build of that job, which the engine never runs two of at
    once, clears it."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            if name.startswith((BUILDING, REUSING)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _record(top: str, entries: list[list], keep: dict[str, list]) -> list[list]:
    """[rel, kind, ref, inode, ctime_ns] for every entry as built: what `_untouched` checks.
    Entries kept from a reused folder keep their row (their inode and ctime did not move)."""
    rows = []
    for row in entries:
        rel, kind, ref = row[0], row[1], row[2]
        kept = keep.get(rel)
        if kept is not None:
            rows.append(kept)
            continue
        st = os.lstat(os.path.join(top, rel))
        rows.append([rel, kind, ref, st.st_ino, st.st_ctime_ns])
    return rows


def _write_record(dest: str, rows: list[list]) -> None:
    tmp = f"{dest}.tree.tmp"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump({"version": RECORD_VERSION, "rows": rows}, f, separators=(",", ":"))
    os.replace(tmp, f"{dest}.tree")


def record_digest(folder: str) -> str | None:
    """sha256 of the record beside `folder` as its build wrote it: what the engine keeps out of
    every job's reach (at home) and hands back as `pin` when it asks for a take-over."""
    try:
        with open(f"{folder}.tree", "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _read_record(folder: str, pin: str | None = None) -> dict[str, list] | None:
    """The record beside `folder`; with `pin`, only when its bytes hash to it (a record that
    a job rewrote together with its folder, to hide a change, then fails)."""
    try:
        with open(f"{folder}.tree", "rb") as f:
            data = f.read()
        if pin is not None and hashlib.sha256(data).hexdigest() != pin:
            return None
        doc = json.loads(data)  # ASCII: json.dump escapes every other character, a name's undecodable bytes too
        if doc.get("version") != RECORD_VERSION:
            return None
        return {row[0]: row for row in doc["rows"]}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _take_over(folder: str, parent: str, pin: str | None = None) -> tuple[str, dict[str, list], set[str]] | None:
    """Claim an ended job's folder for a new build: renamed beside the new one (one claimant
    wins), then checked entry by entry against its record (with `pin`, a record whose hash is
    that). Returns (where it now is, its record, its folders) when it is untouched; otherwise
    it goes back, unchanged, and None."""
    record = _read_record(folder, pin)
    if record is None:
        return None
    tmp = os.path.join(parent, f"{REUSING}{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(folder, tmp)
    except OSError:
        return None  # gone, or claimed by another build first
    with contextlib.suppress(OSError):
        os.unlink(f"{folder}.tree")  # it describes no folder now, and never will again
    found = _untouched(tmp, record)
    if found is not None:
        try:
            for rel in found[1]:
                shutil.rmtree(os.path.join(tmp, rel))  # bytecode caches: derived, never reused
        except OSError:
            found = None
    if found is None:
        with contextlib.suppress(OSError):
            os.rename(tmp, folder)  # left whole for `gpu fetch`: what the job wrote is its output
        return None
    with contextlib.suppress(FileNotFoundError):  # its job, if resumed, builds a folder again
        os.unlink(os.path.join(os.path.dirname(folder), READY))
    with contextlib.suppress(OSError):  # what `gpu fetch` of that job says (workdir.py pack)
        with open(f"{folder}.reused", "wb") as f:  # the path's bytes: a name need not be UTF-8
            f.write(os.fsencode(os.path.abspath(parent)) + b"\n")
    return tmp, record, {os.path.join(tmp, d) for d in found[0]}


def _untouched(top: str, record: dict[str, list]) -> tuple[set[str], list[str]] | None:
    """The folder's own folders (relative) when every entry is what its record says (same
    kind, inode and ctime; for a link, the same target) and there is nothing else, with the
    `__pycache__` folders Python added beside the modules it imported; else None.

    Bytecode caches are the one thing a job's run adds to its folder as a matter of course
    (any local import writes one), so they do not make a folder the job's own work: they are
    derived, and removed before the folder is reused (a .pyc left behind would be loaded by
    the next job in place of a source file with the same size and mtime)."""
    needed = _all_parents(record)
    dirs: set[str] = set()
    derived: list[str] = []
    seen = 0
    stack = [("", top)]
    try:
        while stack:
            rel_dir, path = stack.pop()
            with os.scandir(path) as it:
                for entry in it:
                    rel = f"{rel_dir}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name == "__pycache__" and rel not in needed:
                            derived.append(rel)
                            continue
                        dirs.add(rel)
                        stack.append((rel + "/", entry.path))
                        continue
                    row = record.get(rel)
                    if row is None:
                        return None  # something the job made
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_ino, st.st_ctime_ns) != (row[3], row[4]):
                        return None
                    if row[1] == "l":
                        if not entry.is_symlink() or os.readlink(entry.path) != row[2]:
                            return None
                    elif not entry.is_file(follow_symlinks=False):
                        return None
                    seen += 1
    except OSError:
        return None  # a folder it cannot read: not as built
    if seen != len(record):
        return None  # something removed
    if not dirs <= needed:
        return None  # an empty folder the job made
    return dirs, derived


def _all_parents(rels) -> set[str]:
    out: set[str] = set()
    for rel in rels:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _clear_differing(top: str, old: dict[str, list], entries: list[list], made: set[str]) -> dict[str, list]:
    """In a taken-over folder, remove what the new manifest does not have as it is (another
    content, kind or link target, or no longer there) and the folders left unneeded. Returns
    the old record's rows kept as they are; `made` loses the folders removed."""
    new = {row[0]: row for row in entries}
    keep: dict[str, list] = {}
    for rel, row in old.items():
        want = new.get(rel)
        if want is not None and want[1] == row[1] and want[2] == row[2]:
            keep[rel] = row
        else:
            os.unlink(os.path.join(top, rel))
    needed = _all_parents(new)
    for d in sorted((p for p in made if p[len(top) + 1:] not in needed), key=len, reverse=True):
        os.rmdir(d)
        made.discard(d)
    return keep


def _make_parents(top: str, rel: str, made: set[str]) -> None:
    """The folders above `rel` under `top`, part by part; a part that exists as anything but
    a folder this build made (a file, a link) is refused."""
    here = top
    for part in rel.split("/")[:-1]:
        here = os.path.join(here, part)
        if here in made:
            continue
        if os.path.lexists(here):
            raise ValueError(f"manifest path {rel!r} passes through {here[len(top) + 1:]!r}, "
                             "which is not a folder: refused")
        os.mkdir(here)
        made.add(here)


def _copy_all(objects: str, copies: list[tuple[str, str, int]], workers: int, verify: bool) -> int:
    clone = [True]  # reflinks until the file system says it has none
    in_packs = packed(objects)
    bad: list[str] = []

    def one(item: tuple[str, str, int]) -> int:
        digest, dst, mode = item
        where = in_packs.get(digest)
        n = -1
        if where is not None:
            n = copy_range(*where, dst)
            if n >= 0 and verify and not _holds(dst, digest):
                bad.append(digest)
                return 0
        if n < 0:
            src = object_path(objects, digest)
            if verify:
                n = copy_verified(src, dst, digest, clone)
                if n < 0:
                    bad.append(digest)
                    return 0
            else:
                n = copy_object(src, dst, clone)
        os.chmod(dst, mode)
        return n

    if workers <= 1 or len(copies) < 64:
        total = sum(one(c) for c in copies)
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(workers) as pool:
            total = sum(pool.map(one, copies))
    if bad:
        for digest in set(bad):  # loose ones only: a host holds no packs, and home's are its own
            with contextlib.suppress(OSError):
                os.unlink(object_path(objects, digest))
        raise BadObjects(bad)
    return total


def _holds(path: str, digest: str) -> bool:
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
                ok, n = _holds(dst, digest), 0
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


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "missing" and len(argv) in (3, 4):
        wanted = ([r[2] for r in read_manifest(argv[3]) if r[1] != "l"] if len(argv) == 4
                  else sys.stdin.read().split())
        sys.stdout.write("".join(f"{d}\n" for d in missing(argv[2], wanted)))
        return 0
    if cmd == "receive" and len(argv) == 3:
        placed = receive(argv[2], sys.stdin.buffer)
        print(json.dumps({"placed": len(placed)}))
        return 0
    if cmd == "build":
        verify = "--verify" in argv[2:3]
        args = argv[2 + verify:]
        if len(args) not in (3, 4, 5):
            print(__doc__, file=sys.stderr)
            return 2
        if os.path.isdir(args[2]):
            return 0
        try:
            written = build(read_manifest(args[0]), args[1], args[2], reuse=args[3] if len(args) >= 4 else None,
                            verify=verify, pin=args[4] if len(args) == 5 else None)
        except BadObjects as exc:
            print(json.dumps({"bad": exc.digests}))
            print(f"codetree: {exc}", file=sys.stderr)
            return 4
        print(json.dumps({"bytes": written, "record": record_digest(args[2])}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
