"""What comes home from a remote target: its job.log mirrored into the local `jobs/<id>/job.log`
(`sync_log`), its metrics read from the remote file by offset, the attempt's exit.json, the
outputs as one archive unpacked by `core.packaging.safe_extract`, and `gpu fetch`'s named
paths. A mixin of `core.providers.remote.RemoteProvider`, which holds the transport, the job's
folders (`job_dir`, `_adir`, `log_path`) and `_run_runtime`.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import uuid
from pathlib import Path

from core import paths
from core.jobs.store import Job
from core.packaging import runswriter
from core.packaging.safe_extract import OutputCaps, safe_extract
from core.transport.base import TransportError, Unreachable, quote

LOG_CHUNK = 4 << 20
METRICS_CHUNK = 8 << 20


class RemoteFetch:
    """A remote job's log, metrics, exit and outputs, brought home (see the module's docstring)."""

    async def sync_log(self, job: Job) -> None:
        """Append what is new in the remote job.log to the local mirror (jobs/<id>/job.log)."""
        local = self.log_path(job)
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            offset = local.stat().st_size
        except FileNotFoundError:
            offset = 0
        # a job moved here: the local mirror holds the earlier targets' logs up to log_base
        offset = max(0, offset - int(job.handle.get("log_base") or 0))
        try:
            await self.remote()
            data, _ = await self.transport.read_from(f"{self.job_dir(job)}/job.log", offset, LOG_CHUNK)
        except TransportError:
            return  # poll says why; the mirror catches up once the host answers
        if data:
            with open(local, "ab") as f:
                f.write(data)

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        try:
            await self.remote()
            data, size = await self.transport.read_from(f"{self.job_dir(job)}/metrics.jsonl",
                                                         offset, METRICS_CHUNK)
        except TransportError:
            return b"", offset
        if 0 <= size < offset:  # the file was replaced: start again from the top
            return b"", 0
        cut = data.rfind(b"\n") + 1  # whole lines only; the rest waits for its newline
        return data[:cut], offset + cut

    async def _read_small(self, path: str, limit: int = 1 << 20) -> bytes | None:
        data, size = await self.transport.read_from(path, 0, limit)
        return None if size < 0 else data

    async def read_exit(self, job: Job) -> dict | None:
        raw = await self._read_small(f"{self._adir(job)}/exit.json")
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        """The out/ folder as one archive, unpacked by safe_extract; plus job.log and metrics."""
        notes: list[str] = []
        await self.remote()
        await self.sync_log(job)
        jd = self.job_dir(job)
        try:
            r = await self.transport.run(
                f"set -e; cd {quote(jd)}; mkdir -p out; "
                "tar -czf outputs.tar.gz.part -C out . && mv -f outputs.tar.gz.part outputs.tar.gz; "
                "wc -c < outputs.tar.gz", check="packing the outputs")
            size = int(r.out.split()[-1])
            caps = OutputCaps.from_options(self.options)  # the same caps as the local target
            cap = caps.max_bytes
            if size > cap:
                notes.append(f"outputs are {size} bytes packed, over the {cap} byte cap: "
                             f"left on {self.name} in {jd}/out")
            else:
                # into gpu-router's home: runs/ is written only by runswriter (through safe_extract)
                fd, tmp_name = tempfile.mkstemp(prefix=".outputs-", suffix=".tar.gz", dir=paths.home())
                os.close(fd)
                tmp = Path(tmp_name)
                try:
                    await self.transport.get_file(f"{jd}/outputs.tar.gz", tmp, max_bytes=cap)
                    notes += await asyncio.to_thread(safe_extract, tmp, dest, caps=caps)
                finally:
                    tmp.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory(prefix=".metrics-", dir=paths.home()) as got:
                try:
                    await self.transport.get_file(f"{jd}/metrics.jsonl", Path(got, "m"), max_bytes=1 << 30)
                except TransportError:
                    pass  # no metrics logged
                else:
                    await asyncio.to_thread(runswriter.copy_file, dest, "metrics.jsonl", Path(got, "m"))
        except Unreachable:
            raise  # not now: the supervisor tries again on its next tick
        except (TransportError, ValueError) as exc:
            notes.append(f"outputs could not be brought home from {self.name}: {exc}")
        log = self.log_path(job)
        if log.is_file():
            await asyncio.to_thread(runswriter.copy_file, dest, "job.log", log)
        return notes

    async def fetch_paths(self, job: Job, rels: list[str], archive: Path, caps: OutputCaps) -> dict:
        """`gpu fetch`: the named paths of the job's working folder on the host, packed there
        without following a link and copied into the local `archive` (within the caps).
        Returns the packer's account ({"gone": true} when the folder was cleaned up)."""
        await self.remote()
        jd = self.job_dir(job)
        inner = f"code/{job.plan.get('workdir') or ''}".rstrip("/")
        packed = f"{jd}/fetch-{uuid.uuid4().hex[:12]}.tar.gz"
        doc = await self._run_runtime(
            "workdir.py", ["pack", jd, inner, packed, str(caps.max_bytes), str(caps.max_files), *rels],
            check=f"packing {len(rels)} path(s) of job {job.short_id} on {self.name}")
        if doc.get("gone") or doc.get("replaced"):
            return doc
        try:
            await self.transport.get_file(packed, archive, max_bytes=caps.max_bytes + (64 << 20))
        finally:
            await self.transport.run(f"rm -f {quote(packed)}")
        return doc
