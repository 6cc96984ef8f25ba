"""A project's code on Kaggle: its file objects as a chain of private data sets.

A kernel can only read what its data sources mount, and a data set, once made, never changes,
so a bundle's objects (core/packaging/objects.py) travel as a chain per project and account:
the first submit's data set is the base (the bundle's manifest and a tar of all its objects);
each later distinct bundle adds one delta holding its manifest and only the objects no data set
of the chain holds yet. A one-line change uploads that file and a manifest; an unchanged
re-submit finds its data set and uploads nothing.

A kernel mounts its own data set (for the manifest) and just the ones holding objects it names:
editing the same file again and again keeps it at two. Kaggle caps a kernel's data sources
(SOURCES_CAP), and the runtime, the wheelhouse and local data sets count too: when a bundle would
need more than the room left, it becomes a new base (all its objects in one data set) and the
chain starts again from it.

Each data set is named by a hash of what it holds (`gr-c-<hash>`), so two chains never claim one
name for different contents. The chain is remembered here (cache/kaggle-code/), one small JSON
file per project and account, and checked against Kaggle before each use: a data set deleted on
Kaggle breaks the chain, and the next submit cuts a new base.

The objects travel as one tar.gz per data set (Kaggle counts files per data set, at most 1000,
and a project has more); the kernel checks each object against its hash as it unpacks it
(core/runtime/codetree.py `receive`) and builds the job's code folder from the manifest.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core import paths
from core.errors import UserError
from core.packaging import objects

# Kaggle's documentation (the kaggle-api kernel metadata page, the notebooks pages) states no
# number for a kernel's data sources; 20 is a conservative figure, enforced by the fake too.
SOURCES_CAP = 20
MANIFEST_EXT = ".grm"  # not .json/.tar.gz: Kaggle previews and unpacks files it recognises
OBJECTS_EXT = ".gro"


def set_slug(bundle_hash: str, held: list[str]) -> str:
    """A data set's name: a hash of the manifest it carries and the objects it holds."""
    text = bundle_hash + ":" + ",".join(sorted(held))
    return "gr-c-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def plan(chain: list[dict], bundle_hash: str, digests: list[str], room: int) -> tuple[list[dict], dict, list[str]]:
    """Where a bundle's code comes from: (the chain after it, the bundle's own data set, the
    slugs the kernel mounts: its own first, then the ones holding the objects it names).

    `chain` is a list of {"slug", "bundle", "objects"} (the base first); `room` is how many
    code data sets the kernel may mount. A bundle already in the chain reuses its data set; a
    new one adds a delta, or starts a new base when that would need more than `room`."""
    if room < 1:
        raise UserError(f"a Kaggle kernel mounts at most {SOURCES_CAP} data sets, and this job's "
                        "data sets and dependencies leave none for its code",
                        fix="pass fewer --data sets to this job, or run it on another target")
    wanted = list(dict.fromkeys(digests))
    own = next((s for s in chain if s["bundle"] == bundle_hash), None)
    if own is None:
        held = {d for s in chain for d in s["objects"]}
        new = [d for d in wanted if d not in held]
        own = {"slug": set_slug(bundle_hash, new), "bundle": bundle_hash, "objects": new}
        chain = [*chain, own]
    holder = {d: s["slug"] for s in chain for d in s["objects"]}
    mounts = list(dict.fromkeys([own["slug"], *(holder[d] for d in wanted)]))
    if len(mounts) > room:
        own = {"slug": set_slug(bundle_hash, wanted), "bundle": bundle_hash, "objects": wanted}
        chain, mounts = [own], [own["slug"]]
    return chain, own, mounts


def _state_file(user: str, project_dir: str) -> Path:
    key = hashlib.sha256(f"{user}\0{project_dir}".encode()).hexdigest()[:24]
    return paths.cache_dir() / "kaggle-code" / f"{key}.json"


@contextmanager
def chain_of(user: str, project_dir: str) -> Iterator[list[dict]]:
    """The project's chain for this account, held under a lock while a submit ships its code
    (two submits at once would otherwise both add a delta and one would lose it); what the
    caller leaves in the list is written back only when its block ends without an error."""
    path = _state_file(user, project_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            chain = json.loads(path.read_text()).get("chain", [])
        except (FileNotFoundError, ValueError):
            chain = []
        yield chain
        fd, tmp = tempfile.mkstemp(prefix=".chain-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({"version": 1, "project": project_dir, "chain": chain}, f)
        os.replace(tmp, path)


def set_files(own: dict) -> dict[str, bytes]:
    """The files of a bundle's data set: its manifest and its objects, each gzipped (the
    manifest's paths and hashes halve: most of what a one-file change sends)."""
    manifest = objects.manifest_file(own["bundle"]).read_bytes()
    files = {manifest_name(own["bundle"]): gzip.compress(manifest, compresslevel=6, mtime=0)}
    if own["objects"]:
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1, mtime=0) as gz:
            objects.object_stream(own["objects"], gz)
        files[objects_name(own["slug"])] = buf.getvalue()
    return files


def manifest_name(bundle_hash: str) -> str:
    return f"{bundle_hash[:32]}{MANIFEST_EXT}"


def objects_name(slug: str) -> str:
    return f"{slug}{OBJECTS_EXT}"
