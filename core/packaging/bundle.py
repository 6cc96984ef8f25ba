"""What ships: a project's listing, hashed and stored as a manifest over file objects.

The listing (`core.packaging.listing`) says which files ship; here they are hashed (the stat
cache first) and each content is copied once into gpu-router's object store
(`core.packaging.objects`), then the manifest is written. Only regular files are opened, with
O_NOFOLLOW|O_NONBLOCK, so a FIFO cannot hang a submit, and the packer checks the bytes it
actually stores again (a file rewritten or swapped after it was judged is not shipped).

The bundle's hash is taken over the manifest (path, mode, content hash), so an unchanged tree
is neither read nor stored twice, and a changed one stores only its changed files. File names
are kept exactly, bytes included (the manifest's JSON escapes a name that is not UTF-8).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import contextlib
import itertools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core import paths
from core.errors import UserError, disk_full_guard
from core.packaging import objects
from core.runtime import codetree
from core.packaging.credentials import CONTENT_HEAD, content_verdict
from core.packaging.filecache import CHUNK, FileHashCache, hash_fd
from core.packaging.listing import Entry, Listing, list_project

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

# told (files read so far, files to read) while a bundle is hashed or packed, so a front can
# show a long first pack moving (the MCP server sends these as progress notifications)
Progress = Callable[[int, int], None]
PROGRESS_EVERY = 100  # files between two reports


@dataclass
class Bundle:
    hash: str
    path: Path
    root: Path
    project_rel: str
    files: int
    bytes: int
    left_out: list[dict]
    warnings: list[str]
    manifest: list[list]
    packed: bool  # False when an identical bundle was already stored
    hint: str | None = None  # set where the job refers to a left-out path (core.packaging.report)

    def summary(self) -> dict:
        """The `bundle` object of `gpu submit --json`: files, bytes, left_out, hint, warnings."""
        doc: dict = {"files": self.files, "bytes": self.bytes}
        if self.left_out:
            doc["left_out"] = self.left_out
        if self.hint:
            doc["hint"] = self.hint
        if self.warnings:
            doc["warnings"] = self.warnings
        return doc


def build(listing: Listing, cache: FileHashCache | None = None, *, dry_run: bool = False,
          progress: Progress | None = None) -> Bundle:
    """Hash the listing (stat cache first) and pack it unless that bundle is already stored.
    A full disk under gpu-router's home is a DiskFull error (`gpu bundle`, `plan`, `submit`).

    `dry_run` (`gpu bundle`, `gpu plan`) hashes what would ship and writes nothing: no archive,
    no cache entry, so looking at a bundle never grows gpu-router's home. `progress` is told
    how many of the files that must be read have been, every PROGRESS_EVERY files and at the
    end (a warm cache reads none: it is told (0, 0) once)."""
    with disk_full_guard(paths.home()):
        return _build(listing, cache, dry_run, progress)


def _ticker(progress: Progress | None, total: int) -> Callable[[], None]:
    """A counter that tells `progress` every PROGRESS_EVERY files (and the last one)."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    return tick


def _hash_only(listing: Listing, entries: list[Entry], tick: Callable[[], None] = lambda: None) -> None:
    """The sha256 of each file as the packer would read it (no link followed), packing nothing."""
    for e in entries:
        try:
            fd = os.open(listing.root / e.rel, _OPEN_FLAGS)
        except OSError as exc:
            raise UserError(f"cannot read {e.rel}: {exc.strerror}",
                            fix="fix its permissions or ignore it in .gitignore") from exc
        try:
            e.sha256 = hash_fd(fd)
        finally:
            os.close(fd)
        tick()


def _build(listing: Listing, cache: FileHashCache | None, dry_run: bool = False,
           progress: Progress | None = None) -> Bundle:
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        files = [e for e in listing.entries.values() if e.kind == "file"]
        root = str(listing.root)  # plain strings: 20,000 Paths joined twice cost 0.3 s
        known = cache.lookup_many([(f"{root}/{e.rel}", e.sig) for e in files])
        missing = []
        for e in files:
            e.sha256 = known.get(f"{root}/{e.rel}")
            if e.sha256 is None:
                missing.append(e)
        packed = False
        tell = progress or (lambda done, total: None)
        if dry_run:
            tell(0, len(missing))
            _hash_only(listing, missing, _ticker(progress, len(missing)))
            digest = manifest_hash(listing)
        elif not missing and objects.stored(digest := manifest_hash(listing)):
            tell(0, 0)  # the same tree was stored before: nothing is read
        else:
            # each file whose content the store lacks is read once: hashed while it is copied
            # into its object (a file the stat cache knows, with its object present, is not read)
            lacking = objects.reuse_objects(e.sha256 for e in files if e.sha256 is not None)
            todo = missing + [e for e in files if e.sha256 is not None and e.sha256 in lacking]
            tell(0, len(todo))
            _store_objects(listing, todo, cache, _ticker(progress, len(todo)))
            digest = manifest_hash(listing)
            if not objects.stored(digest):
                objects.write_manifest(digest, manifest(listing, sizes=True))
                packed = True
        left_out = listing.ignored + listing.withheld
        shipped = [e for e in listing.entries.values()]
        return Bundle(hash=digest, path=objects.manifest_file(digest), root=listing.root,
                      project_rel=listing.project_rel, files=len(shipped),
                      bytes=sum(e.size for e in shipped), left_out=left_out,
                      warnings=listing.warnings, manifest=manifest(listing), packed=packed)
    finally:
        if not dry_run:
            _drop_half_packs(paths.objects_dir())  # none left once each object was renamed into place
            cache.flush()
        if own_cache:
            cache.close()


