"""What comes home from a Kaggle session: its checkpoint folder, its outputs and `gpu fetch`'s
paths, all read from the session's output list once the session has ended.

Every file is downloaded within the target's caps into a private folder first, its name checked
as the shared writer checks names, then copied home by that writer (safe_extract), as for every
target.
"""

from __future__ import annotations

import asyncio
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from core import paths
from core.jobs.store import Job
from core.packaging.safe_extract import OutputCaps, safe_copy_tree


class KaggleOutputs:
    """Checkpoints and outputs of a kaggle target (mixed into KaggleProvider)."""

    def _ckpt_cache(self, job: Job) -> Path:
        return paths.cache_dir() / "kaggle-ckpt" / job.id / str(job.attempt)

    def _checkpoint_scan(self, job: Job) -> dict:
        """The attempt's checkpoint folder as the session's output holds it. Kaggle lists a
        session's output only once the session has ended, so what is listed is final: it is
        downloaded once (within the output caps) into a cache here and listed by the same code
        as on every host (`ckptscan.scan_copy`)."""
        from core.packaging.safe_extract import clean_name
        from core.runtime import ckptscan

        cache = self._ckpt_cache(job)
        folder = cache / "ckpt"
        if not (cache / ".done").exists():
            prefix = "gpu-router/job/ckpt/"
            files = [(name.removeprefix(prefix), url) for name, url in self._output(job)[0]
                     if name.startswith(prefix)]
            if not files:
                return {"exists": False, "files": {}, "marker": None}
            shutil.rmtree(cache, ignore_errors=True)
            folder.mkdir(parents=True)
            size = 0
            for rel, url in files:
                clean = clean_name(rel)
                if not clean:
                    continue
                data = self._download(url, self.caps.max_bytes - size)
                size += len(data)
                target = folder / clean
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            (cache / ".done").touch()
        return ckptscan.scan_copy(str(folder))

    async def checkpoint_scan(self, job: Job) -> dict:
        return await asyncio.to_thread(self._checkpoint_scan, job)

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path, progress: Any = None) -> dict:
        from core.runtime import ckptscan

        return await asyncio.to_thread(ckptscan.pack, str(self._ckpt_cache(job) / "ckpt"), str(archive), rels)

    def _bring(self, job: Job, wanted, finish) -> tuple[list[str], int, int]:
        """Download the session's output files `wanted(name) -> rel or None` into a private
        folder (names checked as the shared writer checks them), then `finish(folder)`: the
        files are copied home by the same writer and caps as every target's."""
        from core.packaging.safe_extract import clean_name

        files, _ = self._output(job)
        notes: list[str] = []
        got = size = 0
        with tempfile.TemporaryDirectory(prefix=".kaggle-", dir=paths.home()) as tmp:
            for name, url in files:
                rel = wanted(name)
                clean = clean_name(rel) if rel else None
                if rel and not clean:
                    notes.append(f"{name}: not a plain relative name; left on Kaggle")
                    continue
                if not clean:
                    continue
                if got >= self.caps.max_files:
                    notes.append("stopped: too many files; the rest stayed on Kaggle")
                    break
                data = self._download(url, self.caps.max_bytes - size)
                target = Path(tmp, clean)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                got, size = got + 1, size + len(data)
            notes += finish(Path(tmp)) or []
        return notes, got, size

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        def wanted(name: str) -> str | None:
            if name.startswith("gpu-router/job/out/"):
                return name.removeprefix("gpu-router/job/out/")
            return name.removeprefix("gpu-router/job/") if name in ("gpu-router/job/job.log",
                                                                     "gpu-router/job/metrics.jsonl") else None
        await self.sync_log(job)
        notes, _, _ = await asyncio.to_thread(
            self._bring, job, wanted, lambda tmp: safe_copy_tree(tmp, dest, caps=self.caps))
        return notes

    async def fetch_paths(self, job: Job, rels: list[str], archive: Path, caps: OutputCaps) -> dict:
        """`gpu fetch`: the job's folder is under Kaggle's working folder, so what it wrote there
        is part of the session's output; the named paths are packed into `archive`."""
        workdir = f"gpu-router/job/code/{job.plan.get('workdir') or ''}".rstrip("/") + "/"
        seen: set[str] = set()

        def wanted(name: str) -> str | None:
            if not name.startswith(workdir):
                return None
            rel = name.removeprefix(workdir)
            for r in rels:
                if r == "." or rel == r or rel.startswith(r.rstrip("/") + "/"):
                    seen.add(r)
                    return rel
            return None

        def pack(tmp: Path) -> list[str]:
            with tarfile.open(archive, "w:gz") as tar:
                for path in sorted(tmp.rglob("*")):
                    if path.is_file():
                        tar.add(path, arcname=path.relative_to(tmp).as_posix(), recursive=False)
            return []
        notes, got, size = await asyncio.to_thread(self._bring, job, wanted, pack)
        return {"files": got, "bytes": size, "missing": [r for r in rels if r not in seen],
                "refused": [], "capped": None, "notes": notes}
