"""The plan: where a request will run, on what, for how long, and its digest.

The digest is sha256 over the canonical plan (bundle hash, script, args, env, secret names,
data hashes and the commits hf:// data was pinned to, target, GPU, VRAM, hours; the scheduler
resources, among them the GPU count, a Modal image's base and packages, and a SkyPilot launch's
price ceiling and candidate clouds where given): an approval
binds to it, so any change to what would run needs a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from core.packaging.bundle import Bundle
from core.packaging.filecache import FileHashCache
from core.packaging.local_data import DataListing, list_data
from core.config.request import JobRequest

DIGEST_FIELDS = ("bundle_hash", "command", "env", "secrets", "data", "target", "gpu", "vram_gb",
                 "hours")


def canonical(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_bytes(doc: Any) -> bytes:
    """The canonical text as bytes; a non-UTF-8 path (surrogate escapes) keeps its own bytes."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8", "surrogateescape")


def digest(plan: dict) -> str:
    doc = {k: plan.get(k) for k in DIGEST_FIELDS}
    if plan.get("smoke"):  # the time cap binds too (absent: the digest is unchanged)
        doc["smoke"] = True
    if plan.get("resources"):  # scheduler resources bind too (absent: the digest is unchanged)
        doc["resources"] = plan["resources"]
    if plan.get("data_sources"):  # the commit an hf:// data set was pinned to binds too
        doc["data_sources"] = plan["data_sources"]
    for key in ("image", "packages", "not_secret", "extras"):  # the Modal image, env vouched as plain and
        # the optional dependency groups installed bind too (absent: the digest is unchanged)
        if plan.get(key):
            doc[key] = plan[key]
    if plan.get("skypilot"):  # a SkyPilot launch's price ceiling and candidates bind (catalog.binding)
        doc["skypilot"] = plan["skypilot"]
    if plan.get("resume"):  # a resumed job's attempt and checkpoint bind: a new approval
        doc["resume"] = plan["resume"]
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def data_hash(source: str, kind: str, cache: FileHashCache,
              listing: DataListing | None = None) -> str:
    """Content hash of a data set: a file's sha256, or a folder's manifest hash (an hf:// set
    is hashed as its downloaded copy, `core.packaging.hfdata`).

    Only what may be uploaded counts (`list_data`: credential files are withheld)."""
    if kind != "path":
        raise ValueError(f"data of kind {kind!r} has no local content to hash yet")
    listing = listing or list_data(Path(source), cache=cache)
    path = listing.source
    files = [path / rel if rel else path for rel in listing.files]
    sigs = []
    for f in files:
        try:
            st = f.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        sigs.append((str(f), FileHashCache.signature(st)))
    known = cache.lookup_many(sigs)
    rows = []
    from core.packaging.filecache import hash_fd

    for name, sig in sigs:
        h = known.get(name)
        if h is None:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            try:
                h = hash_fd(fd)
            finally:
                os.close(fd)
            cache.remember(name, sig, h)
        rows.append([os.path.relpath(name, path) if path.is_dir() else path.name, h])
    cache.flush()
    if not path.is_dir():
        return rows[0][1] if rows else hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(canonical_bytes(rows)).hexdigest()


def build_plan(req: JobRequest, bundle: Bundle, target: str, target_gpu: str,
               data_hashes: dict[str, str], extra: dict | None = None) -> dict:
    workdir = bundle.project_rel
    plan = {
        "bundle_hash": bundle.hash,
        "workdir": workdir,
        "command": req.command(),
        "python_file": req.is_python_file(),
        "env": req.env,
        "secrets": sorted(req.secrets),
        **({"not_secret": sorted(req.not_secret)} if req.not_secret else {}),  # vouched by a person
        "data": {d.name: data_hashes[d.name] for d in req.data},
        "target": target,
        "gpu": target_gpu,
        "vram_gb": req.vram_gb,
        "hours": req.hours,
        # a smoke run is capped in time (rules.smoke_max_minutes) and judged by that cap
        **({"smoke": True} if req.smoke else {}),
        **({"resources": req.resources()} if req.resources() else {}),
        **({"extras": req.extras} if req.extras else {}),  # what the target installs: it binds
        **({"image": req.image} if req.image else {}),  # the Modal image's base (binds)
        **({"packages": list(req.packages)} if req.packages else {}),  # installed into it (binds)
        **(extra or {}),
    }
    sources = {d.name: d.origin for d in req.data if d.origin}
    if sources:  # where an hf:// set came from: OWNER/NAME at the commit sha it was pinned to
        plan["data_sources"] = sources
    plan["digest"] = digest(plan)
    return plan
