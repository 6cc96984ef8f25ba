"""The `kaggle` target: Kaggle's free weekly GPU hours, through Kaggle's official SDK.

    targets:
      kg: {kind: kaggle, accelerator: t4x2, internet: false, offline: auto, max_resumes: 3}

How a job travels (every call is one of Kaggle's public API calls, made with `kagglesdk`, the
SDK the official `kaggle` package is built on):

- the project's code goes up as file objects in a chain of private data sets, each named by the
  hash of what it holds: a base, then per later submit a small delta with only the objects the
  chain lacks (core/providers/kaggle_code.py); gpu-router's runtime is one more (`gr-rt-<hash>`);
  an unchanged re-submit finds them (GetDatasetStatus) and uploads nothing but the kernel;
  each local data set likewise, once per content hash;
- dependencies: without internet (Kaggle's default), the project's requirements are resolved
  here for Kaggle's image into a wheelhouse (core/providers/kaggle_deps.py), shipped once as a
  private data set named by its hash, and installed with `--no-index`; this happens in the
  job's provisioning step, before the first upload, so a package that cannot be shipped is
  named before anything goes up;
- each attempt is a private kernel `gr-<short id>-a<attempt>` whose code is
  core/runtime/kaggle_kernel.py with the attempt's spec in front; GPU on, the accelerator from
  the request or the target, internet off unless the target says so, and a session timeout
  from the job's hours (within Kaggle's session limit);
- status: QUEUED -> provisioning, RUNNING -> running, COMPLETE -> done (or resumed, when it
  stopped at the session limit after saving), ERROR -> failed with Kaggle's failure message,
  CANCEL_* -> cancelled; the kernel's log carries the job's (already masked) log and metrics;
- outputs are the session's output files under gpu-router/job/out/, downloaded with the same
  caps and unpacked by the same writer as every other target's;
- a session that reaches the time limit resumes in a new kernel that reads the previous
  one's output (its checkpoint folder), up to `max_resumes` times.

Credentials (an API token, or the username and key of kaggle.json) live only in the keychain,
under `kaggle:<target name>`; they are read into this process's memory, never into an
environment, a file or a command line.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import shlex
import shutil
import tarfile
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from core import paths
from core.jobs.store import Job
from core.errors import UserError
from core.packaging.local_data import list_data
from core.packaging.safe_extract import OutputCaps, safe_copy_tree
from core.providers import kaggle_code, kaggle_deps, logmirror, probing
from core.providers.base import Poll, TargetInfo
from core.providers.logmirror import MirroredLog
from core.providers.service import ServiceTarget
from core.providers.service import secret_name as _secret_name
from core.packaging import objects, requirements
from core.providers.runtimeship import runtime_archive
from core.providers.spec import launch_spec
from core.runtime import RUNTIME_DIR

ACCELERATORS = {  # targetopts.KAGGLE_ACCELERATORS -> (Kaggle's machine shape, GPUs the router sees)
    "t4x2": ("NvidiaTeslaT4", [{"name": "T4", "memory_gb": 15.0}] * 2),
    "p100": ("NvidiaTeslaP100", [{"name": "P100", "memory_gb": 16.0}]),
}
SESSION_LIMIT_HOURS = 12.0  # Kaggle's limit for a GPU session
WEEKLY_HOURS = 30.0  # what Kaggle grants a verified account, when its quota cannot be read
CHECKPOINT_LEAD_S = 600.0  # ask the job to save this long before the session ends
API_TIMEOUT_S = 60.0  # one API call; uploads have upload_timeout_s
SCRATCH_VENVS = "/tmp/gpu-router/venvs"  # outside /kaggle/working: scratch, not the session's output
KERNEL_CODE = RUNTIME_DIR / "kaggle_kernel.py"
log = logging.getLogger("gpu_router.kaggle")
STATES = {"QUEUED": "provisioning", "NEW_SCRIPT": "provisioning", "RUNNING": "running"}



def secret_name(target: str) -> str:
    return _secret_name("kaggle", target)


def parse_credentials(text: str) -> dict[str, str]:
    """kaggle.json ({"username", "key"}) or an API token (KGAT_..., or {"token": ...})."""
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise UserError("the Kaggle credentials are not valid JSON",
                            fix="give kaggle.json as downloaded, or the API token itself") from None
        if isinstance(doc, dict) and doc.get("username") and doc.get("key"):
            return {"username": str(doc["username"]), "key": str(doc["key"])}
        if isinstance(doc, dict) and doc.get("token"):
            return {"token": str(doc["token"])}
        raise UserError("kaggle.json must hold username and key",
                        fix="download it again from kaggle.com > Settings > API > Create New Token")
    if not text or any(c.isspace() for c in text):
        raise UserError("a Kaggle API token is one word", fix="paste the token from kaggle.com > Settings > API")
    return {"token": text}


def _seconds(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value or 0)


def unreachable(exc: BaseException) -> RuntimeError:
    """A network failure talking to Kaggle, in one line: what failed, not urllib3's retry
    story (`HTTPSConnectionPool(host=...): Max retries exceeded ... Caused by ProxyError(...)`)."""
    import requests

    if isinstance(exc, requests.exceptions.ProxyError):
        cause = "the proxy did not let it through"
    elif isinstance(exc, requests.Timeout):
        cause = "timeout: no answer in time"
    elif isinstance(exc, requests.ConnectionError):
        cause = "no connection: offline, or its name did not resolve"
    else:
        cause = type(exc).__name__
    return RuntimeError(f"Kaggle could not be reached ({cause})")


class KaggleProvider(ServiceTarget, MirroredLog):
    credentials_name = "Kaggle credentials"
    credentials_from = "kaggle.json or a token"

    kind = "kaggle"

    def __init__(self, name: str, options: dict | None = None, max_jobs: int = 1,
                 session_limit_hours: float | None = None) -> None:
        self.name = name
        self.options = dict(options or {})
        self.max_jobs = max_jobs
        self.enabled = True
        acc = self.options.get("accelerator", "t4x2")
        self.accelerator = acc
        self.machine_shape, self.gpus = ACCELERATORS[acc]
        self.session_limit_h = min(float(session_limit_hours or SESSION_LIMIT_HOURS), SESSION_LIMIT_HOURS)
        self.caps = OutputCaps.from_options(self.options)
        self.max_resumes = int(self.options.get("max_resumes", 3))
        self._user: str | None = None

    @classmethod
    def from_config(cls, t) -> "KaggleProvider":
        return cls(t.name, t.options, max_jobs=t.max_jobs, session_limit_hours=t.session_limit_hours)

    # -- the client ---------------------------------------------------------------------------

    def _client(self):
        from kagglesdk import KaggleClient

        c = self._credentials()
        return KaggleClient(username=c.get("username"), password=c.get("key"), api_token=c.get("token"))

    def _bounded(self, client) -> None:
        """Every request of this client gives up after `api_timeout_s`: the SDK sends without a
        timeout, and a call that hangs would hold one of the supervisor's worker threads for
        good. The SDK's own session (made on entering the client) gets an adapter that sets it."""
        from requests.adapters import HTTPAdapter

        timeout = float(self.options.get("api_timeout_s") or API_TIMEOUT_S)

        class Bounded(HTTPAdapter):
            def send(self, request, **kw):  # noqa: ANN001 - requests' signature
                kw["timeout"] = kw.get("timeout") or timeout
                return super().send(request, **kw)

        session = getattr(client.http_client(), "_session", None)
        if session is not None:
            session.mount("http://", Bounded())
            session.mount("https://", Bounded())

    def _call(self, service: str, method: str, request: Any) -> Any:
        """One API call, blocking (run it in a thread); an HTTP error says what Kaggle said."""
        import requests

        with self._client() as client:
            self._bounded(client)
            api = getattr(client, service)
            api = getattr(api, {"kernels": "kernels_api_client", "datasets": "dataset_api_client",
                                "blobs": "blob_api_client"}[service])
            try:
                return getattr(api, method)(request)
            except requests.HTTPError as exc:
                status = exc.response.status_code if exc.response is not None else "?"
                text = (exc.response.text[:300] if exc.response is not None else "").strip()
                if status in (401, 403):
                    raise UserError(f"Kaggle refused the credentials of target {self.name} ({status})",
                                    fix=f"store new ones: gpu targets add kaggle {self.name}") from None
                raise RuntimeError(f"Kaggle {method} answered {status}: {text}") from None
            except requests.RequestException as exc:
                raise unreachable(exc) from None

    def user(self) -> str:
        """The account's user name: kaggle.json's, or the one the API says the token is for."""
        if self._user is None:
            c = self._credentials()
            if c.get("username"):
                self._user = c["username"]
            else:
                from kagglesdk.security.types.oauth_service import IntrospectTokenRequest

                import requests

                with self._client() as client:
                    self._bounded(client)
                    r = IntrospectTokenRequest()
                    r.token = c["token"]
                    try:
                        answer = client.security.oauth_client.introspect_token(r)
                    except requests.RequestException as exc:  # urllib3's retry story: one line
                        raise unreachable(exc) from None
                if not answer.active or not answer.username:
                    raise UserError(f"the Kaggle token of target {self.name} is not active",
                                    fix=f"store a new one: gpu targets add kaggle {self.name}")
                self._user = answer.username
        return self._user

    # -- probing ------------------------------------------------------------------------------

    def quota(self) -> dict:
        """Kaggle's own account of the weekly GPU hours: used, allowed, left, and when it resets."""
        from kagglesdk.kernels.types.kernels_api_service import ApiGetAcceleratorQuotaStatisticsRequest

        r = self._call("kernels", "get_accelerator_quota_statistics", ApiGetAcceleratorQuotaStatisticsRequest())
        q = r.gpu_quota
        allowed = _seconds(q.total_time_allowed) / 3600 if q is not None and q.total_time_allowed else WEEKLY_HOURS
        used = (_seconds(q.time_used) + _seconds(q.time_reserved)) / 3600 if q is not None else 0.0
        reset = r.quota_refresh_time.isoformat() if getattr(r, "quota_refresh_time", None) else None
        return {"used_hours": round(used, 3), "allowed_hours": round(allowed, 3),
                "left_hours": round(max(allowed - used, 0.0), 3), "resets_at": reset}

    def probe_setup(self) -> None:
        """Import the client before the probe's clock starts (core.providers.probing)."""
        import kagglesdk  # noqa: F401
        import requests  # noqa: F401

    async def probe(self, refresh: bool = False) -> TargetInfo:
        """Who the account is and its quota, from Kaggle; remembered for PROBE_TTL_S (also
        across processes), so a burst of submits asks Kaggle once."""
        if not refresh:
            cached = self._cached_probe()
            if cached is not None:
                return cached
        try:
            user = await probing.off_loop(self.user)  # daemon threads: a call that hangs holds
            quota = await probing.off_loop(self.quota)  # no exit (core.providers.probing)
        except UserError as exc:
            return self._info(False, exc.what)
        except Exception as exc:  # noqa: BLE001 - an unreachable service is a probe answer
            return self._info(False, str(exc))
        left = quota["left_hours"]
        info = self._info(left > 0, None if left > 0 else
                          f"no Kaggle GPU quota left this week (resets {quota['resets_at'] or 'weekly'})")
        info.quota_hours_left = left
        info.details = {"user": user, "quota": quota, "accelerator": self.machine_shape}
        self._store_probe(info)
        return info

    def _info(self, available: bool, why: str | None = None) -> TargetInfo:
        return TargetInfo(name=self.name, kind=self.kind, available=available, why_unavailable=why,
                          gpus=list(self.gpus), max_jobs=self.max_jobs,
                          session_limit_hours=self.session_limit_h, takes_secrets=False,
                          offers={name: list(ACCELERATORS[name][1])  # the configured one first
                                  for name in sorted(ACCELERATORS, key=lambda n: n != self.accelerator)})

    # -- uploading ----------------------------------------------------------------------------

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

    # -- running ------------------------------------------------------------------------------

    def kernel_slug(self, job: Job, attempt: int | None = None) -> str:
        return f"gr-{job.short_id}-a{attempt or job.attempt}"

    def _requirements(self, job: Job) -> requirements.Dependencies | None:
        return requirements.bundle_dependencies(objects.manifest_file(job.bundle_hash),
                                                job.plan.get("workdir") or "", job.plan.get("extras") or ())

    def _spec(self, job: Job, keys: dict, wheelhouse: str | None = None) -> dict:
        jd = "@JOB@"
        adir = f"{jd}/attempts/{job.attempt}"
        found = self._requirements(job)
        # the kernel's Python is the image's: one scratch venv per session, named by the lines
        deps = requirements.deps_spec(found, python="python3", version=f"kaggle:{wheelhouse or ''}",
                                      venvs_dir=SCRATCH_VENVS)
        if deps is not None and wheelhouse:
            deps["wheelhouse"] = wheelhouse  # the launcher installs with --no-index from it
        spec = launch_spec(job, job_dir=jd, attempt_dir=adir,
                           workdir=f"{jd}/code/{job.plan.get('workdir') or ''}".rstrip("/"),
                           runtime_dir=f"{jd}/../runtime", python="python3", deps=deps, env_secrets={})
        hours = float(job.plan.get("hours") or self.session_limit_h)
        limit_s = self.session_timeout(hours)
        lead = float(self.options.get("checkpoint_lead_s", min(CHECKPOINT_LEAD_S, limit_s / 10)))
        spec["kaggle"] = {**keys, "checkpoint_after_s": max(limit_s - lead, 1.0)}
        return spec

    def session_timeout(self, hours: float) -> int:
        """Seconds Kaggle lets this attempt run: the job's hours with a margin, within the limit."""
        return int(min(hours * 1.5 * 3600 + 300, self.session_limit_h * 3600))

    def _wheelhouse(self, job: Job, found: requirements.Dependencies, say) -> tuple[dict, Path]:
        """The job's wheelhouse for Kaggle's image (cached), as (where it goes, its archive)."""
        from core.packaging import wheelhouse

        pip_args = [arg for line in found.options for arg in shlex.split(line)]
        image = kaggle_deps.image_packages(self, say)
        wh = wheelhouse.build(found.requirements, found.constraints, pip_args, kaggle_deps.KAGGLE_PLATFORM,
                              image, say=say, local=kaggle_deps.project_folders(job, found))
        short = wh.content_hash[:32]
        if not wh.files:  # the image has it all: nothing ships, pip still installs with --no-index
            return {"key": None, "slug": None, "path": f"{kaggle_deps.WHEELHOUSE_DIR}/{short}"}, None
        return {"key": f"wh-{short}.gr", "slug": f"gr-wh-{wh.content_hash[:24]}",
                "path": f"{kaggle_deps.WHEELHOUSE_DIR}/{short}"}, wh.archive()

    def _launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        from kagglesdk.kernels.types.kernels_api_service import ApiSaveKernelRequest

        if env_secrets:
            raise RuntimeError("a kaggle target cannot receive keychain secrets: run jobs that read "
                               "secrets on another target")
        notes: list[str] = []

        def say(text: str) -> None:
            log.info("job %s: %s", job.short_id, text)
            notes.append(text)

        found = self._requirements(job)
        refused_before = kaggle_deps.internet_refused(self.name)
        internet = bool(self.options.get("internet", False)) and not refused_before
        offline = kaggle_deps.offline_mode(self.options) or not internet
        if refused_before and self.options.get("internet"):
            say(f"Kaggle refused internet to target {self.name} before: installing from a wheelhouse")
        wh = wh_archive = None
        if found and offline:  # resolved before any upload: what cannot ship is named first
            wh, wh_archive = self._wheelhouse(job, found, say)
        rt_hash, rt_bytes = runtime_archive()
        keys: dict[str, Any] = {"runtime": f"{rt_hash}.gr"}
        sent = self._dataset(f"gr-rt-{rt_hash}", {keys["runtime"]: rt_bytes})
        # the code's data sets share the cap with the runtime, the data sets, a wheelhouse and
        # (resuming) the previous session's output
        room = (kaggle_code.SOURCES_CAP - 1 - len(job.request.get("data", [])) - (1 if found else 0)
                - (1 if job.attempt > 1 else 0))
        code_slugs, keys["manifest"], keys["objects"], sent_c = self._code_sets(job, room, say)
        data_keys, data_slugs, sent_d = self._data_sets(job)
        sent_d += sent_c
        keys["data"] = data_keys
        user = self.user()
        sources = [*(f"{user}/{s}" for s in code_slugs), f"{user}/gr-rt-{rt_hash}", *data_slugs]

        def ship_wheelhouse() -> int:
            assert wh is not None
            if wh_archive is None:
                say("dependencies: Kaggle's image has every one: nothing to ship")
                return 0
            keys["wheelhouse"] = wh["key"]
            sources.append(f"{user}/{wh['slug']}")
            sent_w = self._dataset(wh["slug"], {wh["key"]: wh_archive})
            say(f"dependencies: wheelhouse {wh['slug']} " + (f"uploaded ({sent_w} bytes)" if sent_w
                                                              else "already on Kaggle: nothing uploaded"))
            return sent_w

        if wh is not None:
            sent_d += ship_wheelhouse()

        def push(with_internet: bool):
            spec = self._spec(job, keys, wheelhouse=wh["path"] if wh else None)
            text = f"SPEC = {spec!r}\n" + KERNEL_CODE.read_text()  # a Python literal: no import needed
            req = ApiSaveKernelRequest()
            req.slug = f"{user}/{self.kernel_slug(job)}"
            req.new_title = self.kernel_slug(job)
            req.text = text
            req.language = "python"
            req.kernel_type = "script"
            req.is_private = True
            req.enable_gpu = True
            req.enable_internet = with_internet
            offer = job.plan.get("offer")
            req.machine_shape = ACCELERATORS[offer][0] if offer in ACCELERATORS else self.machine_shape
            req.dataset_data_sources = list(sources)
            if job.attempt > 1:
                req.kernel_data_sources = [f"{user}/{self.kernel_slug(job, job.attempt - 1)}"]
            req.session_timeout_seconds = self.session_timeout(float(job.plan.get("hours") or self.session_limit_h))
            return self._call("kernels", "save_kernel", req), text

        answer, text = push(internet)
        if answer.error and internet and kaggle_deps.is_refusal(answer.error):
            kaggle_deps.remember_refusal(self.name, answer.error)
            say(f"Kaggle refused internet for target {self.name} ({answer.error}): it grants it only to "
                "phone-verified accounts; installing the dependencies from a wheelhouse instead")
            if found and wh is None:
                wh, wh_archive = self._wheelhouse(job, found, say)
                sent_d += ship_wheelhouse()
            answer, text = push(False)
        if answer.error:
            raise RuntimeError(f"Kaggle refused the kernel: {answer.error}")
        return {"attempt": job.attempt, "kernel": f"{user}/{self.kernel_slug(job)}",
                "kernel_id": answer.kernel_id, "version": answer.version_number,
                "uploaded_bytes": sent + sent_d + len(text), "launched_at": time.time(),
                "internet": bool(internet and not kaggle_deps.internet_refused(self.name)),
                "notes": notes}

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        return await asyncio.to_thread(self._launch, job, env_secrets)

    def _status(self, job: Job) -> tuple[str, str]:
        return self._kernel_status(self.kernel_slug(job))

    def _kernel_status(self, slug: str) -> tuple[str, str]:
        from kagglesdk.kernels.types.kernels_api_service import ApiGetKernelSessionStatusRequest

        req = ApiGetKernelSessionStatusRequest()
        req.user_name, req.kernel_slug = self.user(), slug
        r = self._call("kernels", "get_kernel_session_status", req)
        name = r.status.name if hasattr(r.status, "name") else str(r.status)
        return name, r.failure_message or ""

    def _output(self, job: Job) -> tuple[list[tuple[str, str]], str]:
        """The session's output files (name, url) and its log, all pages."""
        return self._kernel_output(self.kernel_slug(job))

    def _kernel_output(self, slug: str) -> tuple[list[tuple[str, str]], str]:
        from kagglesdk.kernels.types.kernels_api_service import ApiListKernelSessionOutputRequest

        files: list[tuple[str, str]] = []
        log, token = "", None
        for _ in range(100):
            req = ApiListKernelSessionOutputRequest()
            req.user_name, req.kernel_slug = self.user(), slug
            if token:
                req.page_token = token
            r = self._call("kernels", "list_kernel_session_output", req)
            files += [(f.file_name, f.url) for f in r.files or []]
            log = log or (r.log or "")
            token = r.next_page_token
            if not token:
                break
        return files, log

    def _poll(self, job: Job) -> Poll:
        try:
            state, failure = self._status(job)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a network error is not a failed job
            return Poll("unreachable", detail=str(exc))
        if state in STATES:
            return Poll(STATES[state], detail="queued on Kaggle" if state == "QUEUED" else "",
                        queued=state == "QUEUED")
        if state.startswith("CANCEL"):
            return Poll("cancelled", detail="cancelled on Kaggle")
        exit_doc, time_signal = self._exit_doc(job)
        code = exit_doc.get("code")
        if state == "COMPLETE":
            if time_signal and code in (0, None):
                return Poll("session_ended", detail="saved its checkpoint and stopped before Kaggle's session limit")
            return Poll("exited", exit_code=0 if code is None else code, detail=exit_doc.get("error") or "")
        if state == "ERROR":
            if time_signal and code in (0, None):
                return Poll("session_ended", detail=f"Kaggle ended the session at its time limit ({failure})")
            return Poll("exited", exit_code=code if code not in (0, None) else 1,
                        detail=failure or exit_doc.get("error") or "the Kaggle session failed")
        return Poll("running", detail=state.lower())

    def _exit_doc(self, job: Job) -> tuple[dict, bool]:
        """The launcher's exit record from the session's output ({} without one), and whether
        the session-limit signal came (the job was asked to save and stop)."""
        urls = dict(self._output(job)[0])
        prefix = f"gpu-router/job/attempts/{job.attempt}/"
        doc: dict = {}
        if prefix + "exit.json" in urls:
            try:
                doc = json.loads(self._download(urls[prefix + "exit.json"], 1 << 20))
            except ValueError:
                doc = {}
        return doc, prefix + "time-signal" in urls

    async def poll(self, job: Job) -> Poll:
        return await asyncio.to_thread(self._poll, job)

    async def read_exit(self, job: Job) -> dict | None:
        """The exit record, for what the job wrote that stayed (gpu status, the next submit)."""
        doc, _ = await asyncio.to_thread(self._exit_doc, job)
        return doc or None

    # -- logs and metrics ---------------------------------------------------------------------

    def _sync(self, job: Job) -> None:
        """The kernel's log, split into the job's log and its metric rows, mirrored locally."""
        _, raw = self._output(job)
        if not raw:
            return
        try:
            entries = json.loads(raw)
        except ValueError:
            entries = [{"data": raw}]
        text = "".join(str(e.get("data", "")) for e in entries if isinstance(e, dict))
        logmirror.store(self.local_dir(job), job.attempt, logmirror.split(text))

    # -- checkpoints (core.packaging.checkpoints mirrors them home) ----------------------------------

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

    # -- ending -------------------------------------------------------------------------------

    def _cancel(self, job: Job) -> None:
        from kagglesdk.kernels.types.kernels_api_service import ApiCancelKernelSessionRequest

        req = ApiCancelKernelSessionRequest()
        req.kernel_session_id = int(job.handle.get("kernel_id") or 0)
        self._call("kernels", "cancel_kernel_session", req)

    async def cancel(self, job: Job, force: bool = False) -> None:
        if job.handle.get("kernel"):
            await asyncio.to_thread(self._cancel, job)

    async def request_checkpoint(self, job: Job) -> None:
        return None  # a running kernel takes no signal from outside; its own timer asks

    def _download(self, url: str, limit: int) -> bytes:
        import requests

        with requests.get(url, stream=True, timeout=300) as r:
            r.raise_for_status()
            out = bytearray()
            for block in r.iter_content(1 << 20):
                out += block
                if len(out) > limit:
                    raise RuntimeError(f"a Kaggle output file is over {limit} bytes")
            return bytes(out)

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
