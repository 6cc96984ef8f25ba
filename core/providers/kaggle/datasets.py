"""The kaggle target's uploads: private data sets made once per content hash (the runtime, each
local data set, a wheelhouse) and the project's chain of code data sets (code.py).

Kaggle mounts data sets read-only into a kernel and processes a new one before it can be
mounted, so each is named by what it holds, made only when missing, and waited for.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from pathlib import Path

from core.jobs.store import Job
from core.packaging import objects
from core.packaging.local_data import list_data
from core.providers.kaggle import code as kaggle_code


class KaggleDataSets:
    """Data sets of a kaggle target (mixed into KaggleProvider: uses `user`, `_call`, options)."""

    def _dataset(self, slug: str, files: dict[str, bytes | Path]) -> int:
        """A private data set `slug` holding `files`, made once: bytes sent (0 when it exists)."""
        from kagglesdk.blobs.types.blob_api_service import ApiBlobType, ApiStartBlobUploadRequest
        from kagglesdk.datasets.types.dataset_api_service import ApiCreateDatasetRequest, ApiDatasetNewFile
        import requests

        user = self.user()
        state = self._dataset_state(user, slug)
        if state == "READY":
            return 0
        if state is not None and state not in ("FAILED", "DELETED"):
            self._wait_ready(user, slug)  # made by an earlier submit, still being processed
            return 0
        tokens, sent = [], 0
        timeout = float(self.options.get("upload_timeout_s") or 3600)
        for fname, body in files.items():
            data = body.read_bytes() if isinstance(body, Path) else body
            start = ApiStartBlobUploadRequest()
            start.type = ApiBlobType.DATASET
            start.name = fname
            start.content_length = len(data)
            start.last_modified_epoch_seconds = int(time.time())
            answer = self._call("blobs", "start_blob_upload", start)
            put = requests.put(answer.create_url, data=data, timeout=timeout)
            put.raise_for_status()
            sent += len(data)
            f = ApiDatasetNewFile()
            f.token = answer.token
            tokens.append(f)
        create = ApiCreateDatasetRequest()
        create.owner_slug, create.slug = user, slug
        create.title = f"gpu-router {slug}"[:50]
        create.license_name = "unknown"
        create.is_private = True
        create.files = tokens
        answer = self._call("datasets", "create_dataset", create)
        if answer.error:
            raise RuntimeError(f"Kaggle refused data set {slug}: {answer.error}")
        self._wait_ready(user, slug)
        return sent

    def _dataset_state(self, user: str, slug: str) -> str | None:
        """READY, a processing state, FAILED ...; None when there is no such data set."""
        from kagglesdk.datasets.types.dataset_api_service import ApiGetDatasetStatusRequest

        req = ApiGetDatasetStatusRequest()
        req.owner_slug, req.dataset_slug = user, slug
        try:
            return self._call("datasets", "get_dataset_status", req).status.name
        except RuntimeError as exc:
            if "answered 404" in str(exc):
                return None
            raise

    def _wait_ready(self, user: str, slug: str, timeout_s: float = 900.0) -> None:
        """Kaggle processes a new data set before a kernel can mount it."""
        deadline = time.monotonic() + timeout_s
        delay = 0.2
        while True:
            state = self._dataset_state(user, slug)
            if state == "READY":
                return
            if state in (None, "FAILED", "DELETED") or time.monotonic() > deadline:
                raise RuntimeError(f"Kaggle data set {user}/{slug} is {state or 'missing'}, not ready")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _data_sets(self, job: Job) -> tuple[dict[str, str], list[str], int]:
        """Each local data set as its own data set, once per content hash."""
        keys, slugs, sent = {}, [], 0
        for item in job.request.get("data", []):
            if item["kind"] != "path":
                raise RuntimeError(f"data {item['name']}: only local data sets reach a kaggle target yet")
            listing = list_data(Path(item["source"]), item["name"])
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                for rel in listing.files:
                    src = listing.source / rel if rel else listing.source
                    tar.add(src, arcname=rel or listing.source.name, recursive=False)
            h = (job.plan.get("data") or {}).get(item["name"]) or hashlib.sha256(buf.getvalue()).hexdigest()
            key = f"{h[:32]}.gr"
            slug = f"gr-data-{h[:24]}"
            sent += self._dataset(slug, {key: buf.getvalue()})
            keys[item["name"]] = key
            slugs.append(f"{self.user()}/{slug}")
        return keys, slugs, sent

    def _code_sets(self, job: Job, room: int, say) -> tuple[list[str], str, list[str], int]:
        """The bundle's code as data sets of the project's chain (core/providers/kaggle_code.py):
        (the slugs to mount, the manifest's file name, the object tars' file names, bytes sent).
        Only the bundle's own data set can be new; one of the chain that Kaggle no longer has
        (deleted there) starts a new base."""
        user = self.user()
        digests = objects.digests(job.bundle_hash)
        with kaggle_code.chain_of(user, job.project_dir) as chain:
            new_chain, own, mounts = kaggle_code.plan(chain, job.bundle_hash, digests, room)
            for slug in mounts:
                if slug == own["slug"]:
                    continue
                state = self._dataset_state(user, slug)
                if state in (None, "FAILED", "DELETED"):
                    say(f"code: data set {slug} of the chain is gone from Kaggle: a new base")
                    new_chain, own, mounts = kaggle_code.plan([], job.bundle_hash, digests, room)
                    break
                if state != "READY":
                    self._wait_ready(user, slug)
            state = self._dataset_state(user, own["slug"])
            sent = 0 if state == "READY" else self._dataset(own["slug"], kaggle_code.set_files(own))
            kind = "base" if new_chain[0] is own else "delta"
            say(f"code: {kind} {own['slug']} " + (f"uploaded ({len(own['objects'])} objects, {sent} bytes)"
                                                    if sent else "already on Kaggle: nothing uploaded")
                + f"; the kernel mounts {len(mounts)} code data set(s)")
            chain[:] = new_chain
        held = {s["slug"]: s for s in new_chain}
        tars = [kaggle_code.objects_name(s) for s in mounts if held[s]["objects"]]
        return mounts, kaggle_code.manifest_name(job.bundle_hash), tars, sent
