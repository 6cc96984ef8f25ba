"""Checkpoints come home while a job runs, so a lost session can resume somewhere else.

The supervisor calls `mirror` for each running job, at most every `MIRROR_EVERY_S` seconds
(looks.py): the target lists its `ckpt/` folder with hashes (core/runtime/ckptscan.py, on the
host), and only once that listing is one complete checkpoint (looks.complete_set) are the files
home lacks packed there, brought home and unpacked through `safe_extract`. Where the job calls
`gpu.checkpoint_saved()` on a target that mirrors (local, ssh, slurm, pbs), each save is frozen
into `ckpt-gens/<generation>/` beside ckpt/ the moment it is complete (core/runtime/ckptgen.py):
the listing then names the newest whole generation ("generation_dir") and the pack reads from
it, every file opened first, so the job's next save cannot make the two round trips disagree.
The supervisor hears of a new generation from its poll (Poll.checkpoint) and mirrors at once
rather than on the clock.

Why a module of its own: this is the one way a checkpoint reaches home. A new version is
assembled beside the old one (unchanged files copied from it) and swapped in by renames, so a
crash never leaves home with half a checkpoint (home.py holds the layout). A sparse file is
unpacked from the archive with each whole block of zeros left a hole and copied into the new
version keeping them; it still counts its full length against the caps. What home takes is
bounded before anything moves: every file counts its full length, the checkpoint must fit the
target's output cap (`max_output_bytes`: it becomes an output when the job ends), and home must
keep its reserve free after it (pause.py: a full disk pauses mirroring). FIFOs, sockets, devices
and links in ckpt/ are never opened (ckptscan) and said once.

A job that holds secrets may name a checkpoint file after one (core/secrets/names.py). Home
then keeps it under the masked name, in ckpt-home/, in the manifest's keys and in the copy of
the marker, and the real name only sealed (`"sealed"` in its manifest entry, readable with the
job's secret values alone; restore.py opens it). The job's own marker and listing are compared
with each other as they are (real names, in memory only), so what is complete does not change.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.jobs.store import Job
from core.packaging.checkpoints.home import (MARKER, copy_sparse, describe, home_dir,
                                             human_bytes, manifest, manifest_path, summary,
                                             write_json)
from core.packaging.checkpoints.looks import Say, complete_set, read_look, save_look, signature, tell
from core.packaging.checkpoints.pause import pause, pause_if_full, still_paused
from core.packaging.safe_extract import OutputCaps, masked_names, safe_extract
from core.secrets import names
from core.runtime.diskspace import DISK_FULL, disk_full_text, is_enospc


@dataclass
class CopyProgress:
    """How far a copy home has come: `expected` the bytes of the files it moves (known once
    the listing is read), `moved` the bytes arrived so far (where the target streams them). A
    newer checkpoint supersedes a copy not yet half way (core/engine/ckptcopy.py)."""
    expected: int = 0
    moved: int = 0
    generation: int | None = None

    def fraction(self) -> float:
        return min(1.0, self.moved / self.expected) if self.expected else 0.0


async def mirror(job: Job, provider: Any, say: Say | None = None, now: float | None = None,
                 progress: CopyProgress | None = None, ended: bool = False) -> dict | None:
    """One look at the target's checkpoint folder; brings home a new complete checkpoint.
    Returns the new manifest when one came home, else None. `say` records a note on the job
    (an event): skipped entries, a checkpoint over the cap, a pause for a full disk at home and
    its end, each said once. Raises what the transport raises (the caller logs it: mirroring
    never fails a job). `progress`, if given, is kept up to date while the files come home.

    `ended`: the attempt is over, having exited by itself with status 0 (done, or saved when
    asked to before a cancel), and this is the last look at its folder. The folder of a job
    that never calls `gpu.checkpoint_saved()` counts only once two looks agree, and the looks
    on the clock are up to MIRROR_EVERY_S apart: a job that saves every step and then ends
    left a listing no earlier look had seen, so its one last look never counted and its final
    checkpoint stayed on the host (issue 38). Here, such a listing is looked at once more at once; nothing
    of the job writes there any more, so the two agree (a straggler still writing makes them
    differ, and then nothing comes home, as before). Not for a job killed or failed: it may
    have died mid-save, and two looks at a torn file agree too."""
    import asyncio  # lazy: off `gpu submit`'s start
    if not hasattr(provider, "checkpoint_scan"):
        return None  # a target that can show none
    now = time.time() if now is None else now
    look = read_look(job.id)
    if look.get("paused") and await still_paused(job, look, say, now):
        return None
    scan = await provider.checkpoint_scan(job)
    await _note_skipped(job, scan, look, say)
    files, generation = complete_set(scan, look)
    look.update(signature=signature(scan), at=now)
    save_look(job.id, look)
    if files is None and ended and scan.get("files") and not isinstance(scan.get("marker"), dict):
        scan = await provider.checkpoint_scan(job)  # the second look the rule needs (see above)
        files, generation = complete_set(scan, look)
        look.update(signature=signature(scan), at=now)
        save_look(job.id, look)
    if files is None:
        return None
    old = manifest(job.id) or {}
    have = old.get("files", {})
    if {r: v[2] for r, v in files.items()} == {r: h.get("sha256") for r, h in have.items()} \
            and generation in (None, old.get("generation")):
        return None  # home has this one, under the same names: no keychain asked (the usual look)
    mask = await asyncio.to_thread(names.for_job, job) if getattr(job, "request", None) else None
    shown: Callable[[str], str] = mask.mask if mask else (lambda rel: rel)
    wanted: dict[str, dict] = {}
    real: dict[str, str] = {}  # the name home shows -> the name the job wrote
    for rel, v in sorted(files.items()):
        name = shown(rel)
        if name in real:
            raise ValueError(f"two checkpoint files ({name}) differ only in a secret value in their "
                             "names; home cannot keep both under masked names")
        real[name] = rel
        wanted[name] = {"size": v[0], "mtime_ns": v[1], "sha256": v[2]}
        if mask and name != rel:
            wanted[name]["sealed"] = mask.seal(rel)
    if {r: w["sha256"] for r, w in wanted.items()} == {r: h.get("sha256") for r, h in have.items()} \
            and (generation is None or generation == old.get("generation")):
        return None  # home has this one already
    changed = sorted(rel for rel, w in wanted.items() if have.get(rel, {}).get("sha256") != w["sha256"])
    caps = getattr(provider, "caps", None) or OutputCaps.from_options(getattr(provider, "options", None))
    total = sum(_cost(v) for v in files.values())
    if total > caps.max_bytes:
        key = json.dumps([generation, sorted(w["sha256"] for w in wanted.values())])
        if look.get("over_cap") != key:
            look["over_cap"] = key
            save_look(job.id, look)
            await tell(say, f"checkpoint not mirrored: {human_bytes(total)} (every file at its full length, "
                            f"sparse ones too) is over the {human_bytes(caps.max_bytes)} output cap of "
                            f"{provider.name} (max_output_bytes); home keeps "
                            + describe(summary(job.id)))
        return None
    need = total + sum(_cost(files[real[rel]]) for rel in changed)  # the new version, and what comes over
    where = home_dir(job.id).parent
    where.mkdir(parents=True, exist_ok=True)
    if await pause_if_full(job, look, say, need, now, where):
        return None
    try:
        if progress is not None:
            progress.expected = sum(wanted[rel]["size"] for rel in changed)
        new_manifest, moved = await _bring(job, provider, where, wanted, changed, old, caps, real, mask,
                                           scan.get("generation_dir"), progress)
    except OSError as exc:
        if not is_enospc(exc):
            raise
        await pause(job, look, say, need, now, disk_full_text(where))
        return None
    if new_manifest is None:
        return None
    if isinstance(new_manifest, str):  # the copy home stopped at a full disk
        await pause(job, look, say, need, now, new_manifest)
        return None
    new_manifest.update(generation=generation if generation is not None else int(old.get("generation") or 0) + 1,
                        at=time.time(), target=provider.name, attempt=job.attempt,
                        moved_bytes=int(old.get("moved_bytes", 0)) + moved, last_moved=moved,
                        bytes=sum(w["size"] for w in wanted.values()))
    write_json(manifest_path(job.id), new_manifest)
    return new_manifest


async def _note_skipped(job: Job, scan: dict, look: dict, say: Say | None) -> None:
    """Links, FIFOs, sockets, devices in ckpt/: named once (new ones only), never opened."""
    skipped = [tuple(x) for x in scan.get("skipped") or [] if isinstance(x, (list, tuple)) and len(x) == 2]
    said = set(look.get("skipped_said") or [])
    new = [(rel, why) for rel, why in skipped if rel not in said]
    if not new:
        return
    look["skipped_said"] = sorted(said | {rel for rel, _ in new})[:500]
    more = int(scan.get("skipped_more") or 0)
    listed = ", ".join(f"{rel} ({why})" for rel, why in new[:5])
    rest = len(new) - 5 + more
    await tell(say, f"checkpoint folder: not mirrored, only regular files are: {listed}"
                    + (f" and {rest} more" if rest > 0 else ""))


def _cost(v: list) -> int:
    """A listed file's cost against the caps (ckptscan: its full length), its size if unlisted."""
    return int(v[3]) if len(v) > 3 else int(v[0])


