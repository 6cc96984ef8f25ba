"""Checkpoints come home while a job runs, so a lost session can resume somewhere else.

The supervisor calls `mirror` for each running job, at most every `MIRROR_EVERY_S` seconds:
the target lists its `ckpt/` folder with hashes (core/runtime/ckptscan.py, on the host), and
only once that listing is one complete checkpoint are the files home lacks packed there,
brought home and unpacked through `safe_extract`. "Complete" is what `gpu.checkpoint_saved()`
marked (its marker names every file's size and mtime: a save already overwriting them waits
for the next look), or, for a job that never calls it, a listing that did not change between
two looks. Where the job calls `gpu.checkpoint_saved()` on a target that mirrors (local, ssh,
slurm, pbs), each save is frozen into `ckpt-gens/<generation>/` beside ckpt/ the moment it is
complete (core/runtime/ckptgen.py): the listing then names the newest whole generation
("generation_dir") and the pack reads from it, every file opened first, so the job's next
save cannot make the two round trips disagree. The supervisor hears of a new generation from
its poll (Poll.checkpoint) and mirrors at once rather than on the clock. Home keeps exactly
one checkpoint, the last complete one:

    jobs/<id>/ckpt-home/        its files (the job's own layout)
    jobs/<id>/ckpt-home.json    manifest: {path: {size, mtime_ns, sha256}}, generation, when,
                                from which target and attempt, bytes moved so far

A new version is assembled beside the old one (unchanged files copied from it) and swapped in
by renames, so a crash never leaves home with half a checkpoint. A sparse file stays sparse on
every copy on this machine (core/runtime/sparsefile.py): unpacked from the archive with each
whole block of zeros left a hole, copied into the new version, into a local target's ckpt/ at
a restore and into runs/<id>/checkpoint/ across disks by its data regions alone; it still
counts its full length against the caps.

What home takes is bounded before anything moves: every file counts its full length (a sparse
file too: the archive and the hashing handle its full length), the checkpoint must
fit the target's output cap (`max_output_bytes`: it becomes an output when the job ends), and
home must keep RESERVE_BYTES free after it. FIFOs, sockets, devices and links in ckpt/ are
never opened (ckptscan) and said once. A full disk at home is said once (an event, and a line
in `gpu status`), and mirroring pauses: it looks at the free space again after BACKOFF_S,
doubling, and says when it resumes; it never retries into the full disk every tick. At a resume on another
target, `restore_archive` packs it for the provider to place into that target's `ckpt/`
before the launcher starts.

A job that holds secrets may name a checkpoint file after one (core/secrets/names.py). Home
then keeps it under the masked name, in ckpt-home/, in the manifest's keys and in the copy of
the marker, and the real name only sealed (`"sealed"` in its manifest entry, readable with the
job's secret values alone). The look file keeps a digest of the listing, not its names. The
job's own marker and listing are compared with each other as they are (real names, in memory
only), so what is complete does not change. A restore unseals the names with the values the
launch read, so the job finds its files under the names it wrote; a seal that no longer opens
(the value changed) restores that file under its masked name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from core import paths
from core.jobs.store import Event, Job
from core.packaging import runswriter
from core.packaging.safe_extract import OutputCaps, masked_names, safe_extract
from core.secrets import names
from core.runtime import sparsefile
from core.runtime.diskspace import DISK_FULL, disk_full_text, free_bytes, is_enospc

MIRROR_EVERY_S = float(os.environ.get("GPU_ROUTER_CKPT_EVERY_S", 15.0))
MARKER = ".complete"
# what a checkpoint coming home must leave free at home (the store, logs, other jobs' outputs)
RESERVE_BYTES = int(os.environ.get("GPU_ROUTER_CKPT_RESERVE_BYTES", 256 << 20))
BACKOFF_S = (30.0, 600.0)  # a paused mirror looks at the free space again after 30 s, doubling to 10 min
PAUSED = "checkpoint mirroring paused: "
RESUMED = "checkpoint mirroring resumed: "
Say = Callable[[str], Awaitable[None]]
_LOOKS: dict[tuple[str, str], dict] = {}  # the last look per job, kept here too: a full disk may refuse the file


def home_dir(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-home"


def _manifest_path(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-home.json"


def _look_path(job_id: str) -> Path:
    return paths.jobs_dir() / job_id / "ckpt-look.json"


def manifest(job_id: str) -> dict | None:
    try:
        doc = json.loads(_manifest_path(job_id).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and home_dir(job_id).is_dir() else None


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, path)


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


def _complete_set(scan: dict, look: dict) -> tuple[dict | None, int | None]:
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
    if look.get("signature") == _signature(scan) or scan.get("final"):
        return files, None  # settled: the same listing twice, or a listing that cannot change
    return None, None


def due(job_id: str, seen: dict[str, float], force: bool = False) -> bool:
    """Once per MIRROR_EVERY_S window of the clock, the same window for every job, so the
    listings a host is asked for arrive on one tick and go as one command (remoteckpt.py)."""
    window = float(time.monotonic() // MIRROR_EVERY_S)
    if not force and seen.get(job_id) == window:
        return False
    seen[job_id] = window
    return True


def _look_key(job_id: str) -> tuple[str, str]:
    return (str(paths.jobs_dir()), job_id)


def _read_look(job_id: str) -> dict:
    held = _LOOKS.get(_look_key(job_id))
    if held is not None:
        return held
    try:
        doc = json.loads(_look_path(job_id).read_text())
    except (OSError, ValueError):
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _save_look(job_id: str, look: dict) -> None:
    """Kept in memory and, where the disk lets it, in ckpt-look.json (so a restarted
    supervisor neither says a pause again nor retries into the full disk at once)."""
    _LOOKS[_look_key(job_id)] = look
    try:
        _look_path(job_id).parent.mkdir(parents=True, exist_ok=True)
        _write_json(_look_path(job_id), look)
    except OSError:
        pass


def _cost(v: list) -> int:
    """A listed file's cost against the caps (ckptscan: its full length), its size if unlisted."""
    return int(v[3]) if len(v) > 3 else int(v[0])


