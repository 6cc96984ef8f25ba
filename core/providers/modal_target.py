"""The `modal` target: GPUs on demand from the user's Modal account, through the official client.

    targets:
      md: {kind: modal, gpu: T4, internet: false, max_resumes: 3}

How a job travels (every call is the official `modal` package's public API, made in this
process with a client built from the keychain's token: `modal.Client.from_credentials`):

- each attempt is a detached Modal app `gr-<short id>-a<attempt>` with one function whose
  body is core/runtime/modal_function.py; its image is Debian slim with the project's
  requirements.txt / pyproject.toml dependencies pip-installed (Modal builds an image once
  per definition, so an unchanged dependency list reuses the built one), and the bundle's
  manifest with the file objects it names (core/packaging/objects.py), the runtime and each
  data set attached as mounted files: Modal uploads a file only when its content hash is new,
  so an unchanged re-submit sends no file and a one-file change sends that file (and the
  manifest); the function builds the code folder from them (core/runtime/codetree.py);
- the image is built from the request's `image` (a registry reference, `Image.from_registry`)
  instead of Debian slim where it names one, and the request's `packages` are pip-installed into
  it after the project's own dependencies;
- GPU type from the request (`gpu`, `vram_gb`; the router picks the cheapest fitting type from
  PRICES) and count (`gpus`, or `gpu: H100:4`: Modal gives 1 to GPU_COUNT_MAX of one type; the
  router prices the offer at the count, and the function asks Modal for `H100:4`), the function's timeout from the hours with a margin (Modal caps a function at 24 h:
  longer jobs are passed over at plan time, with the reason), outbound network blocked unless
  the target says `internet: true`;
- the job's folder (checkpoints, outputs, log, metrics) lives on a Modal Volume named for the
  job, so the attempt that follows a timeout reads the last checkpoint of the one before;
- status: the function call's result (`FunctionCall.get(timeout=0)`): not ready -> running,
  a result -> exited with the job's exit code, a timeout -> session_ended (resume), a
  cancellation -> cancelled; the log is the call's own log (`FunctionCall.logs.fetch`), which
  carries the launcher's already masked lines and, behind a marker, the metric rows;
- a preemption (Modal signals the container, waits its grace, kills it and runs the same input
  in a new one) is no session end here: the same call goes on from the newest complete checkpoint
  generation on the volume, and its result carries every container's log and metric rows
  (core/runtime/modal_function.py); a preempted container's own result, should one ever come
  back, is a session end (resume), never the job's exit;
- outputs come back inside the result as a gzipped tar, unpacked by the shared safe writer;
- checkpoints come home from the copy in each call's result, and from the volume itself when a
  call hands no result back (Modal stopped it at its timeout, it crashed, it was cancelled): its
  last complete checkpoint is read with the client's Volume API (`iterdir`, `read_file`), by
  ckptscan's completeness rule, names checked, within the caps and `volume_read_timeout_s`,
  files home already has copied from home; a failed read is logged and changes nothing.

Keychain secrets are not sent (takes_secrets is False): a Modal Secret would put their values
in the account's storage beyond the job's life. The token lives only in the keychain, under
`modal:<target name>`; it is read into this process's memory and handed to the client object,
never into an environment, a file or a command line.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from core import paths
from core.packaging import checkpoints
from core.jobs.store import Job
from core.errors import UserError
from core.packaging.local_data import list_data
from core.packaging.safe_extract import OutputCaps, clean_name, safe_extract, write_files
from core.providers import logmirror, probing
from core.providers.base import Poll, TargetInfo
from core.providers.logmirror import MirroredLog
from core.providers.service import ServiceTarget
from core.providers.service import secret_name as _secret_name
from core.packaging import objects, requirements
from core.providers.spec import launch_spec
from core.runtime import RUNTIME_DIR

# USD per GPU-hour, on demand, from https://modal.com/pricing (Modal bills per second; these are
# its per-second rates x 3600). Read 2026-05 through techbytes.app's table ("prices verified on
# May 7, 2026 from official vendor pricing"): T4, L4, L40S, A100-80GB, H100. A10G, A100-40GB,
# H200 and B200 are the same page's per-second rates as last known, NOT re-verified here.
PRICES_AS_OF = "2026-05-07"
PRICES_SOURCE = "https://modal.com/pricing"
PRICES = {"T4": 0.5904, "L4": 0.7992, "A10G": 1.1016, "L40S": 1.9512, "A100-40GB": 2.0988,
          "A100-80GB": 2.4984, "H100": 3.9492, "H200": 4.5396, "B200": 6.2496}
UNVERIFIED = ("A10G", "A100-40GB", "H200", "B200")
VRAM_GB = {"T4": 16.0, "L4": 24.0, "A10G": 24.0, "L40S": 48.0, "A100-40GB": 40.0, "A100-80GB": 80.0,
           "H100": 80.0, "H200": 141.0, "B200": 180.0}
# GPUs of one type Modal attaches to one container (https://modal.com/docs/guide/gpu, "Specifying
# GPU count": B200, H200, H100, A100, L4, T4 and L40S up to 8, A10 up to 4); `gpu: H100:4`
GPU_COUNT_MAX = {g: 4 if g == "A10G" else 8 for g in PRICES}
MAX_TIMEOUT_S = 24 * 3600  # Modal's cap on a function's timeout
MARGIN_FACTOR, MARGIN_S = 1.25, 600  # the function's timeout: hours x 1.25 + 10 minutes
MAX_HOURS = (MAX_TIMEOUT_S - MARGIN_S) / MARGIN_FACTOR / 3600
CHECKPOINT_LEAD_S = 600.0
FUNCTION_FILE = RUNTIME_DIR / "modal_function.py"
REMOTE = "/root/gr"  # where the function finds its files (modal_function.py sits in /root)
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


def secret_name(target: str) -> str:
    return _secret_name("modal", target)


def parse_token(text: str) -> dict[str, str]:
    """`TOKEN_ID TOKEN_SECRET` (as `modal token new` prints them), or ~/.modal.toml's text."""
    text = text.strip()
    if "token_id" in text:
        import tomllib

        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raise UserError("the Modal token file is not valid TOML", fix="give ~/.modal.toml as written by "
                            "`modal token new`, or type the token id and secret") from None
        profiles = [v for v in doc.values() if isinstance(v, dict) and v.get("token_id")]
        active = [p for p in profiles if p.get("active")] or profiles
        if not active:
            raise UserError("no profile with token_id and token_secret in the Modal token file")
        text = f"{active[0]['token_id']} {active[0].get('token_secret', '')}"
    parts = text.split()
    if len(parts) != 2 or not parts[0].startswith("ak-") or not parts[1].startswith("as-"):
        raise UserError("a Modal token is an id (ak-...) and a secret (as-...)",
                        fix="create one at modal.com > Settings > API Tokens (or `modal token new`) "
                            "and give both, separated by a space")
    return {"token_id": parts[0], "token_secret": parts[1]}


