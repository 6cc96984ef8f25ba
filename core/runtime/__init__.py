"""Files that travel with every job: the `gpu` module, the launcher (launch.py, with the job
log's filter in joblog.py, how it starts each process in jobspawn.py, the job's environment in
venvbuild.py), its text filter (textsafe.py), what may leave the job (redact.py: secret
masking, metric names), the GPU utilisation sampler the launcher runs beside the job
(gpuutil.py), and the tracking APIs: `openscience_track`, the `wandb` stand-in (shims/) and the
job's sitecustomize (jobsite/) that puts the stand-in on the path where wandb is missing and
follows it where not.

All are stdlib-only and must stay so: they run with the target's Python, before (and
without) the project's dependencies. The bottom floor: imports the standard library and itself
only, never another package of core/ (tests/project/test_import_rules.py: FLOORS).
"""

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent
GPU_MODULE_DIR = RUNTIME_DIR / "gpu"
LAUNCHER = RUNTIME_DIR / "launch.py"
JOBSITE_DIR = RUNTIME_DIR / "jobsite"  # on the job's PYTHONPATH: its sitecustomize
SHIMS_DIR = RUNTIME_DIR / "shims"  # appended to the job's sys.path by that sitecustomize


def files() -> list[tuple[Path, str]]:
    """Every file that travels: (source, path inside the job's runtime folder)."""
    return [(p, p.relative_to(RUNTIME_DIR).as_posix()) for p in sorted(RUNTIME_DIR.rglob("*.py"))
            if "__pycache__" not in p.parts and p != RUNTIME_DIR / "__init__.py"]