async def _say(say: Say | None, text: str) -> None:
    if say is not None:
        await say(text)


def paused_note(events: list[Event]) -> str | None:
    """The pause `gpu status` shows: the last mirroring event, when it says paused."""
    for e in reversed(events):
        if e.reason.startswith(PAUSED):
            return e.reason
        if e.reason.startswith(RESUMED):
            return None
    return None


async def _pause(job: Job, look: dict, say: Say | None, need: int, now: float, why: str) -> None:
    """Stop mirroring until home has room again; said once (the caller's event)."""
    first = "paused" not in look
    look["paused"] = {"since": now, "need": need, "wait_s": BACKOFF_S[0], "next_try": now + BACKOFF_S[0]}
    _save_look(job.id, look)
    if first:
        await _say(say, f"{PAUSED}{why}; it needs {human_bytes(need + RESERVE_BYTES)} free (with the "
                        f"{human_bytes(RESERVE_BYTES)} reserve) and resumes by itself when there is room "
                        "(free space at home, or set max_output_bytes lower)")


async def _still_paused(job: Job, look: dict, say: Say | None, now: float) -> bool:
    """While paused: True until the back-off has passed and home has room again (then it says
    it resumes). Only free space is looked at: nothing is tried on the full disk."""
    held = look["paused"]
    if now < float(held.get("next_try", 0)):
        return True
    where = home_dir(job.id).parent
    free = free_bytes(where)
    if free is not None and free < int(held.get("need", 0)) + RESERVE_BYTES:
        held["wait_s"] = min(float(held.get("wait_s", BACKOFF_S[0])) * 2, BACKOFF_S[1])
        held["next_try"] = now + held["wait_s"]
        _save_look(job.id, look)
        return True
    look.pop("paused")
    _save_look(job.id, look)
    free_text = f"{human_bytes(free)} free at {where}" if free is not None else f"room at {where}"
    await _say(say, f"{RESUMED}{free_text}")
    return False


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
    await _say(say, f"checkpoint folder: not mirrored, only regular files are: {listed}"
                    + (f" and {rest} more" if rest > 0 else ""))


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
    look = _read_look(job.id)
    if look.get("paused") and await _still_paused(job, look, say, now):
        return None
    scan = await provider.checkpoint_scan(job)
    await _note_skipped(job, scan, look, say)
    files, generation = _complete_set(scan, look)
    look.update(signature=_signature(scan), at=now)
    _save_look(job.id, look)
    if files is None and ended and scan.get("files") and not isinstance(scan.get("marker"), dict):
        scan = await provider.checkpoint_scan(job)  # the second look the rule needs (see above)
        files, generation = _complete_set(scan, look)
        look.update(signature=_signature(scan), at=now)
        _save_look(job.id, look)
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
            _save_look(job.id, look)
            await _say(say, f"checkpoint not mirrored: {human_bytes(total)} (every file at its full length, "
                            f"sparse ones too) is over the {human_bytes(caps.max_bytes)} output cap of "
                            f"{provider.name} (max_output_bytes); home keeps "
                            + describe(summary(job.id)))
        return None
    need = total + sum(_cost(files[real[rel]]) for rel in changed)  # the new version, and what comes over
    where = home_dir(job.id).parent
    where.mkdir(parents=True, exist_ok=True)
    free = free_bytes(where)
    if free is not None and free < need + RESERVE_BYTES:
        await _pause(job, look, say, need, now, disk_full_text(where, free))
        return None
    try:
        if progress is not None:
            progress.expected = sum(wanted[rel]["size"] for rel in changed)
        new_manifest, moved = await _bring(job, provider, where, wanted, changed, old, caps, real, mask,
                                           scan.get("generation_dir"), progress)
    except OSError as exc:
        if not is_enospc(exc):
            raise
        await _pause(job, look, say, need, now, disk_full_text(where))
        return None
    if new_manifest is None:
        return None
    if isinstance(new_manifest, str):  # the copy home stopped at a full disk
        await _pause(job, look, say, need, now, new_manifest)
        return None
    new_manifest.update(generation=generation if generation is not None else int(old.get("generation") or 0) + 1,
                        at=time.time(), target=provider.name, attempt=job.attempt,
                        moved_bytes=int(old.get("moved_bytes", 0)) + moved, last_moved=moved,
                        bytes=sum(w["size"] for w in wanted.values()))
    _write_json(_manifest_path(job.id), new_manifest)
    return new_manifest


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


