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

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core import paths
from core.errors import disk_full_guard
from core.packaging import filework, objects, snapshot, spread
from core.packaging.filecache import FileHashCache
from core.packaging.listing import Entry, Listing, list_project
from core.runtime import objstore

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
    deps: object = None  # its Dependencies as every target reads them (core.packaging.requirements), at submit

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
    """The sha256 of each file as the packer would read it (no link followed, only the file
    listed: filework.open_file), packing nothing."""
    digests = spread.run(filework.hash_only, {"root": str(listing.root)},
                         [[e.rel, e.dev, e.ino] for e in entries],
                         sizes=[e.size for e in entries], tick=tick)
    for e, digest in zip(entries, digests):
        e.sha256 = digest


def _build(listing: Listing, cache: FileHashCache | None, dry_run: bool = False,
           progress: Progress | None = None) -> Bundle:
    own_cache = cache is None
    cache = cache or FileHashCache()
    try:
        files = [e for e in listing.entries.values() if e.kind == "file"]
        root = str(listing.root)  # plain strings: 20,000 Paths joined twice cost 0.3 s
        # a remembered listing (core.packaging.snapshot) brings its files' hashes along
        known = cache.lookup_many([(f"{root}/{e.rel}", e.sig) for e in files if e.sha256 is None])
        missing = []
        for e in files:
            if e.sha256 is None:
                e.sha256 = known.get(f"{root}/{e.rel}")
            if e.sha256 is None:
                missing.append(e)
        packed = False
        tell = progress or (lambda done, total: None)
        rows: list[list] = []
        if dry_run:
            tell(0, len(missing))
            _hash_only(listing, missing, _ticker(progress, len(missing)))
            rows = manifest(listing, sizes=True)
            digest = objects.manifest_digest(rows)
        elif not missing and objects.stored(digest := objects.manifest_digest(rows := manifest(listing, sizes=True))):
            tell(0, 0)  # the same tree was stored before: nothing is read
        else:
            # each file whose content the store lacks is read once: hashed while it is copied
            # into its object (a file the stat cache knows, with its object present, is not read)
            with objstore.sweep_lock(str(paths.objects_dir()), exclusive=False):  # gc waits till named
                lacking = objects.reuse_objects(e.sha256 for e in files if e.sha256 is not None)
                todo = missing + [e for e in files if e.sha256 is not None and e.sha256 in lacking]
                tell(0, len(todo))
                _store_objects(listing, todo, cache, _ticker(progress, len(todo)))
                rows = manifest(listing, sizes=True)  # once, with what was stored (a 20,000-row sort is 25 ms)
                digest = objects.manifest_digest(rows)
                if not objects.stored(digest):
                    objects.write_manifest(digest, rows)
                    packed = True
        if not dry_run and listing.snap is not None:
            snapshot.remember(cache, listing.snap, listing.entries)
        left_out = listing.ignored + listing.withheld
        shipped = [e for e in listing.entries.values()]
        return Bundle(hash=digest, path=objects.manifest_file(digest), root=listing.root,
                      project_rel=listing.project_rel, files=len(shipped),
                      bytes=sum(e.size for e in shipped), left_out=left_out,
                      warnings=listing.warnings, manifest=[r[:3] for r in rows], packed=packed)
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


def _temp_prefix() -> str:
    """This process's and thread's half-made objects (its helpers' too) are named by it, so
    whatever ends a pack (a Ctrl-C between any two lines, even before its own cleanup could
    know the name) leaves none behind: make_bundle removes what still carries it
    (_drop_half_packs), once the helpers are stopped."""
    return f".pack-{os.getpid()}-{threading.get_ident()}-"


def _drop_half_packs(store: Path) -> None:
    for stale in store.glob(_temp_prefix() + "*"):
        stale.unlink(missing_ok=True)


PACK_MIN = 64  # files stored at once that go into pack files rather than one file each


def _store_objects(listing: Listing, todo: list[Entry], cache: FileHashCache,
                   tick: Callable[[], None]) -> None:
    """Copy each file of `todo` into its object (filework.store), on every core: a big pack is
    spread over helper processes (core.packaging.spread; threads fought over the GIL) and goes
    into pack files (objstore.PACKS: making 20,000 files was most of a cold pack). The first
    failure (a file that changed into a credential, a link swapped in) stops the rest and is
    raised; the packs are put in place only when every object is in them."""
    if not todo:
        return
    root = str(listing.root)
    store = str(paths.objects_dir())
    context = {"root": root, "objects": store, "tmp": _temp_prefix(), "pack": len(todo) >= PACK_MIN}
    jobs = [[e.rel, e.dev, e.ino, e.clean_key] for e in todo]
    try:
        results = spread.run(filework.store, context, jobs, sizes=[e.size for e in todo], tick=tick)
    finally:
        filework.close_packs(context)
    packs: dict[str, list[tuple[str, int, int]]] = {}
    for e, (sig, digest, size, pack, offset) in zip(todo, results):
        # what was stored is what the manifest names, even if the file changed since listing
        e.sha256, e.size = digest, size
        if sig != e.sig:
            listing.snap = None  # the listing judged other bytes: it is not kept
        cache.remember(f"{root}/{e.rel}", sig, digest)
        if pack is not None:
            packs.setdefault(pack, []).append((digest, offset, size))
    for pack, rows in packs.items():
        objstore.publish_pack(store, pack, rows)


def make_bundle(project_dir: Path, include: list[str] = (), *, allow_large: bool = False) -> Bundle:
    return build(list_project(project_dir, include, allow_large=allow_large))
