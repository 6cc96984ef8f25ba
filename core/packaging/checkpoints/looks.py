"""When the mirror looks at a job's checkpoint folder, what it remembers between two looks,
and when a listing is one complete checkpoint.

Why a module of its own: "complete" is the rule everything else waits on. It is what
`gpu.checkpoint_saved()` marked (its marker names every file's size and mtime: a save already
overwriting them waits for the next look), or, for a job that never calls it, a listing that
did not change between two looks. The look file (jobs/<id>/ckpt-look.json) keeps a digest of
the last listing, not its names (a job that holds secrets may name a file after one), and what
has been said already, so each note on a job is said once, also across a supervisor restart.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Awaitable, Callable

from core import paths
from core.packaging.checkpoints.home import write_json

MIRROR_EVERY_S = float(os.environ.get("GPU_ROUTER_CKPT_EVERY_S", 15.0))
Say = Callable[[str], Awaitable[None]]
_LOOKS: dict[tuple[str, str], dict] = {}  # the last look per job, kept here too: a full disk may refuse the file


def look_path(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-look.json"


def due(job_id: str, seen: dict[str, float], force: bool = False) -> bool:
    """Once per MIRROR_EVERY_S window of the clock, the same window for every job, so the
    listings a host is asked for arrive on one tick and go as one command (remoteckpt.py)."""
    window = float(time.monotonic() // MIRROR_EVERY_S)
    if not force and seen.get(job_id) == window:
        return False
    seen[job_id] = window
    return True


def complete_set(scan: dict, look: dict) -> tuple[dict | None, int | None]:
    """The files of a complete checkpoint in this listing, and its generation, or (None, None)."""
    files = scan.get("files") or {}
    if not files:
        return None, None
    marker = scan.get("marker")
    if isinstance(marker, dict) and isinstance(marker.get("files"), dict):
        named = marker["files"]
        if all(rel in files and [files[rel][0], files[rel][1]] == list(v)[:2]
               for rel, v in named.items()):
            return {rel: files[rel] for rel in named}, int(marker.get("generation") or 0)
        return None, None  # a save is under way: the marked files are changing
    if look.get("signature") == signature(scan) or scan.get("final"):
        return files, None  # settled: the same listing twice, or a listing that cannot change
    return None, None


def signature(scan: dict) -> str:
    """A digest of the listing (names, sizes, times, hashes): two looks compare by it, and the
    look file holds no name a job chose."""
    listing = {rel: v[:3] for rel, v in (scan.get("files") or {}).items()}
    return hashlib.sha256(json.dumps(listing, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()


def _look_key(job_id: str) -> tuple[str, str]:
    return (str(paths.jobs_dir()), job_id)


def read_look(job_id: str) -> dict:
    held = _LOOKS.get(_look_key(job_id))
    if held is not None:
        return held
    try:
        doc = json.loads(look_path(job_id).read_text())
    except (OSError, ValueError):
        doc = {}
    return doc if isinstance(doc, dict) else {}


def save_look(job_id: str, look: dict) -> None:
    """Kept in memory and, where the disk lets it, in ckpt-look.json (so a restarted
    supervisor neither says a pause again nor retries into the full disk at once)."""
    _LOOKS[_look_key(job_id)] = look
    try:
        look_path(job_id).parent.mkdir(parents=True, exist_ok=True)
        write_json(look_path(job_id), look)
    except OSError:
        pass


def forget(job_id: str) -> None:
    """The job ended: nothing of its looks is kept, in memory or on disk."""
    _LOOKS.pop(_look_key(job_id), None)
    look_path(job_id).unlink(missing_ok=True)


async def tell(say: Say | None, text: str) -> None:
    """A note on the job (an event), where the caller records them."""
    if say is not None:
        await say(text)
