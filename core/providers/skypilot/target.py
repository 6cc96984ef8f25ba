"""The skypilot target: a SkyPilot API server (a team's, at `endpoint`, or the local one
SkyPilot starts on demand) and the clouds it has enabled, priced from SkyPilot's catalog.

    targets:
      sky: {kind: skypilot}                                   # the local server, our venv
      team: {kind: skypilot, endpoint: https://sky.example.org:46580, venv: ~/sky-venv}

gpu-router never imports SkyPilot: every question goes to core/providers/skypilot/adapter.py,
run by SkyPilot's own venv python (venv.py), over JSON lines (client.py).

What this step does: the probe asks `check` (which clouds are enabled, and why the others are
not) and `prices` (list and spot prices per GPU type for the enabled ones) and turns them into
offers the router can read (catalog.py). Launching jobs on a SkyPilot cluster is not built yet
(issue 43): until it is, the target is listed as not available for running, with its clouds
and prices beside the other targets, so a plan and `gpu targets` compare them, and no job is
ever placed where it could not start.

Found for launching (checked against the real server over Slurm, 0.14.1): SkyPilot's own SSH
access to a cluster (`~/.sky/generated/ssh/<cluster>`) turns host-key checking off
(`StrictHostKeyChecking no`, known hosts /dev/null), so gpu-router cannot use it under its
rule of never accepting an unknown host key; what it can use is SkyPilot's API. A task sees
its cluster's HOME, `SKYPILOT_INTERNAL_JOB_ID` and `SKYPILOT_TASK_ID`, and its log folder is
`$HOME/sky_logs/<job id>-<name>/`; `download_logs` brings that folder home, but it is no
channel for a job's outputs: a job-written symlink and a 3 MB file in it made the client fail
("Invalid folder path"), so outputs and checkpoints must come home packed by gpu-router's own
runtime on the cluster (no-follow, capped), not as SkyPilot's logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.jobs.store import Job
from core.providers import probing
from core.providers.base import Poll, TargetInfo
from core.providers.service import ServiceTarget
from core.providers.skypilot import catalog
from core.providers.skypilot import venv as skyvenv

NOT_YET = ("gpu-router does not launch jobs on SkyPilot yet (its clouds and prices are shown to "
           "compare; issue 43)")
PROBE_TTL_S = 600.0  # `sky check` takes seconds to minutes with real clouds; prices move slowly


class SkyPilotProvider(ServiceTarget):
    kind = "skypilot"

    def __init__(self, name: str, options: dict | None = None, max_jobs: int = 1) -> None:
        self.name = name
        self.options = dict(options or {})
        self.max_jobs = max_jobs
        self.enabled = True
        self.probe_ttl_s = float(self.options.get("probe_ttl_s", PROBE_TTL_S))

    @classmethod
    def from_config(cls, t) -> "SkyPilotProvider":
        return cls(t.name, t.options, max_jobs=t.max_jobs)

    # -- where SkyPilot is ----------------------------------------------------------------------

    def venv(self) -> Path:
        named = self.options.get("venv")
        return Path(os.path.expanduser(named)) if named else skyvenv.default_path()

    def python(self) -> Path:
        return skyvenv.python_of(self.venv())

    def adapter_env(self) -> dict[str, str]:
        """The adapter's environment: this process's (SkyPilot reads the person's cloud
        credentials where its own tools would: ~/.aws, ~/.kube, ...), the target's `env`, and
        the API server's address where one is named."""
        env = {**os.environ, **{k: str(v) for k, v in (self.options.get("env") or {}).items()}}
        if self.options.get("endpoint"):
            env["SKYPILOT_API_SERVER_ENDPOINT"] = str(self.options["endpoint"])
        return env

    def server_label(self) -> str:
        return str(self.options.get("endpoint") or "the local SkyPilot API server")

    # -- probing --------------------------------------------------------------------------------

    async def probe(self, refresh: bool = False) -> TargetInfo:
        """Which clouds SkyPilot has enabled and their GPU prices; remembered for probe_ttl_s
        (also across processes). Bounded by `connect_timeout_s` here and by the target's
        `probe_timeout_s` around it (core.providers.probing)."""
        if not refresh:
            remembered = self._remembered()
            if remembered is not None:
                return remembered
        from core.providers.skypilot.client import AdapterError, AdapterTimeout, SkyPilotError, ask_once

        python = self.python()
        if not python.exists():
            fix = (f"run `gpu targets add skypilot {self.name}` again (it makes SkyPilot's venv)"
                   if not self.options.get("venv") else f"check targets.{self.name}.venv")
            return self._info(False, f"no SkyPilot venv at {self.venv()}: {fix}")
        limit = float(self.options.get("connect_timeout_s", 60))
        clouds = self.options.get("clouds")
        asks = [("check", {"clouds": clouds} if clouds else {}), ("prices", {"clouds": clouds} if clouds else {})]
        try:
            check, prices = await probing.off_loop(lambda: ask_once(python, asks, env=self.adapter_env(),
                                                                    timeout=limit))
        except AdapterTimeout:
            return self._info(False, f"{self.server_label()} did not answer in {limit:g} s")
        except SkyPilotError as exc:
            return self._info(False, f"SkyPilot could not be asked ({exc.kind}: {exc.text})"[:400])
        except AdapterError as exc:
            return self._info(False, f"SkyPilot's adapter failed: {exc}"[:400])
        details = self.details_of(check or {}, prices or {})
        info = self._info(True, None, details)
        self._store_probe(info)
        return info

    def details_of(self, check: dict, prices: dict) -> dict:
        """What the probe keeps of SkyPilot's answers (and remembers on disk): the clouds,
        enabled or why not, and each GPU type's cheapest price, count and candidates."""
        offers = catalog.offers(prices)
        return {
            "server": self.server_label(),
            "clouds": {"enabled": dict(check.get("enabled") or {}), "disabled": dict(check.get("disabled") or {})},
            "prices": {gpu: {"usd_per_hour": o["price"], "memory_gb": o["memory_gb"], "count_max": o["count_max"],
                             "clouds": sorted({r["cloud"] for r in o["candidates"]}),
                             "bind": catalog.binding(o)}
                       for gpu, o in offers.items()},
            "price_errors": dict(prices.get("errors") or {}),
            "gpu_count_max": {gpu: o["count_max"] for gpu, o in offers.items()},
        }

    def _remembered(self) -> TargetInfo | None:
        """The last answer (only answers are remembered), fresh for probe_ttl_s; past it,
        shown as it was with its time: while the target runs no job, a submit or a plan is
        never held for `sky check` over every cloud (seconds to a minute) only to list prices;
        `gpu targets probe NAME` (and `add`) forget it and ask again."""
        import time

        from core.providers.service import last_probe

        doc = last_probe(self.kind, self.name)
        if not doc or not doc.get("details"):
            return None
        info = self._info(True, None, doc["details"])
        at = float(doc.get("at") or 0)
        if time.time() - at > self.probe_ttl_s:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
            info.why_unavailable = f"{info.why_unavailable} (as of {when}; `gpu targets probe {self.name}` asks again)"
            info.details = {**info.details, "as_of": at}
        return info

    def _info(self, reached: bool, why: str | None = None, details: dict | None = None) -> TargetInfo:
        if details is None and not reached:  # not asked now (a remembered failure, a timeout): the
            # clouds and prices of the last answer, however old, as Modal keeps its price table
            from core.providers.service import last_probe

            details = (last_probe(self.kind, self.name) or {}).get("details")
        details = details or {}
        prices: dict[str, dict] = details.get("prices") or {}
        offers = {gpu: [{"name": gpu, "memory_gb": p.get("memory_gb") or 0.0}] for gpu, p in prices.items()}
        first = next(iter(offers), None)
        if reached:
            enabled = sorted((details.get("clouds") or {}).get("enabled") or {})
            if not enabled:
                why = "SkyPilot has no cloud enabled (run `sky check` in its venv to see what each needs)"
            else:
                cheapest = (f"; from ${prices[first]['usd_per_hour']:.2f}/h for {first}" if first else
                            "; no GPU prices listed")
                why = f"SkyPilot answers ({', '.join(enabled)} enabled{cheapest}), but {NOT_YET}"
        return TargetInfo(name=self.name, kind=self.kind, available=False, why_unavailable=why,
                          gpus=list(offers[first]) if first else [], max_jobs=self.max_jobs,
                          price_per_hour=prices[first]["usd_per_hour"] if first else 0.0,
                          takes_secrets=False, offers=offers,
                          offer_prices={gpu: p["usd_per_hour"] for gpu, p in prices.items()},
                          details=details, answered=reached)

    # -- running: not built yet ------------------------------------------------------------------

    async def launch(self, job: Job, env_secrets: dict[str, str]) -> dict:
        from core.errors import UserError

        raise UserError(f"{self.name}: {NOT_YET}", fix="pick another target (`gpu targets`)")

    async def poll(self, job: Job) -> Poll:
        return Poll("lost", detail=NOT_YET)

    async def read_metrics(self, job: Job, offset: int) -> tuple[bytes, int]:
        return b"", offset

    async def cancel(self, job: Job, force: bool = False) -> None:
        return None

    async def request_checkpoint(self, job: Job) -> None:
        return None

    async def fetch_outputs(self, job: Job, dest: Path) -> list[str]:
        return [NOT_YET]

    def log_path(self, job: Job) -> Path:
        from core import paths

        return paths.jobs_dir() / job.id / "job.log"
