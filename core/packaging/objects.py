"""Bundles at home: a manifest per bundle over file objects named by their content hash.

A bundle is `bundles/<hash>.json` (each shipped path with its kind, content hash or link target
and size) and, under `objects/`, one read-only file per distinct content, or its bytes in a pack
file (`objects/packs/`, objstore.PACKS: a big first pack) found by its index. Nothing is stored
twice: a second submit that changed one file writes one object and one manifest, and a target
is sent only the objects it lacks (core/runtime/objstore.py answers it in one round trip, and
core/runtime/codetree.py builds each job's code folder from them, the same code here and on hosts).

The bundle's hash is the manifest's (path, kind, hash) rows, as it was for the archives this
replaced, so approvals, idempotency and digests are unchanged. A manifest is written only
after every object it names is in place, so a manifest that exists is whole; gc removes a
manifest before the objects only it named (core/runtime/cachescan.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from pathlib import Path

from core import paths
from core.runtime import codetree, objstore

MANIFEST_SUFFIX = ".json"


def manifest_file(bundle_hash: str) -> Path:
    return paths.bundles_dir() / f"{bundle_hash}{MANIFEST_SUFFIX}"


def object_file(digest: str) -> Path:
    """Where the object is as a file of its own (a packed one is not there: `loosen` first)."""
    return Path(objstore.object_path(str(paths.objects_dir()), digest))


def read_object(digest: str) -> bytes:
    """An object's bytes, from its pack or its own file."""
    return objstore.read_object(str(paths.objects_dir()), digest)


def loosen(digests) -> None:
    """Make each named object a file of its own (a packed one is copied out of its pack), for
    a reader that takes files, not bytes: Modal's mount of the store."""
    store = str(paths.objects_dir())
    packs = objstore.packed(store)
    for d in dict.fromkeys(digests):
        if os.path.isfile(objstore.object_path(store, d)):
            continue
        if d not in packs:
            raise FileNotFoundError(f"object {d[:12]} is not in {store}")
        objstore.make_loose(store, d, *packs[d])


def reuse_objects(digests) -> set[str]:
    """The digests whose objects are not stored (objstore.missing, as on a host). The rest are
    marked used (touched unless touched lately: objstore.touch_if_stale), so gc (which frees only objects unused for a
    while, core/runtime/cachescan.py) does not take one before the manifest naming it is
    written. The store's folder is found once: a Path and a mkdir per object were 1.7 s of a
    warm 20,000-file submit."""
    return set(objstore.missing(str(paths.objects_dir()), list(digests)))


def stored(bundle_hash: str) -> bool:
    return manifest_file(bundle_hash).is_file()


def write_manifest(bundle_hash: str, rows: list[list]) -> Path:
    """Write the manifest (rows: path, kind, hash or link, size) once its objects are in place."""
    final = manifest_file(bundle_hash)
    if final.exists():
        return final
    # ASCII JSON: a name that is not UTF-8 travels as \udcXX escapes and comes back as its bytes
    text = json.dumps({"version": codetree.MANIFEST_VERSION, "entries": rows}, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=final.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final


def entries(bundle_hash: str) -> list[list]:
    """The manifest's rows; a bundle gc removed (or never packed here) is an error that says so."""
    path = manifest_file(bundle_hash)
    if not path.is_file():
        raise FileNotFoundError(f"bundle {bundle_hash[:12]} is gone from {path.parent}; submit the job again")
    return codetree.read_manifest(str(path))


def digests(bundle_hash: str) -> list[str]:
    """The distinct content hashes a bundle's files need, in manifest order."""
    return list(dict.fromkeys(r[2] for r in entries(bundle_hash) if r[1] != "l"))


def materialize(bundle_hash: str, dest: Path, reuse: Path | None = None) -> int:
    """A job's own copy of the bundle's files at `dest` (see codetree: copies, reflinked where
    the file system can; `reuse`, an ended job's folder taken over when untouched); returns
    the bytes copied."""
    return codetree.build(entries(bundle_hash), str(paths.objects_dir()), str(dest),
                          reuse=str(reuse) if reuse else None)


def object_stream(digests_: list[str], out) -> int:
    """A tar of the named objects (members named by hash) written to `out`, the way a target
    receives what it lacks (objstore.receive); returns the content bytes."""
    total = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        store = str(paths.objects_dir())
        packs = objstore.packed(store)
        for d in dict.fromkeys(digests_):
            f, size = objstore.open_object(store, d, packs)
            info = tarfile.TarInfo(d)
            info.size = size
            info.mode = 0o444
            with f:
                tar.addfile(info, f)
            total += info.size
    return total


def archive(bundle_hash: str) -> Path:
    """The whole bundle as one tar.gz (kept under cache/archives by hash), made from the
    objects on first use: no target takes one archive any more (each is sent objects); it is
    how a person or a test reads a bundle with tar."""
    out = paths.cache_dir() / "archives" / f"{bundle_hash}.tar.gz"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".archive-", suffix=".tar.gz", dir=out.parent)
    os.close(fd)
    try:
        store = str(paths.objects_dir())
        packs = objstore.packed(store)
        with tarfile.open(tmp, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
            for rel, kind, ref, *_ in entries(bundle_hash):
                info = tarfile.TarInfo(rel)
                info.mtime = 0
                if kind == "l":
                    info.type, info.linkname = tarfile.SYMTYPE, ref
                    tar.addfile(info)
                    continue
                f, info.size = objstore.open_object(store, ref, packs)
                info.mode = 0o755 if kind == "x" else 0o644
                with f:
                    tar.addfile(info, f)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def manifest_digest(rows: list[list]) -> str:
    """The bundle's hash: its (path, kind, hash or link) rows, sizes left out."""
    text = json.dumps([r[:3] for r in rows], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