def _objects_outside(needed: Iterable[str]):
    """The `ignore` of the mount over the object store: every file but the bundle's objects
    (`<h[:2]>/<h[2:]>`). The store holds every bundle's objects and the mount takes only this
    one's; Modal hashes each file it mounts and uploads it only when its hash is new, so an
    object sent once (by any job, any bundle) is never sent again."""
    keep = {f"{d[:2]}/{d[2:]}" for d in needed}
    return lambda rel: rel.as_posix() not in keep


def _objects_never_change() -> None:
    """Modal's client refuses a mounted file whose mtime is newer than the build's start ("was
    modified during build process", `build_validation`, default "error"). An object's mtime is
    its last use (a submit that reuses it touches it, so gc keeps it), so a submit of the same
    project while this one uploads would fail it, though an object's content never changes
    (named by its hash, checked again by Modal on upload) and everything else mounted is
    gpu-router's own (the runtime, data sets packed once by hash). The check guards nothing
    here: it is off for this process (the client reads it from the environment only)."""
    if os.environ.get("MODAL_BUILD_VALIDATION") != "ignore":
        os.environ["MODAL_BUILD_VALIDATION"] = "ignore"


def gpu_spec(offer: Any, default: str) -> str:
    """A plan's offer as Modal's gpu argument (`T4`, `H100:4`), checked against what Modal gives
    (GPU_COUNT_MAX); `default` (the target's own type) where the plan names none."""
    kind, _, count = str(offer or "").partition(":")
    if kind not in PRICES:
        return default
    if not count:
        return kind
    if not count.isdigit() or not 1 <= int(count) <= GPU_COUNT_MAX[kind]:
        raise UserError(f"the plan asks Modal for {offer}, and Modal allows 1 to {GPU_COUNT_MAX[kind]} "
                        f"{kind} GPUs per job", fix=f"ask for at most {GPU_COUNT_MAX[kind]} (gpu: "
                                                    f"{kind}:{GPU_COUNT_MAX[kind]}) and submit again")
    return kind if int(count) == 1 else f"{kind}:{int(count)}"


