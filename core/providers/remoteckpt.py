"""A remote job's checkpoints (core.packaging.checkpoints), both ways: its ckpt/ listed with
hashes on the host (core/runtime/ckptscan.py; the listings asked for on one tick made by one
process there), only the named files packed there straight into a stream home reads (no archive file on the host), and a moved job's
checkpoint from home uploaded beside its job folder before its launcher starts. A mixin of
`core.providers.remote.RemoteProvider`, which holds the transport, the job's folders,
`_run_runtime` and `gathered`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable
from pathlib import Path

from core.jobs.store import Job
from core.packaging import checkpoints
from core.packaging.safe_extract import OutputCaps
from core.providers.lookbatch import Gather
from core.transport.base import CommandFailed, TransportError, quote

TAR_ALLOWANCE = 1 << 20  # a streamed checkpoint's tar and gzip framing over its files' bytes
# A restored checkpoint keeps its holes (a sparse file home came from a sparse file): tar writes
# a plain member dense, so each big regular file (never a link: find -type f) is given back its
# zero blocks where the host has util-linux's fallocate; elsewhere it stays dense, as it was.
DIG_HOLES = ('if command -v fallocate >/dev/null 2>&1; then find "$J/ckpt" -type f -size +1M '
             '-exec fallocate --dig-holes {} \\; 2>/dev/null; fi; ')


class RemoteCheckpoints:
    """A remote job's checkpoints, listed, brought home and restored (see the module's docstring)."""

    async def checkpoint_scan(self, job: Job) -> dict:
        """The job's ckpt/ on the host, listed with hashes there (core/runtime/ckptscan.py);
        the listings asked for together (the supervisor asks for every job's on the same
        tick) are made by one process on the host."""
        await self.remote()

        async def scan_many(folders: list[str]) -> list[dict]:
            cap = OutputCaps.from_options(self.options).max_bytes  # nothing over it is hashed
            doc = await self._run_runtime("ckptscan.py", ["scan-many", "--max-bytes", str(cap), *folders],
                                          check=f"listing checkpoints on {self.name}")
            return doc["scans"]
        return await self.gathered("ckptscan", lambda: Gather(scan_many)).ask(f"{self.job_dir(job)}/ckpt")

    async def checkpoint_pack(self, job: Job, rels: list[str], archive: Path, generation: str | None = None,
                              progress: Callable[[int], None] | None = None) -> dict:
        """Only the named files of the job's ckpt/ (or of the frozen `generation` the listing
        named), packed on the host straight into the stream home reads into `archive` (no
        archive file on the host: a checkpoint as large as the host's free space still comes
        home). The stream is capped at the target's max_output_bytes plus the tar's own
        headers (TAR_ALLOWANCE); past it the copy stops and says so (OverCap). `progress`
        hears the bytes come home as they arrive (a newer checkpoint may supersede a copy
        that has not got far: core/engine/ckptcopy.py)."""
        await self.remote()
        which = ["--generation", generation] if generation else []
        what = f"the checkpoint of job {job.short_id}"
        cap = OutputCaps.from_options(self.options).max_bytes + TAR_ALLOWANCE + 1024 * len(rels)
        command = await self._runtime_command("ckptscan.py", ["pack", *which, f"{self.job_dir(job)}/ckpt", "-", *rels])
        result, _ = await self.transport.stream_to(command, archive, max_bytes=cap, what=what, on_bytes=progress)
        try:
            if result.code != 0:
                raise CommandFailed(f"packing {what}", result)
            try:
                return json.loads(result.err.strip().splitlines()[-1])
            except (IndexError, ValueError):
                raise TransportError(f"packing {what} on {self.name} ended without its report: "
                                     f"{result.err.strip()[-400:] or 'nothing on stderr'}") from None
        except BaseException:
            archive.unlink(missing_ok=True)
            raise

    async def _restore_checkpoint(self, job: Job, env_secrets: dict[str, str]) -> tuple[str, int]:
        """A moved job's checkpoint from home, uploaded beside its job folder; returns the shell
        line that puts it into ckpt/ before the launcher starts, and the bytes sent. Names home
        masked are unsealed with the secret values this launch read (checkpoints.real_names)."""
        if not job.handle.get("restore_checkpoint"):
            return "", 0
        archive = await asyncio.to_thread(checkpoints.restore_archive, job.id, env_secrets)
        if archive is None:
            return "", 0
        try:
            remote_archive = f"{self.job_dir(job)}.ckpt-restore.tar.gz"
            await self.transport.run(f"mkdir -p {quote(self._root() + '/jobs')}")
            sent = await self.transport.put_file(archive, remote_archive)
        finally:
            archive.unlink(missing_ok=True)
        # never under an attempt that started (a restarted supervisor preparing it again)
        # the generations frozen there before belong to the checkpoint being replaced
        line = (f'if [ ! -e "$A/started" ]; then rm -rf "$J/ckpt" "$J/ckpt-gens"; mkdir -p "$J/ckpt" "$J/ckpt-gens"; '
                f'tar -xzf {quote(remote_archive)} -C "$J/ckpt"; {DIG_HOLES}rm -f "$J/.ckpt-hashes.json"; fi; '
                f'rm -f {quote(remote_archive)}')
        return line, sent
