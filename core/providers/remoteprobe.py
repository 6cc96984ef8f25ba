"""Probing a target on another machine: what its host says (load, CPUs, memory and nvidia-smi's
GPUs: HOST_FACTS and its parser), the answer as a TargetInfo, and that answer remembered on
disk for `probe_ttl_s` (default PROBE_TTL_S), so a burst of submits (each its own process) asks
the host once. Each kind asks its own way (`probe_fresh`). A mixin of
`core.providers.remote.RemoteProvider`, which holds `name`, `kind`, `transport`, `options`,
`root_option`, `max_jobs` and `declared_gpus`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from core import paths
from core.providers.base import TargetInfo
from core.providers.hostlink import run_sync
from core.transport.base import HostKeyError, TransportError

PROBE_TTL_S = 30.0


def parse_gpus(text: str) -> list[dict]:
    """nvidia-smi rows (index, name, total, free) as the dicts TargetInfo holds."""
    from core.providers.gpuprobe import parse_nvidia_smi

    return [g.to_json() for g in parse_nvidia_smi(text)]


HOST_FACTS = r"""
printf 'load '; (cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || sysctl -n vm.loadavg 2>/dev/null | tr -d '{}' || echo '?') | head -n1
printf 'cpus '; (nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') | head -n1
printf 'mem '; (awk '/MemAvailable/ {printf "%.1f\n", $2/1048576}' /proc/meminfo 2>/dev/null || echo '?') | head -n1
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu /'
fi
"""


def parse_host_facts(text: str) -> dict:
    facts: dict[str, Any] = {"gpus": []}
    gpu_rows = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "gpu":
            gpu_rows.append(value)
        elif key in ("load", "cpus", "mem"):
            facts[key] = value.strip()
    facts["gpus"] = parse_gpus("\n".join(gpu_rows))
    return facts


class RemoteProbe(ABC):
    """The probe of a target on another machine (see the module's docstring)."""

    def _probe_cache_file(self) -> Path:
        key = hashlib.sha256(json.dumps([self.kind, self.transport.describe(), self.root_option,
                                         self.options, self.declared_gpus], sort_keys=True,
                                        default=str).encode()).hexdigest()[:12]
        return paths.cache_dir() / f"probe-{self.name}-{key}.json"

    def forget_probe(self) -> None:
        for f in paths.cache_dir().glob(f"probe-{self.name}-*.json"):
            f.unlink(missing_ok=True)

    def _cached_probe(self) -> TargetInfo | None:
        ttl = float(self.options.get("probe_ttl_s", PROBE_TTL_S))
        try:
            doc = json.loads(self._probe_cache_file().read_text())
            if time.time() - doc["at"] < ttl:
                return _info_from(doc["info"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def _store_probe(self, info: TargetInfo) -> None:
        doc = {"at": time.time(), "info": {**info.to_json(), "details": info.details}}
        try:
            path = self._probe_cache_file()
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)
        except OSError:
            pass

    async def probe(self, refresh: bool = False) -> TargetInfo:
        if not refresh:
            cached = self._cached_probe()
            if cached is not None:
                return cached
        try:
            info = await self.probe_fresh()
        except HostKeyError as exc:
            info = self._info(False, f"{exc.what}. Fix: {exc.fix}", details={"host_key": {
                "fingerprint": exc.fingerprint, "changed": exc.changed}})
        except TransportError as exc:
            info = self._info(False, f"unreachable: {exc}")
        self._store_probe(info)
        return info

    def probe_setup(self) -> None:
        """Import the SSH stack before the probe's clock starts (core.providers.probing)."""
        import core.transport.ssh  # noqa: F401

    def probe_now(self) -> TargetInfo:
        """Synchronous probe for `core.engine.targets` (which may run inside the supervisor's loop):
        the cached answer, or a fresh one from a short-lived thread."""
        cached = self._cached_probe()
        if cached is not None:
            return cached
        return run_sync(self.probe)

    def _info(self, available: bool, why: str | None = None, gpus: list[dict] | None = None,
              details: dict | None = None) -> TargetInfo:
        gpus = self.declared_gpus if self.declared_gpus is not None else (gpus or [])
        info = TargetInfo(name=self.name, kind=self.kind, available=available, gpus=gpus,
                          why_unavailable=why, max_jobs=self.max_jobs)
        info.details = {"host": self.transport.describe(), **(details or {})}
        return info

    @abstractmethod
    async def probe_fresh(self) -> TargetInfo:
        """Each kind asks its host its own way (ssh: nvidia-smi; slurm/pbs: partitions, queues)."""

    async def host_facts(self) -> dict:
        r = await self.transport.run(HOST_FACTS, check=f"probing {self.name}")
        return parse_host_facts(r.out)


def _info_from(doc: dict) -> TargetInfo:
    info = TargetInfo(name=doc["name"], kind=doc["kind"], available=doc["available"],
                      gpus=doc.get("gpus") or [], why_unavailable=doc.get("why_unavailable"),
                      max_jobs=doc.get("max_jobs", 1))
    info.details = doc.get("details") or {}
    return info
