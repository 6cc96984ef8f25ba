"""A job's end and its resume: the last checkpoint becomes an output, and comes home again.

Why a module of its own: when a job ends its home copy moves into `runs/<id>/checkpoint/`
(`settle`, through the one writer under runs/, core/packaging/runswriter.py) and home forgets
the job (`discard`); `gpu resume` checks that folder still holds what came home (`settled`)
and moves it back home for the next attempt (`reclaim`), where the launch restores it and the
mirror goes on from it. Each step reads or moves what a person may have touched, so each checks
the files and the folders on the way (no link followed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from core import paths
from core.packaging import runswriter
from core.packaging.checkpoints.home import MARKER, home_dir, manifest, manifest_path, write_json
from core.packaging.checkpoints.looks import forget


def settle(job_id: str, outputs: Path) -> str | None:
    """The job ended: its last checkpoint becomes an output (`runs/<id>/checkpoint/`), moved
    there rather than copied where home and the project share a disk. Its manifest stays at
    home (`ckpt-settled.json`), so a resume (`reclaim`) can check the files and open sealed
    names. Returns a note when it could not be kept.

    `outputs` is written through the one writer under runs/ (core/packaging/runswriter.py):
    runswriter.Refused (runs/ or runs/<id>/ a link, not a folder, not the person's) leaves here
    with the checkpoint still at home, for the caller to keep it there with the outputs."""
    src = home_dir(job_id)
    doc = manifest(job_id)
    if doc is None:
        discard(job_id)
        return None
    dest = outputs / "checkpoint"
    note = None
    try:
        with runswriter.open_folder(outputs) as folder:
            folder.move_in(src, "checkpoint")
        write_json(_settled_path(job_id), {**doc, "dir": str(dest)})
    except FileExistsError:
        note = f"the last checkpoint was not kept: {dest} already holds the job's own files"
    except OSError as exc:
        note = f"the last checkpoint could not be kept in {dest}: {exc}"
    discard(job_id)
    return note


def _settled_path(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-settled.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def settled(job_id: str, outputs: Path) -> dict[str, Any] | None:
    """The checkpoint an ended job can resume from, checked, without moving anything: home's
    own (a settle that could not move it) or the one settled into `runs/<id>/checkpoint/`.
    Returns {generation, bytes, files, sha256 (over the manifest), where, age_s}, or None when
    there is none. Raises UserError when the folder no longer holds what came home (a person
    changed, removed or added files): resuming from it would not be resuming."""
    from core.errors import UserError

    doc = manifest(job_id)
    where = home_dir(job_id)
    if doc is None:
        where = outputs / "checkpoint"
        try:
            doc = json.loads(_settled_path(job_id).read_text())
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict) or not os.path.lexists(where):
            return None
        _plain_folders(outputs, where)
        files = doc.get("files") or {}
        found = {p.relative_to(where).as_posix() for p in where.rglob("*")
                 if p.is_file() or p.is_symlink()} - {MARKER}
        odd = sorted(found - set(files))
        bad = sorted(rel for rel, e in files.items()
                     if not (where / rel).is_file() or (where / rel).is_symlink()
                     or _sha256(where / rel) != (e or {}).get("sha256"))
        if odd or bad:
            what = "; ".join(x for x in (
                f"changed or missing since it came home: {', '.join(bad[:5])}" if bad else "",
                f"not part of it: {', '.join(odd[:5])}" if odd else "") if x)
            raise UserError(f"the job's checkpoint in {where} is not the one that came home ({what})",
                            where=str(where),
                            fix="put the files back as they were (or move the extra ones out), "
                                "then resume again; to start over, submit the job again")
    listing = {rel: (e or {}).get("sha256") for rel, e in (doc.get("files") or {}).items()}
    return {"generation": doc.get("generation"), "bytes": int(doc.get("bytes", 0)),
            "files": len(listing), "where": str(where),
            "age_s": round(max(0.0, time.time() - float(doc.get("at", time.time()))), 1),
            "sha256": hashlib.sha256(json.dumps(listing, sort_keys=True).encode(
                "utf-8", "surrogateescape")).hexdigest()}


def _plain_folders(outputs: Path, where: Path) -> None:
    """UserError unless runs/, runs/<id>/ and its checkpoint/ are plain folders of the person's
    (never a link): a resume reads and moves what is there, and a link would have it read or
    move what lies elsewhere."""
    from core.errors import UserError

    try:
        with runswriter.open_folder(outputs, make=False) as folder:
            folder.check_dir("checkpoint")
    except (runswriter.Refused, OSError) as exc:
        why = f"{exc.where} is {exc.why}" if isinstance(exc, runswriter.Refused) else str(exc)
        raise UserError(f"the job's checkpoint in {where} cannot be read: {why}", where=str(where),
                        fix="put the checkpoint's folder back as a plain folder (no link on the "
                            "way), then resume again; to start over, submit the job again") from None


def reclaim(job_id: str, outputs: Path) -> dict[str, Any] | None:
    """A resumed job's next attempt starts: its settled checkpoint moves back home (checked
    again by `settled`), where the launch restores it and the mirror goes on from it; the
    job's end settles it into `runs/<id>/checkpoint/` again. Returns `settled`'s summary."""
    info = settled(job_id, outputs)
    if info is None or manifest(job_id) is not None:
        return info
    doc = json.loads(_settled_path(job_id).read_text())
    doc.pop("dir", None)
    home = home_dir(job_id)
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    try:
        with runswriter.open_folder(outputs, make=False) as folder:
            folder.move_out("checkpoint", home)
    except runswriter.Refused as exc:  # a link swapped in since `settled` looked
        from core.errors import UserError

        raise UserError(f"the job's checkpoint in {info['where']} cannot be read: {exc.where} is "
                        f"{exc.why}", where=info["where"],
                        fix="put the checkpoint's folder back as a plain folder, then resume again") from None
    write_json(manifest_path(job_id), doc)
    _settled_path(job_id).unlink(missing_ok=True)
    return {**info, "where": str(home)}


def discard(job_id: str) -> None:
    """The job ended: its checkpoint now lives with its outputs or is cleaned by the caps."""
    shutil.rmtree(home_dir(job_id), ignore_errors=True)
    forget(job_id)
    manifest_path(job_id).unlink(missing_ok=True)