async def _bring(job: Job, provider: Any, where: Path, wanted: dict, changed: list[str], old: dict,
                 caps: OutputCaps, real: dict[str, str], mask: Any,
                 gen_dir: str | None = None,
                 progress: CopyProgress | None = None) -> tuple[dict | str | None, int]:
    """Pack the changed files there (by the names the job wrote: `real`), unpack them here
    (under the names home shows: `mask`), assemble the new version: (its manifest, or None
    when a file changed meanwhile, or the disk-full text; bytes moved)."""
    import asyncio  # lazy: off `gpu submit`'s start
    moved = 0
    staging = Path(tempfile.mkdtemp(prefix=".ckpt-new-", dir=where))
    try:
        if changed:
            fd, name = tempfile.mkstemp(prefix=".ckpt-", suffix=".tar.gz", dir=staging.parent)
            os.close(fd)
            archive = Path(name)
            try:
                frozen = {"generation": gen_dir} if gen_dir else {}
                if progress is not None:
                    frozen["progress"] = lambda n: setattr(progress, "moved", n)
                packed = await provider.checkpoint_pack(job, [real[n] for n in changed], archive, **frozen)
                moved = archive.stat().st_size
                if progress is not None:
                    progress.moved = max(progress.moved, progress.expected)  # here: what is left is local
                if isinstance(packed, dict) and packed.get("gone"):
                    return None, moved  # pruned before it was pinned: a newer one is there
                with masked_names(mask.mask if mask else None):
                    notes = await asyncio.to_thread(safe_extract, archive, staging / "new", caps=caps)
            finally:
                archive.unlink(missing_ok=True)
            full = next((n for n in notes if DISK_FULL in n), None)
            if full is not None:
                return full[full.index(DISK_FULL):], moved
            if mask:
                await asyncio.to_thread(_rename_marker, staging / "new" / MARKER, mask.mask)
        return await asyncio.to_thread(_assemble, job.id, staging, wanted, changed, old), moved
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _rename_marker(marker: Path, rename: Callable[[str], str]) -> None:
    """The marker's file names through `rename` (masked coming home, real going out); a marker
    that is not one (the job's own bytes) is dropped rather than kept with names unchecked."""
    try:
        doc = json.loads(marker.read_text(encoding="utf-8", errors="surrogateescape"))
        doc["files"] = {rename(str(rel)): v for rel, v in dict(doc["files"]).items()}
    except FileNotFoundError:
        return
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
        marker.unlink(missing_ok=True)
        return
    marker.write_text(json.dumps(doc, separators=(",", ":")))


def _assemble(job_id: str, staging: Path, wanted: dict, changed: list[str], old: dict) -> dict | None:
    """The new version beside the old one (unchanged files copied from it, the rest from what
    came home), checked against the listing's hashes, then swapped in by renames."""
    import hashlib

    version = staging / "version"
    version.mkdir()
    current = home_dir(job_id)
    for rel, w in wanted.items():
        src = (staging / "new" / rel) if rel in changed else (current / rel)
        if not src.is_file() or src.is_symlink() or src.stat().st_size != w["size"]:
            return None  # it changed again while it was packed: the next look takes it
        h = hashlib.sha256()
        with open(src, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != w["sha256"]:
            return None
        dst = version / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        copy_sparse(src, dst)
    marker = staging / "new" / MARKER
    if marker.is_file():
        shutil.copy2(marker, version / MARKER)
    elif (current / MARKER).is_file() and not changed:
        shutil.copy2(current / MARKER, version / MARKER)
    retired = staging / "old"
    if current.exists():
        os.replace(current, retired)
    os.replace(version, current)
    return {"files": wanted}