def manifest(listing: Listing, *, sizes: bool = False) -> list[list]:
    """(path, kind, content hash or link target) per entry, sorted; `sizes` adds each file's
    size (the stored manifest's fourth column: what a target reports and gc counts)."""
    rows = []
    for rel in sorted(listing.entries):
        e = listing.entries[rel]
        if e.kind == "file":
            rows.append([rel, "x" if e.executable else "f", e.sha256] + ([e.size] if sizes else []))
        else:
            rows.append([rel, "l", e.link] + ([0] if sizes else []))
    return rows


def manifest_hash(listing: Listing) -> str:
    return objects.manifest_digest(manifest(listing))


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
        if len(self.head) < CONTENT_HEAD:
            self.head += block[:CONTENT_HEAD - len(self.head)]
        return block


def _temp_prefix() -> str:
    """This process's and thread's half-made archives are named by it, so whatever ends a
    pack (a Ctrl-C between any two lines, even before its own cleanup could know the name)
    leaves none behind: make_bundle removes what still carries it (_drop_half_packs)."""
    return f".pack-{os.getpid()}-{threading.get_ident()}-"


def _drop_half_packs(store: Path) -> None:
    for stale in store.glob(_temp_prefix() + "*"):
        stale.unlink(missing_ok=True)


def _store_objects(listing: Listing, todo: list[Entry], cache: FileHashCache,
                   tick: Callable[[], None]) -> None:
    """Copy each file of `todo` into its object, on every core: hashing and copying release
    the GIL, so threads read, hash and write several files at once. The first failure (a file
    that changed into a credential, a link swapped in) stops the rest and is raised."""
    if not todo:
        return
    lock = threading.Lock()

    def one(e: Entry) -> tuple[Entry, str, str]:
        sig, digest = _store_object(listing, e)
        with lock:
            tick()
        return e, sig, digest

    workers = max(1, min(8, os.cpu_count() or 1))
    if workers == 1 or len(todo) < 8:
        results = [one(e) for e in todo]
    else:
        from concurrent.futures import ThreadPoolExecutor  # a warm submit stores nothing: not imported

        with ThreadPoolExecutor(workers, thread_name_prefix="pack") as pool:
            futures = [pool.submit(one, e) for e in todo]
            try:
                results = [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    for e, sig, digest in results:
        cache.remember(str(listing.root / e.rel), sig, digest)


def _store_object(listing: Listing, e: Entry) -> tuple[str, str]:
    """One file into the object store: read through O_NOFOLLOW, judged again on the bytes
    actually read, written under a temporary name and renamed into place under its hash (an
    object that is already there is replaced by the same bytes: one call, and its new mtime is
    the "used lately" that keeps gc off it); returns (stat signature, hash).

    Few system calls per file, since a cold pack of 20,000 small files is mostly their cost:
    the temporary name is this thread's prefix and a counter (no random names, no retries), it
    is created read-only (no chmod), and a folder is made only when the rename says it lacks one."""
    store = str(paths.objects_dir())
    full = listing.root / e.rel
    try:
        fd = os.open(full, _OPEN_FLAGS)
    except OSError as exc:
        raise UserError(f"cannot read {e.rel}: {exc.strerror}",
                        fix="fix its permissions or ignore it in .gitignore") from exc
    out_fd, tmp_name = -1, ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{e.rel} changed into a non-regular file while packing",
                            fix="submit again")
        _check_same_file(e, st)
        reader = _HashingReader(fd)
        out_fd, tmp_name = _open_temp(store)
        size = 0
        while block := reader.read(CHUNK):
            _write_all(out_fd, block)
            size += len(block)
        os.close(out_fd)
        out_fd = -1
        _check_packed_content(e, bytes(reader.head), size)
        digest = reader.h.hexdigest()
        final = codetree.object_path(store, digest)
        try:
            os.replace(tmp_name, final)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(tmp_name, final)
        # what was stored is what the manifest names, even if the file changed since listing
        e.sha256, e.size = digest, size
        return FileHashCache.signature(st), digest
    except BaseException:
        if out_fd >= 0:
            os.close(out_fd)
        if tmp_name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
        raise
    finally:
        os.close(fd)


def _open_temp(store: str) -> tuple[int, str]:
    """A new read-only file for one object's bytes, named by this thread's prefix (what
    _drop_half_packs removes, whatever ends a pack) and a counter."""
    name = f"{store}/{_temp_prefix()}{next(_TMP_SEQ)}"
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), name


_TMP_SEQ = itertools.count()  # next() on it is atomic under the GIL: one name per object


def _write_all(fd: int, block: bytes) -> None:
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view):]


def _check_same_file(e: Entry, st: os.stat_result) -> None:
    """A file swapped for another hard link after it was judged is not packed unjudged."""
    if (st.st_dev, st.st_ino) != (e.dev, e.ino) and st.st_nlink > 1:
        raise UserError(f"{e.rel} was replaced by a hard link while packing: nothing was shipped",
                        fix="submit again")


def _check_packed_content(e: Entry, head: bytes, size: int) -> None:
    """The bytes that went into the archive are judged again, so a file rewritten between
    listing and packing cannot carry a credential out; the archive is then discarded."""
    reason = content_verdict(posixpath.basename(e.rel), head, size)
    if reason:
        raise UserError(f"{e.rel} changed while packing and is now withheld "
                        f"({reason.removeprefix('withheld: ')}): nothing was shipped",
                        fix="submit again; the file will be left out")


def make_bundle(project_dir: Path, include: list[str] = (), *, allow_large: bool = False) -> Bundle:
    return build(list_project(project_dir, include, allow_large=allow_large))
