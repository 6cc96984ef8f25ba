"""The kaggle target's job steps: an attempt as a private kernel, its status, log and cancel.

The API calls are in wire.py, the uploads in datasets.py, what comes home in outputs.py; the
package's __init__ says how a job travels.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import time
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.jobs.store import Job
from core.packaging import checkpoints, objects, requirements
from core.packaging.safe_extract import OutputCaps
from core.providers import logmirror, probing
from core.providers.base import Poll, TargetInfo
from core.providers.kaggle import code as kaggle_code
from core.providers.kaggle import deps as kaggle_deps
from core.providers.kaggle.datasets import KaggleDataSets
from core.providers.kaggle.outputs import KaggleOutputs
from core.providers.kaggle.wire import KaggleWire
from core.providers.logmirror import MirroredLog
from core.providers.runtimeship import runtime_archive
from core.providers.service import ServiceTarget
from core.providers.spec import launch_spec
from core.runtime import RUNTIME_DIR

ACCELERATORS = {  # targetopts.KAGGLE_ACCELERATORS -> (Kaggle's machine shape, GPUs the router sees)
    "t4x2": ("NvidiaTeslaT4", [{"name": "T4", "memory_gb": 15.0}] * 2),
    "p100": ("NvidiaTeslaP100", [{"name": "P100", "memory_gb": 16.0}]),
}
SESSION_LIMIT_HOURS = 12.0  # Kaggle's limit for a GPU session
CHECKPOINT_LEAD_S = 600.0  # ask the job to save this long before the session ends
SCRATCH_VENVS = "/tmp/gpu-router/venvs"  # outside /kaggle/working: scratch, not the session's output
KERNEL_CODE = RUNTIME_DIR / "kaggle_kernel.py"
log = logging.getLogger("gpu_router.kaggle")
STATES = {"QUEUED": "provisioning", "NEW_SCRIPT": "provisioning", "RUNNING": "running"}


class KaggleProvider(KaggleWire, KaggleDataSets, KaggleOutputs, ServiceTarget, MirroredLog):
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

    # -- probing ------------------------------------------------------------------------------

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
        # (resuming) the previous session's output, or for a job moved or resumed here home's
        # checkpoint, a data set of its own that the kernel starts from
        restore = checkpoints.restore_archive(job.id, {}) if job.handle.get("restore_checkpoint") else None
        room = (kaggle_code.SOURCES_CAP - 1 - len(job.request.get("data", [])) - (1 if found else 0)
                - (1 if job.attempt > 1 or restore is not None else 0))
        code_slugs, keys["manifest"], keys["objects"], sent_c = self._code_sets(job, room, say)
        data_keys, data_slugs, sent_d = self._data_sets(job)
        sent_d += sent_c
        keys["data"] = data_keys
        user = self.user()
        sources = [*(f"{user}/{s}" for s in code_slugs), f"{user}/gr-rt-{rt_hash}", *data_slugs]
        if restore is not None:
            try:
                keys["restore"] = f"ck-{job.short_id}-a{job.attempt}.gr"
                slug = f"gr-ck-{job.short_id}-a{job.attempt}"
                sent_d += self._dataset(slug, {keys["restore"]: restore})
                sources.append(f"{user}/{slug}")
                say(f"its checkpoint from home goes with it (data set {slug})")
            finally:
                restore.unlink(missing_ok=True)

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
            if job.attempt > 1 and "restore" not in keys:
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

    def _output(self, job: Job) -> tuple[list[tuple[str, str]], str]:
        """The session's output files (name, url) and its log, all pages."""
        return self._kernel_output(self.kernel_slug(job))

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