def _signature(scan: dict) -> str:
    """A digest of the listing (names, sizes, times, hashes): two looks compare by it, and the
    look file holds no name a job chose."""
    listing = {rel: v[:3] for rel, v in (scan.get("files") or {}).items()}
    return hashlib.sha256(json.dumps(listing, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()


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
        _copy_sparse(src, dst)
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


def _copy_sparse(src: Path, dst: Path) -> None:
    """shutil.copy2 that keeps a sparse file's holes (core/runtime/sparsefile.py): a 64 MiB
    preallocated checkpoint with a few blocks of data stays a few blocks on disk."""
    sparsefile.copy_file(src, dst)
    shutil.copystat(src, dst)


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
        _copy_sparse(path, target)
    marker = _marker_bytes(src, rename)
    if marker is not None:
        (tmp / MARKER).write_bytes(marker)
        os.utime(tmp / MARKER, ns=((src / MARKER).stat().st_atime_ns, (src / MARKER).stat().st_mtime_ns))
    shutil.rmtree(dest, ignore_errors=True)
    # generations frozen there before belong to the checkpoint being replaced (ckptgen.py)
    shutil.rmtree(dest.with_name(dest.name + "-gens"), ignore_errors=True)
    os.replace(tmp, dest)
    return True


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
        _write_json(_settled_path(job_id), {**doc, "dir": str(dest)})
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
    _write_json(_manifest_path(job_id), doc)
    _settled_path(job_id).unlink(missing_ok=True)
    return {**info, "where": str(home)}


def discard(job_id: str) -> None:
    """The job ended: its checkpoint now lives with its outputs or is cleaned by the caps."""
    shutil.rmtree(home_dir(job_id), ignore_errors=True)
    _LOOKS.pop(_look_key(job_id), None)
    for p in (_manifest_path(job_id), _look_path(job_id)):
        p.unlink(missing_ok=True)
