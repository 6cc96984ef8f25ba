"""The upload cache on a remote target's host: the runtime, each bundle, each data set and each
wheelhouse (remotedeps.py) sent once per content hash under the target's root. An entry counts only once its `.ready` marker
exists, and the marker is written last (after the upload's size was checked and it was moved
into place), so an upload cut off halfway is never taken as complete: the next launch uploads
it again. Markers seen lately are remembered here for less than `gpu gc`'s minimum age; gc's
side (`cache_scan`, `cache_evict`) judges and removes entries on the host
(core/runtime/cachescan.py). A mixin of `core.providers.remote.RemoteProvider`, which holds
the transport, the host's root (`remote()`, `_root()`), the locks (`_lock`) and `_present`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from core import paths
from core.jobs.store import Job
from core.packaging import objects
from core.packaging.local_data import DataListing, list_data
from core.providers.runtimeship import runtime_archive
from core.providers.spec import local_data
from core.transport.base import quote

PRESENT_TTL_S = 300.0  # under core.engine.storage.MIN_AGE_S: gc never frees what we remember


class RemoteCache:
    """What a remote target uploads, each once (see the module's docstring)."""

    async def _missing(self, markers: list[str]) -> set[str]:
        """Which cache markers are absent on the host; present ones are touched (their mtime is
        the entry's last use for `gpu gc`) and remembered for less than gc's minimum age."""
        now = time.monotonic()
        todo = [m for m in markers if now - self._present.get(m, -PRESENT_TTL_S) >= PRESENT_TTL_S]
        if not todo:
            return set()
        script = ("for f in " + " ".join(quote(m) for m in todo)
                  + '; do if [ -e "$f" ]; then touch "$f"; else printf \'%s\\n\' "$f"; fi; done')
        r = await self.transport.run(script, check="checking the upload cache")
        missing = set(r.out.splitlines())
        self._present.update({m: now for m in set(todo) - missing})
        return missing

    # -- storage (`gpu gc`) -------------------------------------------------------------------

    async def _cachescan(self, *args: str, input: bytes | None = None) -> dict:
        remote = await self.remote()
        return await self._run_runtime("cachescan.py", [*args, remote["root"]], input=input,
                                       check=f"reading the caches on {self.name}")

    async def cache_scan(self) -> dict:
        """The host's cache entries under the target's root, judged on the host."""
        return await self._cachescan("scan")

    async def cache_evict(self, entries: list[str]) -> dict:
        """Remove cache entries on the host (a venv a job holds is kept); forget them here."""
        done = await self._cachescan("evict", input="\n".join(entries).encode() + b"\n")
        self._present.clear()
        return done

    # -- uploading ----------------------------------------------------------------------------

    async def _upload_file(self, local: Path, final: str, marker: str) -> int:
        """One file into the cache: a temporary name, a size check, a rename, then the marker."""
        part = f"{final}.part-{uuid.uuid4().hex[:8]}"
        size = local.stat().st_size
        sent = await self.transport.put_file(local, part)
        await self._settle(part, size, f'mv -f "$p" {quote(final)}', marker,
                           check=f"storing {local.name} on {self.name}")
        return sent

    async def _upload_tree(self, archive: bytes | Path, final: str, marker: str, *, gzip: bool = True) -> int:
        """A tar.gz (or, `gzip=False`, a plain tar: wheels are zip files already) unpacked into
        a folder of the cache, marker last."""
        part = f"{final}.part-{uuid.uuid4().hex[:8]}.tar" + (".gz" if gzip else "")
        if isinstance(archive, bytes):
            sent = await self.transport.put_bytes(archive, part)
            size = len(archive)
        else:
            sent = await self.transport.put_file(archive, part)
            size = archive.stat().st_size
        tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
        await self._settle(part, size, f't={quote(tmp)}; rm -rf "$t"; mkdir -p "$t"; '
                           f'tar -x{"z" if gzip else ""}f "$p" -C "$t"; rm -f "$p"; rm -rf {quote(final)}; mv "$t" {quote(final)}',
                           marker, check=f"unpacking into {final} on {self.name}")
        return sent

    async def _settle(self, part: str, size: int, place: str, marker: str, *, check: str) -> None:
        """An upload's last step on the host, one command: `part` ($p there) must hold `size`
        bytes (else it is removed and the step fails), then `place` puts it where it belongs,
        and only then is the marker written (and remembered here)."""
        await self.transport.run(
            f"set -e; p={quote(part)}; [ $(wc -c < \"$p\") -eq {size} ] || "
            f"{{ rm -f \"$p\"; echo 'the upload arrived incomplete' >&2; exit 1; }}; "
            f"{place}; : > {quote(marker)}", check=check)
        self._present[marker] = time.monotonic()

    async def _ensure_runtime(self) -> tuple[str, int]:
        rhash, data = runtime_archive()
        final = f"{self._root()}/runtime/{rhash}"
        marker = f"{final}.ready"
        async with self._lock(marker):
            if await self._missing([marker]):
                return final, await self._upload_tree(data, final, marker)
        return final, 0

    async def _ensure_bundle(self, job: Job) -> tuple[str, int]:
        """The bundle's manifest in the host's cache, over the host's object store.

        One round trip sends the manifest (gzip'd) and the host answers which of its objects
        it lacks (codetree.py `missing`, which touches the ones it has, so gc leaves them);
        one upload carries only those (a tar.gz, each object checked against its hash as
        `receive` places it); one last command puts the manifest in place, then its marker.
        A one-line change sends one object and the manifest. Returns (manifest path, bytes)."""
        root = self._root()
        final = f"{root}/bundles/{job.bundle_hash}.json"
        marker = f"{root}/bundles/{job.bundle_hash}.ready"
        store = f"{root}/objects"
        async with self._lock(marker):
            # the manifest too: a host that held this bundle as a .tar.gz (before objects) has
            # its marker but no manifest
            if not await self._missing([marker, final]):
                return final, 0
            manifest = objects.manifest_file(job.bundle_hash)
            try:
                text = await asyncio.to_thread(manifest.read_bytes)
            except FileNotFoundError:
                raise RuntimeError(f"bundle {job.bundle_hash[:12]} is gone from {manifest.parent}; "
                                   "submit the job again") from None
            # the objects it names, from the bytes just read (not a second read of the file)
            names = {row[2] for row in json.loads(text)["entries"] if row[1] != "l"}
            part = f"{final}.part-{uuid.uuid4().hex[:8]}"
            incoming = f"{store}/.incoming-{uuid.uuid4().hex[:8]}.tar.gz"
            try:
                return final, await self._send_objects(job, text, names, part, incoming, final, marker)
            except Exception:
                with contextlib.suppress(Exception):  # best effort: gc does not see part files
                    await self.transport.run(f"rm -f {quote(part)} {quote(incoming)}", timeout=30)
                raise

    async def _send_objects(self, job: Job, text: bytes, names: set[str], part: str, incoming: str,
                            final: str, marker: str) -> int:
        """_ensure_bundle's three steps; returns the bytes sent."""
        store = f"{self._root()}/objects"
        packed = gzip.compress(text, compresslevel=1)  # 2 MB of JSON: 25 ms at 1, 70 ms at 6, 3% larger
        ask = await self._runtime_command("codetree.py", ["missing", store, part])
        r = await self.transport.run(
            f'set -e; mkdir -p {quote(store)}; m={quote(part)}; gzip -dc > "$m"; {ask}',
            input=packed, check=f"asking {self.name} which files it lacks")
        lacking = objects_to_send(r.out, names)
        sent = len(packed)
        place = ":"
        if lacking:
            tarball = await asyncio.to_thread(_pack_objects, lacking)
            try:
                sent += await self.transport.put_file(tarball, incoming)
                size = tarball.stat().st_size
            finally:
                tarball.unlink(missing_ok=True)
            receive = await self._runtime_command("codetree.py", ["receive", store])
            place = (f'i={quote(incoming)}; [ $(wc -c < "$i") -eq {size} ] || {{ rm -f "$i"; '
                     "echo 'the upload arrived incomplete' >&2; exit 1; }; "
                     f'{receive} < "$i" > /dev/null || {{ rm -f "$i"; exit 1; }}; rm -f "$i"')
        await self._settle(part, len(text), f'{place}; mv -f "$p" {quote(final)}', marker,
                           check=f"storing bundle {job.bundle_hash[:12]} on {self.name}")
        return sent

    async def _ensure_data(self, job: Job) -> tuple[dict[str, str], int]:
        """Each data set once per content hash (an hf:// set is its copy downloaded at submit)."""
        links: dict[str, str] = {}
        sent = 0
        for item in local_data(job):
            h = job.plan.get("data", {}).get(item["name"])
            if not h:
                raise RuntimeError(f"data {item['name']} has no content hash in the plan")
            final = f"{self._root()}/data/{h}"
            marker = f"{final}.ready"
            links[item["name"]] = final
            async with self._lock(marker):
                if not await self._missing([marker]):
                    continue
                src = Path(item["source"])
                if not src.exists():
                    raise RuntimeError(f"data {item['name']}: {src} no longer exists here")
                # the same judge as at submit: credential files are never uploaded
                listing = await asyncio.to_thread(list_data, src, item["name"])
                if src.is_file():
                    sent += await self._upload_file(src, final, marker)
                elif src.is_dir():
                    archive = await asyncio.to_thread(_pack_dir, listing)
                    try:
                        sent += await self._upload_tree(archive, final, marker)
                    finally:
                        archive.unlink(missing_ok=True)
                else:
                    raise RuntimeError(f"data {item['name']}: {src} no longer exists here")
        return links, sent


def objects_to_send(answer: str, names: set[str]) -> list[str]:
    """The objects a host said it lacks, kept only where the manifest names them: the host's
    answer never chooses a file to read here (a path, another hash: dropped). The one choke
    point between a host's `missing` answer and what is packed (tests/providers/test_storage.py)."""
    return [d for d in dict.fromkeys(answer.split()) if d in names]


def _pack_objects(digests: list[str]) -> Path:
    """The named objects as a temporary tar.gz (gzip level 1: fast, and text shrinks)."""
    fd, name = tempfile.mkstemp(prefix=".objects-", suffix=".tar.gz", dir=paths.cache_dir())
    with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz:
        objects.object_stream(digests, gz)
    return Path(name)


def _pack_dir(listing: DataListing) -> Path:
    """A data folder as a temporary tar.gz: the files `list_data` lets go, links not followed."""
    fd, name = tempfile.mkstemp(prefix=".data-", suffix=".tar.gz", dir=paths.cache_dir())
    os.close(fd)
    out = Path(name)
    with tarfile.open(out, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for rel in listing.files:
            full = listing.source / rel
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            tar.add(full, arcname=rel, recursive=False)
    return out
