"""A Modal job's volume: its checkpoint and metric rows read back when a call hands nothing back
(Modal stopped it at its timeout, it crashed, it was cancelled), the checkpoint a call's result
carries, and the volume's removal once the outputs are home.

Every read is bounded (`volume_read_timeout_s`, the listing's sizes, MARKER_MAX), names are
checked as the shared writer checks them, and a failed read changes nothing at home.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

from core import paths
from core.jobs.store import Job
from core.packaging import checkpoints
from core.packaging.safe_extract import clean_name, safe_extract, write_files
from core.providers import logmirror

# the job's volume is mounted at REMOTE/state and modal_function keeps the job folder in its
# job/: the checkpoint folder, as the volume names it from outside
VOLUME_CKPT = "job/ckpt"
VOLUME_METRICS = "job/metrics.jsonl"
METRICS_READ_MAX = 32 << 20  # the most of the volume's metrics file read after a lost call
NO_RESULT = ("timeout", "error", "cancelled")  # a call that ended and handed nothing back
VOLUME_READ_TIMEOUT_S = 600.0
MARKER_MAX = 64 << 20  # a completion marker names every file: large for 100k files, not more
log = logging.getLogger("gpu-router.modal")


def _bounded(chunks: Iterable[bytes], size: int, stop: threading.Event) -> Iterator[bytes]:
    """`chunks`, stopped when the read is given up or when they pass `size` (the listing's)."""
    got = 0
    for block in chunks:
        if stop.is_set():
            raise TimeoutError("the volume read was given up")
        got += len(block)
        if got > size:
            raise ValueError(f"more bytes than the {size} listed")
        yield block


def _adopt(staged: Path, cache: Path | None) -> None:
    """The folder a volume read filled becomes the attempt's cache (`cache`), or goes (None)."""
    if cache is None:
        shutil.rmtree(staged, ignore_errors=True)
        return
    shutil.rmtree(cache, ignore_errors=True)
    os.replace(staged, cache)
    (cache / ".done").touch()


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            yield block


def _marked_files(raw: bytes) -> dict[str, list[int]] | None:
    """The files a `gpu.checkpoint_saved()` marker names, {rel: [size, mtime_ns]}, or None
    when there is no marker or it is not one (names are checked by the caller)."""
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    named = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(named, dict):
        return None
    out: dict[str, list[int]] = {}
    for rel, meta in named.items():
        if not (isinstance(meta, list) and len(meta) >= 2 and all(isinstance(v, int) for v in meta[:2])):
            return None
        out[rel] = [meta[0], meta[1]]
    return out


class ModalVolume:
    """The volume side of a modal target (mixed into ModalProvider)."""

    def _ckpt_cache(self, job: Job) -> Path:
        return paths.cache_dir() / "modal-ckpt" / job.id / str(job.attempt)

    def _checkpoint_scan(self, job: Job) -> dict:
        """The checkpoint a call handed back with its result (the volume keeps the original for
        the next call here), or the one read from the volume after a call that handed nothing
        back: unpacked or read once into a cache and listed as a final copy."""
        from core.runtime import ckptscan

        cache = self._ckpt_cache(job)
        if not (cache / ".done").exists():
            state, value = self._results.get((job.id, job.attempt), ("running", None))
            archive = value.get("ckpt") if state == "done" and isinstance(value, dict) else None
            if not archive:
                return {"exists": False, "files": {}, "marker": None}
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True)
            tmp = cache / "ckpt.tar.gz"
            tmp.write_bytes(bytes(archive))
            safe_extract(tmp, cache / "ckpt", caps=self.caps)
            tmp.unlink()
            (cache / ".done").touch()
        return ckptscan.scan_copy(str(cache / "ckpt"))

    async def checkpoint_scan(self, job: Job) -> dict:
        state, _ = self._results.get((job.id, job.attempt), ("running", None))
        if state in NO_RESULT and not (self._ckpt_cache(job) / ".done").exists():
            await self._checkpoint_from_volume(job)
        return await asyncio.to_thread(self._checkpoint_scan, job)

    async def _checkpoint_from_volume(self, job: Job) -> None:
        """A call Modal stopped at its timeout (or that crashed, or was cancelled) hands no
        result back, but its last checkpoint is on the job's volume: read it into the cache
        the result's copy would have gone to, so it comes home by the same path. Bounded by
        `volume_read_timeout_s`; a failed read is logged and changes nothing (home keeps the
        previous checkpoint, the next call here still reads the volume's)."""
        cache = self._ckpt_cache(job)
        cache.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".vol-{job.attempt}-", dir=cache.parent)) / "ckpt"
        stop = threading.Event()
        limit = float(self.options.get("volume_read_timeout_s", VOLUME_READ_TIMEOUT_S))
        ok = False
        try:
            ok, notes = await asyncio.wait_for(asyncio.to_thread(self._read_volume_checkpoint, job, folder, stop),
                                               limit)
        except (asyncio.TimeoutError, TimeoutError):
            stop.set()  # the reading thread stops at its next block and removes what it staged
            log.warning("job %s: the checkpoint on Modal volume %s was not read within %g s; home keeps "
                        "the previous one", job.short_id, self.volume_name(job), limit)
            return
        except Exception as exc:  # noqa: BLE001 - a failed read never fails the job
            log.warning("job %s: the checkpoint on Modal volume %s could not be read (%s: %s); home keeps "
                        "the previous one", job.short_id, self.volume_name(job), type(exc).__name__, exc)
            notes = []
        for note in notes:
            log.warning("job %s: checkpoint on Modal volume %s: %s", job.short_id, self.volume_name(job), note)
        await asyncio.to_thread(_adopt, folder.parent, cache if ok else None)
        await self._metrics_from_volume(job, limit)

    async def _metrics_from_volume(self, job: Job, limit: float) -> None:
        """The rows the job wrote in the call's last moments (after the stream's last read,
        before Modal stopped it) are only in its metrics file on the volume: the rows home
        lacks are added (logmirror.add_missing). Bounded like the checkpoint's read."""
        stop = threading.Event()
        try:
            rows = await asyncio.wait_for(asyncio.to_thread(self._read_volume_metrics, job, stop), limit)
            added = await asyncio.to_thread(logmirror.add_missing, self.local_dir(job), rows)
        except (asyncio.TimeoutError, TimeoutError):
            stop.set()
            log.warning("job %s: the metrics on Modal volume %s were not read within %g s",
                        job.short_id, self.volume_name(job), limit)
            return
        except Exception as exc:  # noqa: BLE001 - a failed read never fails the job
            log.warning("job %s: the metrics on Modal volume %s could not be read (%s: %s)",
                        job.short_id, self.volume_name(job), type(exc).__name__, exc)
            return
        if added:
            log.info("job %s: %d metric row(s) the call's stream had not carried came from volume %s",
                     job.short_id, added, self.volume_name(job))

    def _read_volume_metrics(self, job: Job, stop: threading.Event) -> bytes:
        import modal

        vol = modal.Volume.from_name(self.volume_name(job), client=self.client())
        path = VOLUME_METRICS
        for entry in vol.iterdir("/" + path.rsplit("/", 1)[0]):
            if entry.path.strip("/") == path:
                if int(entry.size) > METRICS_READ_MAX:
                    raise ValueError(f"{entry.size} bytes, over the {METRICS_READ_MAX} read after a lost call")
                data = b"".join(_bounded(vol.read_file(entry.path), int(entry.size), stop))
                return data[: data.rfind(b"\n") + 1]  # whole rows only
        return b""

    def _read_volume_checkpoint(self, job: Job, folder: Path, stop: threading.Event) -> tuple[bool, list[str]]:
        """The job's last complete checkpoint from its volume into `folder`: (whether one came,
        notes). Complete is ckptscan's rule: the files `gpu.checkpoint_saved()`'s marker names,
        each with the size it recorded and none written after the marker; without a marker the
        whole folder, which no call writes any more. Names are the server's word: only plain
        names inside the checkpoint folder are read. A file the marker says home already has
        (same size and mtime, ckptscan's identity for an unchanged file) is copied from home
        instead of downloaded. All or nothing: a file missing or cut short brings none."""
        import modal
        from modal.volume import FileEntryType

        try:
            vol = modal.Volume.from_name(self.volume_name(job), client=self.client())
            prefix = VOLUME_CKPT + "/"
            files: dict[str, Any] = {}
            notes: list[str] = []
            marker_entry = None
            listed = 0
            for entry in vol.iterdir("/" + VOLUME_CKPT, recursive=True):
                listed += 1
                if listed > self.caps.max_files * 2 + 1000 or stop.is_set():
                    return False, [f"stopped listing the volume after {listed} entries"]
                rel = entry.path[len(prefix):] if entry.path.startswith(prefix) else ""
                if not rel or clean_name(rel) != rel:
                    if entry.path.rstrip("/") != VOLUME_CKPT:
                        notes.append(f"{entry.path[:200]!r}: a name outside the checkpoint folder, refused")
                    continue
                if entry.type == FileEntryType.DIRECTORY:
                    continue
                if entry.type != FileEntryType.FILE:
                    notes.append(f"{rel}: not a regular file, left on the volume")
                elif rel == checkpoints.MARKER:
                    marker_entry = entry
                elif not rel.startswith(checkpoints.MARKER + "."):  # not the marker's temporary file
                    files[rel] = entry
            if not files:
                return False, notes
            marker_bytes = b""
            if marker_entry is not None and marker_entry.size <= MARKER_MAX:
                marker_bytes = b"".join(_bounded(vol.read_file(marker_entry.path), marker_entry.size, stop))
            marked = _marked_files(marker_bytes)
            if marker_entry is not None and marked is None:
                return False, [*notes, "its completion marker is unreadable: not brought home"]
            if marked is not None:
                for rel, meta in marked.items():
                    entry = files.get(rel)
                    if entry is None or entry.size != meta[0] or (entry.mtime and marker_entry.mtime
                                                                  and entry.mtime > marker_entry.mtime):
                        return False, [*notes, f"{rel[:200]!r}: missing, or changed after its marker "
                                               "(a save was under way): not brought home"]
                take = {rel: files[rel] for rel in marked}
            else:
                take = files
            total = sum(e.size for e in take.values())
            if total > self.caps.max_bytes or len(take) > self.caps.max_files:
                return False, [*notes, f"{len(take)} files, {total} bytes: over the caps, not brought home"]
            home = checkpoints.home_dir(job.id)
            have = (checkpoints.manifest(job.id) or {}).get("files", {})

            def source(rel: str, entry: Any) -> Iterator[bytes]:
                meta, known = (marked or {}).get(rel), have.get(rel) or {}
                local = home / rel
                if meta and [known.get("size"), known.get("mtime_ns")] == list(meta[:2]) \
                        and local.is_file() and not local.is_symlink() and local.stat().st_size == entry.size:
                    return _bounded(_file_chunks(local), entry.size, stop)  # unchanged: home has it
                return _bounded(vol.read_file(entry.path), entry.size, stop)

            items = [(rel, e.size, lambda rel=rel, e=e: source(rel, e)) for rel, e in sorted(take.items())]
            if marker_bytes:
                items.append((checkpoints.MARKER, len(marker_bytes), lambda: iter([marker_bytes])))
            notes += write_files(folder, ((rel, size, opened()) for rel, size, opened in items), caps=self.caps)
            for rel, e in take.items():
                got = folder / rel
                if not got.is_file() or got.stat().st_size != e.size:
                    return False, [*notes, f"{rel[:200]}: not read whole: not brought home"]
            return not stop.is_set(), notes
        finally:
            if stop.is_set():
                shutil.rmtree(folder.parent, ignore_errors=True)

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path, progress: Any = None) -> dict:
        from core.runtime import ckptscan

        return await asyncio.to_thread(ckptscan.pack, str(self._ckpt_cache(job) / "ckpt"), str(archive), rels)

    def _delete_volume(self, job: Job) -> None:
        """The job's volume held its state between attempts; once its outputs are home it goes."""
        import modal

        try:
            modal.Volume.objects.delete(self.volume_name(job), allow_missing=True, client=self.client())
        except Exception:  # noqa: BLE001 - a volume left behind costs little and is named for the job
            pass
