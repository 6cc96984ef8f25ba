"""The home checkpoint goes out to the target a job resumes on, under the names the job wrote.

Why a module of its own: a resume on another target reads home the other way round. For a
remote target `restore_archive` packs it for the provider to place into that target's `ckpt/`
before the launcher starts; a local target's ckpt/ is replaced in place (`restore_local`),
sparse files kept sparse. Names home keeps masked (a job that named a file after a secret) are
unsealed with the values the launch read, so the job finds its files under the names it wrote;
a seal that no longer opens (the value changed) restores that file under its masked name.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Mapping

from core import paths
from core.packaging.checkpoints.home import MARKER, copy_sparse, home_dir, manifest
from core.secrets import names


def real_names(job_id: str, secrets: Mapping[str, str] | None = None) -> dict[str, str]:
    """The home checkpoint's names -> the names the job wrote: sealed ones opened with the
    job's secret values (those its launch just read); one that does not open keeps its masked
    name. Only in memory, and only on the way to the target."""
    doc = manifest(job_id) or {}
    sealed = {rel: e["sealed"] for rel, e in (doc.get("files") or {}).items()
              if isinstance(e, dict) and e.get("sealed")}
    if not sealed:
        return {}
    mask = names.for_restore(job_id, secrets)
    out = {}
    for rel, token in sealed.items():
        name = mask.unseal(token) if mask else None
        if name is not None and name != rel and "/".join(p for p in name.split("/") if p not in ("", ".", "..")) == name:
            out[rel] = name
    return out


def _marker_bytes(src: Path, rename: dict[str, str]) -> bytes | None:
    """The home copy of the marker with the job's own names back, or None when there is none."""
    try:
        doc = json.loads((src / MARKER).read_text())
        doc["files"] = {rename.get(rel, rel): v for rel, v in dict(doc["files"]).items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return None
    return json.dumps(doc, separators=(",", ":")).encode()


def restore_archive(job_id: str, secrets: Mapping[str, str] | None = None) -> Path | None:
    """The home checkpoint as a temporary tar.gz for a new target, under the names the job
    wrote (`real_names`), or None when there is none (the caller removes the file)."""
    if manifest(job_id) is None:
        return None
    src = home_dir(job_id)
    rename = real_names(job_id, secrets)
    fd, name = tempfile.mkstemp(prefix=".ckpt-restore-", suffix=".tar.gz", dir=paths.cache_dir())
    os.close(fd)
    with tarfile.open(name, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src).as_posix()
            if path.is_file() and not path.is_symlink() and rel != MARKER:
                tar.add(path, arcname=rename.get(rel, rel), recursive=False)
        marker = _marker_bytes(src, rename)
        if marker is not None:
            info = tarfile.TarInfo(MARKER)
            info.size, info.mtime, info.mode = len(marker), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(marker))
    return Path(name)


def restore_local(job_id: str, dest: Path, secrets: Mapping[str, str] | None = None) -> bool:
    """Replace `dest` (a ckpt/ folder on this machine) with the home checkpoint, under the
    names the job wrote (`real_names`)."""
    if manifest(job_id) is None:
        return False
    src = home_dir(job_id)
    rename = real_names(job_id, secrets)
    tmp = dest.with_name(dest.name + ".restore")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if not path.is_file() or path.is_symlink() or rel == MARKER:
            continue
        target = tmp / rename.get(rel, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_sparse(path, target)
    marker = _marker_bytes(src, rename)
    if marker is not None:
        (tmp / MARKER).write_bytes(marker)
        os.utime(tmp / MARKER, ns=((src / MARKER).stat().st_atime_ns, (src / MARKER).stat().st_mtime_ns))
    shutil.rmtree(dest, ignore_errors=True)
    # generations frozen there before belong to the checkpoint being replaced (ckptgen.py)
    shutil.rmtree(dest.with_name(dest.name + "-gens"), ignore_errors=True)
    os.replace(tmp, dest)
    return True
