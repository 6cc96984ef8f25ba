"""What GPUs this machine has: `nvidia-smi` on Linux, MPS on Apple Silicon, else none.

The answer is cached in a small file for a few minutes so that a submit does not pay for
`nvidia-smi` each time.
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
