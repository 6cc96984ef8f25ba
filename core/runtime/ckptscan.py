"""A job's checkpoint folder as gpu-router's home sees it: listed with hashes, packed in part.

Run where the job runs (on a remote host as `python3 -c <this file> ...` through the target's
shell; on this machine imported), stdlib only. The supervisor mirrors the folder home
incrementally: `scan` lists every regular file with its size, mtime and sha256 (hashes are
cached by size and mtime beside the folder, so a large unchanged checkpoint is read once),
plus the completion marker `gpu.checkpoint_saved()` wrote; `pack` puts only the named files
(the ones home lacks) into one tar.gz. Links are never followed and never packed.

    ckptscan.py scan DIR
    ckptscan.py scan-many DIR...     (one listing per folder, in order: a host's jobs at once)
    ckptscan.py pack DIR ARCHIVE REL...
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile

MARKER = ".complete"  # written by gpu.checkpoint_saved()
MAX_FILES = 100_000


def _inside(rel: object) -> bool:
    """Whether `rel` names something inside the folder (no absolute name, no `..` part)."""
    return isinstance(rel, str) and bool(rel) and not rel.startswith(("/", "\\")) \
        and "\0" not in rel and ".." not in rel.replace("\\", "/").split("/")


def _hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache_path(folder: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(folder)), ".ckpt-hashes.json")


def scan(folder: str) -> dict:
    """{"exists", "files": {rel: [size, mtime_ns, sha256]}, "marker": the marker or None}."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return {"exists": False, "files": {}, "marker": None}
    try:
        with open(_cache_path(folder)) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    files: dict[str, list] = {}
    marker = None
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            if rel.startswith(MARKER + "."):
                continue  # the marker's temporary file
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not os.path.isfile(full) or os.path.islink(full):
                continue
            if rel == MARKER:
                try:
                    with open(full) as f:
                        marker = json.load(f)
                except (OSError, ValueError):
                    marker = None
                continue
            if len(files) >= MAX_FILES:
                break
            known = cache.get(rel)
            if known and known[0] == st.st_size and known[1] == st.st_mtime_ns:
                digest = known[2]
            else:
                try:
                    digest = _hash(full)
                except OSError:
                    continue
            files[rel] = [st.st_size, st.st_mtime_ns, digest]
    try:
        tmp = _cache_path(folder) + f".tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(files, f)
        os.replace(tmp, _cache_path(folder))
    except OSError:
        pass  # an unwritable cache only costs hashing again
    return {"exists": True, "files": files, "marker": marker}


def scan_copy(folder: str) -> dict:
    """`scan` of a copy of a checkpoint folder made after its session ended (a Kaggle session's
    output, a Modal call's result or its volume): the copy's files get back the times the job's marker
    recorded (sizes are checked first), so a checkpoint marked complete there is complete
    here, and the listing is final: it cannot change any more."""
    marker = os.path.join(folder, MARKER)
    try:
        with open(marker) as f:
            named = json.load(f).get("files") or {}
    except (OSError, ValueError, AttributeError):
        named = {}
    for rel, meta in named.items() if isinstance(named, dict) else ():
        if not _inside(rel):
            continue  # the marker is the job's word: a name out of the folder touches nothing
        path = os.path.join(folder, rel)
        try:
            if (isinstance(meta, (list, tuple)) and len(meta) >= 2 and os.path.isfile(path)
                    and not os.path.islink(path) and os.path.getsize(path) == meta[0]):
                os.utime(path, ns=(int(meta[1]), int(meta[1])))
        except (OSError, ValueError, TypeError):
            continue
    doc = scan(folder)
    doc["final"] = True
    return doc


def pack(folder: str, archive: str, rels: list[str]) -> dict:
    """The named regular files of `folder` (and the marker, if any) as a tar.gz."""
    count = size = 0
    with tarfile.open(archive, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for rel in [*rels, MARKER]:
            if not _inside(rel):
                continue
            full = os.path.join(folder, rel)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            tar.add(full, arcname=rel, recursive=False)
            count += 1
            size += os.path.getsize(full)
    return {"files": count, "bytes": size, "packed": os.path.getsize(archive)}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "scan":
        print(json.dumps(scan(argv[1])))
        return 0
    if argv and argv[0] == "scan-many":  # every job's folder on a host, in one process
        print(json.dumps({"scans": [scan(folder) for folder in argv[1:]]}))
        return 0
    if len(argv) >= 3 and argv[0] == "pack":
        print(json.dumps(pack(argv[1], argv[2], argv[3:])))
        return 0
    print("usage: ckptscan.py scan DIR | scan-many DIR... | pack DIR ARCHIVE REL...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
