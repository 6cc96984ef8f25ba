"""Where home keeps a job's checkpoint, and how `gpu status` and the events name it.

Home keeps exactly one checkpoint per job, the last complete one:

    jobs/<id>/ckpt-home/        its files (the job's own layout)
    jobs/<id>/ckpt-home.json    manifest: {path: {size, mtime_ns, sha256}}, generation, when,
                                from which target and attempt, bytes moved so far

Why a module of its own: the mirror writes this layout, a restore and the job's end read it,
and `gpu status` shows it; each finds the paths, the manifest and its summary here, so the
layout is said in one place. A sparse file stays sparse on every copy on this machine
(core/runtime/sparsefile.py): `copy_sparse` is the one copy the mirror and a local restore use.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from core import paths
from core.runtime import sparsefile

MARKER = ".complete"


def home_dir(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-home"


def manifest_path(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-home.json"


def manifest(job_id: str) -> dict | None:
    try:
        doc = json.loads(manifest_path(job_id).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and home_dir(job_id).is_dir() else None


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, path)


def copy_sparse(src: Path, dst: Path) -> None:
    """shutil.copy2 that keeps a sparse file's holes (core/runtime/sparsefile.py): a 64 MiB
    preallocated checkpoint with a few blocks of data stays a few blocks on disk."""
    sparsefile.copy_file(src, dst)
    shutil.copystat(src, dst)


def summary(job_id: str, now: float | None = None) -> dict[str, Any] | None:
    """The last checkpoint at home, for `gpu status`: age, size, files, from where."""
    doc = manifest(job_id)
    if doc is None:
        return None
    now = time.time() if now is None else now
    return {"age_s": round(max(0.0, now - float(doc.get("at", now))), 1),
            "bytes": int(doc.get("bytes", 0)), "files": len(doc.get("files", {})),
            "generation": doc.get("generation"), "target": doc.get("target"),
            "attempt": doc.get("attempt"), "moved_bytes": int(doc.get("moved_bytes", 0))}


def describe(info: dict | None) -> str:
    """"checkpoint 3 (12.4 MB, 40 s old)": how events and `gpu status` name it."""
    if not info:
        return "no checkpoint"
    gen = f" {info['generation']}" if info.get("generation") else ""
    return f"checkpoint{gen} ({human_bytes(info['bytes'])}, {human_age(info['age_s'])} old)"


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def human_age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
