"""What this machine offers a job: its GPUs (`nvidia-smi` on Linux, MPS on Apple Silicon,
else none) and whether a sandbox can be made here.

Both answers are cached in small files for a few minutes so that a submit does not pay for
`nvidia-smi`, or for a trial bubblewrap start (about 60 ms of CPU), each time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from core import paths
from core.runtime import boundary

CACHE_TTL_S = 300


@dataclass
class Gpu:
    name: str
    memory_gb: float
    index: int = 0
    free_gb: float | None = None

    def to_json(self) -> dict:
        doc = {"name": self.name, "memory_gb": self.memory_gb}
        if self.free_gb is not None:
            doc["free_gb"] = self.free_gb
        return doc


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of `--query-gpu=index,name,memory.total[,memory.free] --format=csv,noheader,nounits`
    (MiB); the same parser serves this machine and remote hosts."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            gpu = Gpu(index=int(parts[0]), name=parts[1], memory_gb=round(float(parts[2]) / 1024, 1))
            if len(parts) > 3 and parts[3] not in ("", "[N/A]"):
                gpu.free_gb = round(float(parts[3]) / 1024, 1)
        except ValueError:
            continue
        gpus.append(gpu)
    return gpus


def _probe() -> list[Gpu]:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=index,name,memory.total",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0:
                return parse_nvidia_smi(out.stdout)
        except (OSError, subprocess.TimeoutExpired):
            pass
    if sys.platform == "darwin" and os.uname().machine == "arm64":  # platform.machine(), without importing platform
        try:  # Apple Silicon shares memory between CPU and GPU
            mem = int(subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True,
                                     text=True, timeout=5).stdout.strip())
            return [Gpu(name="mps", memory_gb=round(mem / 2**30, 1))]
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return [Gpu(name="mps", memory_gb=0)]
    return []


def local_gpus(refresh: bool = False) -> list[Gpu]:
    cache = paths.cache_dir() / "local-gpus.json"
    if not refresh:
        try:
            doc = json.loads(cache.read_text())
            if time.time() - doc["at"] < CACHE_TTL_S:
                return [Gpu(**g) for g in doc["gpus"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    gpus = _probe()
    try:
        cache.write_text(json.dumps({"at": time.time(), "gpus": [asdict(g) for g in gpus]}))
    except OSError:
        pass
    return gpus


def _sandbox_key() -> list | None:
    """What a sandbox verdict depends on, cheap to read: the bubblewrap binary (path and stat),
    the kernel, and the user-namespace switches. None where it cannot be read (no cache then)."""
    if sys.platform != "linux":
        return None
    tool = boundary.bwrap_path()
    if not tool:
        return None
    try:
        st = os.stat(tool)
    except OSError:
        return None
    switches = []
    for name in ("/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces",
                 "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"):
        try:
            with open(name) as f:
                switches.append(f.read().strip())
        except OSError:
            switches.append(None)
    return [tool, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, os.uname().release, switches]


def sandbox_verdict() -> dict:
    """`boundary.probe()`, remembered for CACHE_TTL_S across processes (a submit asks it for
    its plan: an agent's job is held where no sandbox can be made).

    Why a cache is safe: this answer only shapes the plan. The launcher asks `boundary.probe()`
    afresh before every local attempt and refuses to run unsandboxed a job nobody cleared for
    it (core/runtime/launch.py `_decide_sandbox`), so a stale "yes" costs at most a job that
    fails at launch with that reason, never a job run outside the sandbox. The key holds the
    binary's identity, the kernel and the user-namespace switches, so the usual changes (an
    upgrade, `sysctl`) are seen at once; `gpu targets probe local` forgets it."""
    key = _sandbox_key()
    if key is None:
        return boundary.probe()
    cache = paths.cache_dir() / "local-sandbox.json"
    try:
        doc = json.loads(cache.read_text())
        if doc["key"] == key and 0 <= time.time() - doc["at"] < CACHE_TTL_S:
            return doc["verdict"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    verdict = boundary.probe()
    try:
        cache.write_text(json.dumps({"at": time.time(), "key": key, "verdict": verdict}))
    except OSError:
        pass
    return verdict


def forget_sandbox_verdict() -> None:
    """The next `sandbox_verdict` tries bubblewrap again (`gpu targets probe local`)."""
    boundary.forget_probe()
    try:
        (paths.cache_dir() / "local-sandbox.json").unlink()
    except OSError:
        pass
