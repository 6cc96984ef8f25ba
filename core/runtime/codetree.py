"""A job's code folder, built from a bundle's manifest over content-addressed file objects.

    python codetree.py missing OBJECTS < hashes          -> the hashes OBJECTS lacks, a line each
    python codetree.py missing OBJECTS MANIFEST          -> the same for the objects MANIFEST names
    python codetree.py receive OBJECTS < tar             -> objects placed, each checked by its hash
    python codetree.py build MANIFEST OBJECTS DEST       -> DEST made from the manifest

Standard library only: the same code builds a local job's folder and, sent to a host's Python,
an ssh, Slurm or PBS job's. A bundle is a manifest (path, kind, hash or link target, size) and
one object per distinct file content, stored once under OBJECTS/<hash[:2]>/<hash[2:]>; a
submit sends only the objects a target lacks, so a one-line change ships one file.

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

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile

HASH = re.compile(r"[0-9a-f]{64}")
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write
CHUNK = 1 << 20
MANIFEST_VERSION = 1


def object_path(objects: str, digest: str) -> str:
    return os.path.join(objects, digest[:2], digest[2:])


def missing(objects: str, digests: list[str]) -> list[str]:
    """The objects of `digests` the store lacks (one round trip answers a whole manifest).

    Each one present is touched: gc frees only objects unused for a while (cachescan.py), so
    one a new manifest is about to name is not taken between this answer and that manifest."""
    lacking = []
    for d in dict.fromkeys(digests):
        if not HASH.fullmatch(d):
            continue
        path = object_path(objects, d)
        try:
            os.utime(path)
        except FileNotFoundError:
            lacking.append(d)
        except OSError:  # not ours to touch: present is what counts
            if not os.path.isfile(path):
                lacking.append(d)
    return lacking


def receive(objects: str, stream) -> list[str]:
    """Objects from a tar stream (members named by their hash), each written to a temporary
    file, hashed, and renamed into place only when its bytes are what its name says."""
    placed = []
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            name = os.path.basename(member.name)
            if not member.isreg() or not HASH.fullmatch(name):
                continue
            src = tar.extractfile(member)
            if src is None:
                continue
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


def build(entries: list[list], objects: str, dest: str, workers: int = 4) -> int:
    """Make `dest` (which must not exist yet) from the manifest's entries; returns the bytes
    written. Built beside `dest` and renamed into place, so a folder that exists is whole.

    Folders are made one part at a time and a part that is a link is refused, so no write ever
    passes through a link (a manifest's own link `d -> .` cannot carry a later `d/e` elsewhere);
    links are made last. Files are copied by `workers` threads: the copies are system calls
    that release the GIL, and a 20,000-file tree is mostly their latency."""
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".code-", dir=parent)
    made: set[str] = set()
    copies: list[tuple[str, str, int]] = []
    links: list[tuple[str, str]] = []
    try:
        for row in entries:
            rel, kind, ref = row[0], row[1], row[2]
            if not safe_rel(rel):
                raise ValueError(f"manifest path {rel!r} leaves the folder: refused")
            if kind == "l" and not link_stays_inside(rel, ref):
                raise ValueError(f"manifest link {rel!r} -> {ref!r} leaves the folder: refused")
            _make_parents(tmp, rel, made)
            path = os.path.join(tmp, rel)
            if kind == "l":
                links.append((ref, path))
            else:
                copies.append((object_path(objects, ref), path, 0o755 if kind == "x" else 0o644))
        written = _copy_all(copies, workers)
        for ref, path in links:
            if os.path.lexists(path):
                raise ValueError(f"manifest names {path[len(tmp) + 1:]!r} twice: refused")
            os.symlink(ref, path)
        os.rename(tmp, dest)
        return written
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def _copy_all(copies: list[tuple[str, str, int]], workers: int) -> int:
    clone = [True]  # reflinks until the file system says it has none

    def one(item: tuple[str, str, int]) -> int:
        src, dst, mode = item
        n = copy_object(src, dst, clone)
        os.chmod(dst, mode)
        return n

    if workers <= 1 or len(copies) < 64:
        return sum(one(c) for c in copies)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, copies))


def copy_object(src: str, dst: str, clone: list[bool] | None = None) -> int:
    """A private copy of one object: a reflink where the file system offers one, else bytes
    (`clone[0]` is cleared by the first refusal, so a tree does not ask 20,000 times)."""
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
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
    if cmd == "build" and len(argv) == 5:
        if os.path.isdir(argv[4]):
            return 0
        print(json.dumps({"bytes": build(read_manifest(argv[2]), argv[3], argv[4])}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
