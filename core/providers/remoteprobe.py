"""Probing a target on another machine: what its host says (load, CPUs, memory and nvidia-smi's
GPUs: HOST_FACTS and its parser), the answer as a TargetInfo, and that answer remembered on
disk for `probe_ttl_s` (default PROBE_TTL_S), so a burst of submits (each its own process) asks
the host once. Each kind asks its own way (`probe_fresh`). A mixin of
`core.providers.remote.RemoteProvider`, which holds `name`, `kind`, `transport`, `options`,
`root_option`, `max_jobs` and `declared_gpus`.

The probe also asks whether the host can make the job sandbox the launcher makes there
(`host_sandbox`: core/runtime/boundary.py's own `probe`, sent as source to the host's Python, so
the verdict is the one the launcher will reach; remembered 5 minutes, as the local target's): with one, a job there sees neither the host's
object store, wheelhouse and other jobs' folders nor `~/.ssh`; without one, the target's info
says NO_HOST_SANDBOX (the plan and `gpu targets` show it) and an agent's job there waits for a
person unless the user config opens the target to agents (`agents_without_sandbox: true`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from core import paths
from core.providers.base import CONTAINER_NOTE, TargetInfo
from core.providers.hostlink import run_sync
from core.runtime import RUNTIME_DIR
from core.transport.base import HostKeyError, TransportError, quote

PROBE_TTL_S = 30.0
SANDBOX_TTL_S = 300.0  # a launch trusts a host's sandbox verdict this long (as the local target)
# what the plan, `gpu targets` and the hold say about a host where no sandbox can be made
NO_HOST_SANDBOX = "no sandbox on this host: a job there runs as your account and can reach other jobs"
OPEN_KEY = "agents_without_sandbox"  # targets.NAME.agents_without_sandbox: true (the user config)


def sandbox_probe_source() -> str:
    """`python -c` source that prints boundary.probe()'s verdict on the host as one JSON line
    (after a mark): the launcher's own module, so the probe and the launch agree."""
    lines = ["import sys as _s, types as _t, json as _j"]
    for name in _with_siblings("boundary"):
        text = (RUNTIME_DIR / f"{name}.py").read_text()
        lines += [f"_m = _t.ModuleType({name!r}); _s.modules[{name!r}] = _m",
                  f"exec(compile({text!r}, {name + '.py'!r}, 'exec'), _m.__dict__)"]
    lines.append("_v = _s.modules['boundary'].probe()")
    lines.append("print('gpu-router-sandbox ' + _j.dumps({k: _v.get(k) for k in ('ok', 'why', 'kind', 'tool')}))")
    return "\n".join(lines) + "\n"


_SIBLING_IMPORT = re.compile(r"^\s*(?:import (\w+)\s*$|from (\w+) import )", re.M)


def _with_siblings(module: str, seen: list[str] | None = None) -> list[str]:
    """`module` and the runtime's modules it imports as a script does (`import jobprocs`),
    those first: each is registered on the host before the ones that import it."""
    seen = [] if seen is None else seen
    text = (RUNTIME_DIR / f"{module}.py").read_text()
    for m in _SIBLING_IMPORT.finditer(text):
        name = m.group(1) or m.group(2)
        if name not in seen and name != module and (RUNTIME_DIR / f"{name}.py").is_file():
            _with_siblings(name, seen)
    if module not in seen:
        seen.append(module)
    return seen


def parse_sandbox(out: str) -> dict:
    """The verdict from `sandbox_probe_source`'s output; no verdict is "no sandbox"."""
    for line in out.splitlines():
        if line.startswith("gpu-router-sandbox "):
            try:
                doc = json.loads(line.split(" ", 1)[1])
            except ValueError:
                break
            if isinstance(doc, dict) and isinstance(doc.get("ok"), bool):
                return {"ok": doc["ok"], "why": str(doc.get("why") or "")[:300]}
    return {"ok": False, "why": "the host did not answer whether it can make a sandbox"}


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
        for pattern in (f"probe-{self.name}-*.json", f"sandbox-{self.name}-*.json"):
            for f in paths.cache_dir().glob(pattern):
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
            if info.available:
                self._mark_sandbox(info, await self.host_sandbox(fresh=refresh))
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

    # -- the host's sandbox ------------------------------------------------------------------

    def open_to_agents(self) -> bool:
        """The user config lets agents' jobs run on this host without a sandbox."""
        return self.options.get(OPEN_KEY) is True

    def _sandbox_cache_file(self) -> Path:
        return self._probe_cache_file().with_name(self._probe_cache_file().name.replace("probe-", "sandbox-", 1))

    async def host_sandbox(self, fresh: bool = False) -> dict:
        """Can the host make the launcher's sandbox? {"ok", "why"}: asked with the launcher's own
        probe (boundary.probe: a real bubblewrap start there) once, then remembered SANDBOX_TTL_S
        on disk (every submit is its own process) as the local target's verdict is; `fresh` (`gpu
        targets probe NAME`) asks now. A stale "yes" can only stop an agent's job at its start
        (the launcher tries again), never run one unsandboxed."""
        if not fresh:
            try:
                doc = json.loads(self._sandbox_cache_file().read_text())
                if time.time() - doc["at"] < SANDBOX_TTL_S and isinstance(doc["verdict"]["ok"], bool):
                    return doc["verdict"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        python = self._remote["python"] if getattr(self, "_remote", None) else self.python
        r = await self.transport.run(f"{quote(python)} -", input=sandbox_probe_source().encode(), timeout=60)
        verdict = parse_sandbox(r.out)
        try:
            path = self._sandbox_cache_file()
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"at": time.time(), "verdict": verdict}))
            os.replace(tmp, path)
        except OSError:
            pass
        return verdict

    def _mark_sandbox(self, info: TargetInfo, verdict: dict) -> None:
        """The verdict in the target's info: details["sandbox"] (the probe cache and --json keep
        it) and, without one, `unsandboxed_why` (what the plan, the policy and `gpu targets` read)."""
        info.details["sandbox"] = {"ok": verdict["ok"], "why": verdict["why"],
                                   OPEN_KEY: self.open_to_agents()}
        info.unsandboxed_why = None if verdict["ok"] else NO_HOST_SANDBOX
        if self.options.get("container"):  # its jobs run in that container (policy.as_run)
            info.details["container"] = self.options["container"]
            _container_note(info)

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
    box = info.details.get("sandbox")
    if isinstance(box, dict) and box.get("ok") is False:
        info.unsandboxed_why = NO_HOST_SANDBOX
    if info.details.get("container"):
        _container_note(info)
    return info


def _container_note(info: TargetInfo) -> None:
    """A target whose jobs all run in a container: they run without the sandbox, said as the
    plan says it for a request's container (core/planning/policy.as_run)."""
    info.unsandboxed_why = info.unsandboxed_why or CONTAINER_NOTE
