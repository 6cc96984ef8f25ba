"""Files that travel with every job: the `gpu` module and the launcher.

Both are stdlib-only and must stay so: they run with the target's Python, before (and
without) the project's dependencies.
"""

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent
GPU_MODULE_DIR = RUNTIME_DIR / "gpu"
LAUNCHER = RUNTIME_DIR / "launch.py"
