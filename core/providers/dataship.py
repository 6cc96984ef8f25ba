"""A job's local data sets as archives for a target that receives files, not a shell (Modal's
mounts, a SkyPilot task's workdir): each packed once, deterministically, into the cache by its
content hash, so an unchanged data set is packed once and uploaded as the same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from core import paths
from core.jobs.store import Job
from core.packaging.local_data import list_data


def data_archives(job: Job, kind: str) -> dict[str, Path]:
    """{data set name: its tar.gz in the cache}, for a `kind` of target that takes only local
    data sets (an hf:// set was downloaded at submit and is one)."""
    out: dict[str, Path] = {}
    for item in job.request.get("data", []):
        if item["kind"] != "path":
            raise RuntimeError(f"data {item['name']}: only local data sets reach a {kind} target")
        h = (job.plan.get("data") or {}).get(item["name"])
        listing = list_data(Path(item["source"]), item["name"])
        if not h:
            h = hashlib.sha256("\0".join(listing.files).encode() + str(listing.source).encode()).hexdigest()
        path = paths.cache_dir() / "modal-data" / f"{h[:32]}.tar.gz"  # the name Modal's mounts always had
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = io.BytesIO()
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for rel in listing.files:
                    src = listing.source / rel if rel else listing.source
                    info = tar.gettarinfo(str(src), arcname=rel or listing.source.name)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    with open(src, "rb") as f:
                        tar.addfile(info, f)
            tmp = path.with_suffix(".part")
            tmp.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
            os.replace(tmp, path)
        out[item["name"]] = path
    return out
