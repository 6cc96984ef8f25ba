"""Files that travel with every job: the `gpu` module, the launcher, its text filter
(textsafe.py) and what may leave the job (redact.py: secret masking, metric names).

All are stdlib-only and must stay so: they run with the target's Python, before (and
without) the project's dependencies.
"""

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent
GPU_MODULE_DIR = RUNTIME_DIR / "gpu"
LAUNCHER = RUNTIME_DIR / "launch.py"


def files() -> list[tuple[Path, str]]:
    """Every file that travels: (source, path inside the job's runtime folder)."""
    out = [(p, p.name) for p in sorted(RUNTIME_DIR.glob("*.py")) if p.name != "__init__.py"]
    out += [(p, "gpu/" + p.relative_to(GPU_MODULE_DIR).as_posix())
            for p in sorted(GPU_MODULE_DIR.rglob("*.py")) if "__pycache__" not in p.parts]
    return out
