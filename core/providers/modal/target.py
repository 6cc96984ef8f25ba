"""The modal target's job steps: an attempt as a detached app's function call, its result,
log and cancel, and the outputs inside its result.

The catalog is catalog.py, the client wire.py, the image image.py, the volume volume.py; the
package's __init__ says how a job travels.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core import paths
from core.errors import UserError
from core.jobs.store import Job
from core.packaging import checkpoints
from core.packaging.safe_extract import OutputCaps, safe_extract
from core.providers import logmirror, probing
from core.providers.base import Poll, TargetInfo
from core.providers.logmirror import MirroredLog
from core.providers.modal.catalog import (GPU_COUNT_MAX, MARGIN_FACTOR, MARGIN_S, MAX_HOURS, PRICES,
                                          PRICES_AS_OF, PRICES_SOURCE, UNVERIFIED, VRAM_GB, gpu_spec,
                                          timeout_for)
from core.providers.modal.image import REMOTE, ModalImage, _objects_never_change
from core.providers.modal.volume import VOLUME_READ_TIMEOUT_S, ModalVolume
from core.providers.modal.wire import ModalWire
from core.providers.service import ServiceTarget


class ModalProvider(ModalWire, ModalImage, ModalVolume, ServiceTarget, MirroredLog):
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

    def _launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        import modal

        if env_secrets:
            raise RuntimeError("a modal target does not receive keychain secrets: run jobs that read "
                               "secrets on another target")
        data = self._data_files(job)
        spec = self._spec(job, data)
        # a job moved or resumed here: home's checkpoint goes with the function (a volume of
        # its own holds only what earlier attempts here saved), put in place by modal_function
        restore = checkpoints.restore_archive(job.id, {}) if job.handle.get("restore_checkpoint") else None
        try:
            if restore is not None:
                spec["modal"]["restore"] = f"a{job.attempt}.tar.gz"
            app = modal.App(f"gr-{job.short_id}-a{job.attempt}")
            volume = modal.Volume.from_name(self.volume_name(job), create_if_missing=True)
            image = self.image(job, data)
            if restore is not None:
                image = image.add_local_file(restore, f"{REMOTE}/restore/a{job.attempt}.tar.gz", copy=False)
            fn = app.function(image=image, gpu=self.gpu_for(job), timeout=self.session_timeout(job),
                              block_network=not bool(self.options.get("internet", False)),
                              volumes={f"{REMOTE}/state": volume}, include_source=False, retries=0,
                              name="run", serialized=False)(self._function_module().run)
            _objects_never_change()
            with app.run(client=self.client(), detach=True):
                call = fn.spawn(spec)
        finally:
            if restore is not None:
                restore.unlink(missing_ok=True)
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
        return Poll("exited", exit_code=0 if code is None else code, detail=exit_doc.get("error") or "")

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
        one row in 24 of tests/providers/test_modal.py's timeout test). When a later call on the same
        volume has ended, that container is long gone and every row it wrote is there."""
        await super().sync_log(job)
        key = (job.id, job.attempt)
        if job.attempt > 1 and key not in self._rows_reread and (self._results.get(key) or ("",))[0] == "done":
            self._rows_reread.add(key)
            await self._metrics_from_volume(job, float(self.options.get("volume_read_timeout_s", VOLUME_READ_TIMEOUT_S)))

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

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        await self.sync_log(job)
        return await asyncio.to_thread(self._fetch, job, dest)