def timeout_for(hours: float) -> int:
    return int(min(hours * MARGIN_FACTOR * 3600 + MARGIN_S, MAX_TIMEOUT_S))



def modal_pip_options(deps: requirements.Dependencies) -> dict[str, Any]:
    """Modal builds the image with `pip install PKGS OPTIONS` before the bundle is in it: the
    index options become pip_install's arguments; what needs a file of the project (a local
    path, a wheel folder, a constraints file) cannot be applied there, and is refused."""
    if deps.local or deps.constraints:
        what = "local paths or --find-links folders" if deps.local else "constraints (-c)"
        raise UserError(f"{deps.source}: {what} cannot be applied on a Modal target (Modal installs the "
                        "dependencies while it builds the image, before the project's files are in it)",
                        where=deps.source, fix="pin the versions in requirements.txt itself and install packages "
                                               "from an index, or run the job on another target")
    kwargs: dict[str, Any] = {}
    extra: list[str] = []
    for line in deps.options:
        flag, _, value = line.partition(" ")
        if flag == "--index-url":
            kwargs["index_url"] = value
        elif flag == "--extra-index-url" and "extra_index_url" not in kwargs:
            kwargs["extra_index_url"] = value
        elif flag == "--pre":
            kwargs["pre"] = True
        else:
            extra.append(line)
    if extra:
        kwargs["extra_options"] = " ".join(extra)
    return kwargs

