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
one object per distinct file content, kept in the object store (objstore.py: where objects
live, how they arrive, and how one is copied privately; why copies and not hard links); a
submit sends only the objects a target lacks, so a one-line change ships one file. This module
is the build: a manifest judged, a folder made from it, and the take-over of an ended job's
folder; `missing` and `receive` are here only as the host's command line to the store.

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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile

if __package__:  # imported as core.runtime.codetree (the engine, tests)
    from .objstore import copy_object, copy_range, copy_verified, holds, missing, object_path, packed, receive
else:  # run beside its sibling files on a host, or sent as source with objstore.py registered before it
    from objstore import copy_object, copy_range, copy_verified, holds, missing, object_path, packed, receive

MANIFEST_VERSION = 1


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
            if n >= 0 and verify and not holds(dst, digest):
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