class ModalProvider(ServiceTarget, MirroredLog):
    credentials_name = "Modal token"
    credentials_from = "the token id and secret"

    kind = "modal"

    def __init__(self, name: str, options: dict | None = None, max_jobs: int = 4,
                 session_limit_hours: float | None = None) -> None:
        self.name = name
        self.options = dict(options or {})
        self.max_jobs = max_jobs
        self.enabled = True
        self.gpu = str(self.options.get("gpu", "T4"))
        self.session_limit_h = session_limit_hours
        self.caps = OutputCaps.from_options(self.options)
        self.max_resumes = int(self.options.get("max_resumes", 3))
        self._client_obj: Any = None
        self._results: dict[tuple[str, int], Any] = {}
        self._rows_reread: set[tuple[str, int]] = set()  # attempts whose end read the volume's rows again

    @classmethod
    def from_config(cls, t) -> "ModalProvider":
        return cls(t.name, t.options, max_jobs=t.max_jobs, session_limit_hours=t.session_limit_hours)

    # -- the client ---------------------------------------------------------------------------

    def client(self):
        """One client per provider object, built from the token in memory (no environment)."""
        if self._client_obj is None:
            import modal

            c = self._credentials()
            self._client_obj = modal.Client.from_credentials(c["token_id"], c["token_secret"])
        return self._client_obj

    def _hello(self) -> None:
        import modal.exception

        try:
            self.client().hello()
        except modal.exception.AuthError:
            self._client_obj = None
            raise UserError(f"Modal refused the token of target {self.name}",
                            fix=f"store a new one: gpu targets add modal {self.name}") from None

    # -- probing ------------------------------------------------------------------------------

    def probe_setup(self) -> None:
        """Import the client before the probe's clock starts (core.providers.probing)."""
        import modal  # noqa: F401

    async def probe(self, refresh: bool = False) -> TargetInfo:
        """Whether Modal answers this token; remembered for PROBE_TTL_S (also across processes).
        Bounded by `connect_timeout_s` here and by the target's `probe_timeout_s` around it
        (core.providers.probing, which also remembers a failure)."""
        if not refresh:
            cached = self._cached_probe()
            if cached is not None:
                return cached
        limit = float(self.options.get("connect_timeout_s", 30))
        try:  # on a daemon thread: a hello that never returns holds no loop and no exit
            await asyncio.wait_for(probing.off_loop(self._hello), limit)
        except UserError as exc:
            return self._info(False, exc.what)
        except (asyncio.TimeoutError, TimeoutError):
            self._client_obj = None
            return self._info(False, f"Modal did not answer in {limit:g} s")
        except Exception as exc:  # noqa: BLE001 - an unreachable service is a probe answer
            self._client_obj = None
            return self._info(False, f"Modal could not be reached ({type(exc).__name__}: {exc})"[:300])
        info = self._info(True)
        self._store_probe(info)
        return info

    def _info(self, available: bool, why: str | None = None) -> TargetInfo:
        order = sorted(PRICES, key=lambda g: (g != self.gpu, PRICES[g]))  # the configured one, then by price
        offers = {g: [{"name": g, "memory_gb": VRAM_GB[g]}] for g in order}
        return TargetInfo(name=self.name, kind=self.kind, available=available, why_unavailable=why,
                          gpus=list(offers[self.gpu]), max_jobs=self.max_jobs, price_per_hour=PRICES[self.gpu],
                          session_limit_hours=self.session_limit_h, takes_secrets=False, offers=offers,
                          offer_prices={g: PRICES[g] for g in order}, max_hours=round(MAX_HOURS, 2),
                          max_hours_why=f"Modal caps a function at 24 h, and gpu-router gives a job its "
                                        f"hours x {MARGIN_FACTOR:g} + {MARGIN_S // 60} min",
                          details={"prices": {"usd_per_hour": dict(PRICES), "as_of": PRICES_AS_OF,
                                              "source": PRICES_SOURCE, "unverified": list(UNVERIFIED)},
                                   "internet": bool(self.options.get("internet", False)),
                                   # a job may ask for N of one type (the router prices N x)
                                   "gpu_count_max": dict(GPU_COUNT_MAX)})

    # -- running ------------------------------------------------------------------------------

    def gpu_for(self, job: Job) -> str:
        """What the function asks Modal for, in its spelling: `H100`, or `H100:4` for several
        (the plan's offer, which the router named with the count it priced)."""
        return gpu_spec(job.plan.get("offer"), self.gpu)

    def volume_name(self, job: Job) -> str:
        return f"gr-job-{job.id}"[:64]

    def session_timeout(self, job: Job) -> int:
        hours = float(job.plan.get("hours") or 1.0)
        limit = timeout_for(hours)
        if self.session_limit_h:
            limit = min(limit, max(int(self.session_limit_h * 3600), 1))
        return limit

    def _data_files(self, job: Job) -> dict[str, Path]:
        """Each local data set packed once (deterministically) into the cache, by content hash."""
        out: dict[str, Path] = {}
        for item in job.request.get("data", []):
            if item["kind"] != "path":
                raise RuntimeError(f"data {item['name']}: only local data sets reach a modal target")
            h = (job.plan.get("data") or {}).get(item["name"])
            listing = list_data(Path(item["source"]), item["name"])
            if not h:
                h = hashlib.sha256("\0".join(listing.files).encode() + str(listing.source).encode()).hexdigest()
            path = paths.cache_dir() / "modal-data" / f"{h[:32]}.tar.gz"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                raw = io.BytesIO()
                with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for rel in listing.files:
                        src = listing.source / rel if rel else listing.source
                        info = tar.gettarinfo(str(src), arcname=rel or listing.source.name)
                        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                        with open(src, "rb") as f:
                            tar.addfile(info, f)
                tmp = path.with_suffix(".part")
                tmp.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
                os.replace(tmp, path)
            out[item["name"]] = path
        return out

    def _spec(self, job: Job, data: dict[str, Path]) -> dict:
        jd, work = "@JOB@", "@WORK@"
        adir = f"{jd}/attempts/{job.attempt}"
        spec = launch_spec(job, job_dir=jd, attempt_dir=adir,
                           workdir=f"{work}/code/{job.plan.get('workdir') or ''}".rstrip("/"),
                           runtime_dir="@RUNTIME@", python="python3", deps=None, env_secrets={},
                           frozen_checkpoints=True)  # a preempted container's rerun restores the newest whole save
        spec["env"]["GPU_ROUTER_DATA_DIR"] = f"{work}/data"  # unpacked on the container's disk
        limit = self.session_timeout(job)
        lead = float(self.options.get("checkpoint_lead_s", min(CHECKPOINT_LEAD_S, limit / 10)))
        spec["modal"] = {"bundle": f"{job.bundle_hash}.json", "checkpoint_after_s": max(limit - lead, 1.0),
                         "data": {name: p.name for name, p in data.items()}}
        return spec

    def _function_module(self):
        """modal_function.py as the top-level module `modal_function`, as the container imports it."""
        spec = importlib.util.spec_from_file_location("modal_function", FUNCTION_FILE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules.setdefault("modal_function", mod)
        return sys.modules["modal_function"]

    def image(self, job: Job, data: dict[str, Path]):
        import modal

        base = job.plan.get("image")
        if base:  # the request's registry image (its own Python and pip, as Modal requires)
            image = modal.Image.from_registry(str(base))
        else:
            py = f"{sys.version_info.major}.{min(max(sys.version_info.minor, 10), 13)}"
            image = modal.Image.debian_slim(python_version=py)
        deps = requirements.bundle_dependencies(objects.manifest_file(job.bundle_hash),
                                                job.plan.get("workdir") or "", job.plan.get("extras") or ())
        options = modal_pip_options(deps) if deps else {}
        if deps:
            image = image.pip_install(*deps.requirements, **options)  # built once, then reused
        packages = [str(p) for p in job.plan.get("packages") or ()]
        if packages:  # the request's own packages, a layer of their own over the project's,
            image = image.pip_install(*packages, **options)  # from the same index as pip would take them
        image = image.add_local_file(FUNCTION_FILE, "/root/modal_function.py", copy=False)
        image = image.add_local_dir(RUNTIME_DIR, f"{REMOTE}/runtime", copy=False,
                                    ignore=["**/__pycache__", "**/__pycache__/**", "**/*.pyc"])
        image = image.add_local_file(objects.manifest_file(job.bundle_hash),
                                     f"{REMOTE}/bundle/{job.bundle_hash}.json", copy=False)
        needed = objects.digests(job.bundle_hash)
        objects.loosen(needed)  # the mount takes files: a packed object is copied out first
        image = image.add_local_dir(paths.objects_dir(), f"{REMOTE}/objects", copy=False,
                                    ignore=_objects_outside(needed))
        for path in data.values():
            image = image.add_local_file(path, f"{REMOTE}/data/{path.name}", copy=False)
        return image

    def _launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        import modal

        if env_secrets:
            raise RuntimeError("a modal target does not receive keychain secrets: run jobs that read "
                               "secrets on another target")
        data = self._data_files(job)
        spec = self._spec(job, data)
        app = modal.App(f"gr-{job.short_id}-a{job.attempt}")
        volume = modal.Volume.from_name(self.volume_name(job), create_if_missing=True)
        fn = app.function(image=self.image(job, data), gpu=self.gpu_for(job), timeout=self.session_timeout(job),
                          block_network=not bool(self.options.get("internet", False)),
                          volumes={f"{REMOTE}/state": volume}, include_source=False, retries=0,
                          name="run", serialized=False)(self._function_module().run)
        _objects_never_change()
        with app.run(client=self.client(), detach=True):
            call = fn.spawn(spec)
        return {"attempt": job.attempt, "app_id": app.app_id, "call_id": call.object_id,
                "gpu": self.gpu_for(job), "timeout_s": self.session_timeout(job),
                "volume": self.volume_name(job), "launched_at": time.time()}

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        return await asyncio.to_thread(self._launch, job, env_secrets)

    def _result(self, job: Job) -> tuple[str, Any]:
        """("running" | "done" | "timeout" | "cancelled" | "error", the result or the error)."""
        import modal
        import modal.exception as mx

        key = (job.id, job.attempt)
        if key in self._results:
            return self._results[key]
        call = modal.FunctionCall.from_id(job.handle["call_id"], client=self.client())
        try:
            answer: tuple[str, Any] = ("done", call.get(timeout=0))
        except mx.FunctionTimeoutError as exc:  # a TimeoutError too: asked first
            answer = ("timeout", str(exc))
        except TimeoutError:
            return ("running", None)
        except mx.InputCancellation as exc:
            answer = ("cancelled", str(exc))
        except mx.OutputExpiredError:
            answer = ("error", "Modal no longer holds this call's result (it expired)")
        except (mx.AuthError, mx.ConnectionError, ConnectionError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - the function failed on Modal's side
            text = str(exc).strip() or type(exc).__name__
            answer = ("cancelled", text) if "cancel" in text.lower() or "terminat" in text.lower() \
                else ("error", f"{type(exc).__name__}: {text}"[:500])
        self._results[key] = answer
        return answer

    def _poll(self, job: Job) -> Poll:
        try:
            state, value = self._result(job)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a network error is not a failed job
            return Poll("unreachable", detail=f"{type(exc).__name__}: {exc}"[:300])
        if state == "running":
            return Poll("running")
        if state == "timeout":
            return Poll("session_ended", detail="Modal stopped the function at its timeout")
        if state == "cancelled":
            return Poll("cancelled", detail="cancelled on Modal")
        if state == "error":
            return Poll("exited", exit_code=1, detail=str(value))
        if value.get("preempted"):  # a preempted container's own return (Modal runs the input again)
            return Poll("session_ended", detail="Modal preempted the container and handed back its result")
        exit_doc = value.get("exit") or {}
        code = exit_doc.get("code", value.get("code"))
        if value.get("time_signal") and code in (0, None):
            return Poll("session_ended", detail="saved its checkpoint and stopped before the function's timeout")
        return Poll("exited", exit_code=0 if code is None else int(code), detail=exit_doc.get("error") or "")

    async def poll(self, job: Job) -> Poll:
        return await asyncio.to_thread(self._poll, job)

    async def read_exit(self, job: Job) -> dict | None:
        state, value = await asyncio.to_thread(self._result, job)
        return (value.get("exit") or None) if state == "done" else None

    # -- logs and metrics ---------------------------------------------------------------------

    def _sync(self, job: Job) -> None:
        """The call's log, split into the job's lines and metric rows, per attempt; job.log and
        metrics.jsonl are the attempts' files end to end (they only grow)."""
        import modal

        if not job.handle.get("call_id"):
            return
        done = self._results.get((job.id, job.attempt))
        if done and done[0] == "done" and isinstance(done[1], dict) and "metrics" in done[1]:
            # ended: the result holds this attempt's log and metric rows whole
            bodies = {"log": bytes(done[1].get("log") or b""), "metrics": bytes(done[1].get("metrics") or b"")}
        else:
            call = modal.FunctionCall.from_id(job.handle["call_id"], client=self.client())
            since = datetime.fromtimestamp(float(job.handle.get("launched_at") or time.time()) - 120, timezone.utc)
            bodies = logmirror.split("".join(e.message for e in call.logs.fetch(since=since)))
        logmirror.store(self.local_dir(job), job.attempt, bodies)

    async def sync_log(self, job: Job) -> None:
        """The call's log and rows (MirroredLog); once an attempt after the first has handed its
        result back, the volume's metrics file is read once more for the rows an earlier call
        wrote after home last read it. A call stopped at its timeout is read as soon as Modal
        reports the timeout (_checkpoint_from_volume), and its container may still be writing
        then: a row written in that moment reached neither its stream nor that read (under load,
        one row in 24 of tests/test_modal.py's timeout test). When a later call on the same
        volume has ended, that container is long gone and every row it wrote is there."""
        await super().sync_log(job)
        key = (job.id, job.attempt)
        if job.attempt > 1 and key not in self._rows_reread and (self._results.get(key) or ("",))[0] == "done":
            self._rows_reread.add(key)
            await self._metrics_from_volume(job, float(self.options.get("volume_read_timeout_s", VOLUME_READ_TIMEOUT_S)))

    # -- checkpoints (core.packaging.checkpoints mirrors them home) ----------------------------------

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

    # -- ending -------------------------------------------------------------------------------

    def _cancel(self, job: Job) -> None:
        import modal

        modal.FunctionCall.from_id(job.handle["call_id"], client=self.client()).cancel(terminate_containers=True)

    async def cancel(self, job: Job, force: bool = False) -> None:
        if job.handle.get("call_id"):
            await asyncio.to_thread(self._cancel, job)

    async def request_checkpoint(self, job: Job) -> None:
        return None  # a running function takes no signal from outside; its own timer asks

    def _fetch(self, job: Job, dest: Path) -> list[str]:
        state, value = self._result(job)
        if state != "done":
            return [f"no outputs: the Modal call ended {state}"]
        blob = value.get("outputs") or b""
        if len(blob) > self.caps.max_bytes * 2 + (1 << 20):
            return [f"outputs not brought home: {len(blob)} bytes packed, over the cap"]
        with tempfile.TemporaryDirectory(prefix=".modal-", dir=paths.home()) as tmp:
            archive = Path(tmp, "out.tar.gz")
            archive.write_bytes(blob)
            notes = safe_extract(archive, dest, caps=self.caps) if blob else []
        self._delete_volume(job)
        return notes

    def _delete_volume(self, job: Job) -> None:
        """The job's volume held its state between attempts; once its outputs are home it goes."""
        import modal

        try:
            modal.Volume.objects.delete(self.volume_name(job), allow_missing=True, client=self.client())
        except Exception:  # noqa: BLE001 - a volume left behind costs little and is named for the job
            pass

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        await self.sync_log(job)
        return await asyncio.to_thread(self._fetch, job, dest)
