"""SkyPilot's own virtual environment: made with uv, never gpu-router's.

SkyPilot pins `click<8.2`, `bcrypt==4.0.1` and `uvicorn<0.36` and brings about a hundred
packages (481 MB), so it lives in a venv of its own and gpu-router only ever runs that venv's
python on core/providers/skypilot/adapter.py (gpu-router never imports `sky`). The venv is
either one the person names (`venv:` of a target, later) or ours under the data folder,
made once with `uv venv` + `uv pip install 'skypilot[slurm]==<pinned>'`.

uv is the `uv` package gpu-router already depends on (uv.find_uv_bin); it is told never to
download a Python (`UV_PYTHON_DOWNLOADS=never`): the venv's Python is a real interpreter on
this machine (by default the one running gpu-router), so making the venv reaches no host but
the package index.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from core.config.targetopts import CLOUD_RE
from core.errors import UserError

SKYPILOT_VERSION = "0.14.1"
SKYPILOT_SPEC = f"skypilot[slurm]=={SKYPILOT_VERSION}"
MARKER = "gpu-router-skypilot.json"  # written last: a venv without it is half made
INSTALL_TIMEOUT_S = 1800.0  # ~100 packages; 58 s on two busy cores with a warm cache


def default_path() -> Path:
    """Where our own SkyPilot venv lives: beside the store, the bundles and the job venvs."""
    from core import paths

    return paths.home() / "skypilot" / "venv"


def spec_for(clouds: list[str] | None, installed_spec: str | None = None) -> str:
    """What our venv installs: SkyPilot with the extras of the clouds a target names (each
    cloud's client libraries: `skypilot[aws,runpod]`), else Slurm's alone (the clouds SkyPilot
    then lists as disabled say which extra each lacks). The extras already installed stay (one
    venv serves every skypilot target: a second target's clouds add to the first's)."""
    have = re.match(r"skypilot\[([^\]]*)\]==", installed_spec or "")
    extras = sorted({c.lower() for c in clouds or []} | {"slurm"} | set(have.group(1).split(",") if have else ()))
    bad = [c for c in extras if not CLOUD_RE.match(c)]
    if bad:
        raise UserError(f"{bad[0]!r} is not a SkyPilot cloud name", fix="e.g. --clouds aws,runpod,kubernetes")
    return f"skypilot[{','.join(extras)}]=={SKYPILOT_VERSION}"


def python_of(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _uv() -> str:
    try:
        import uv
    except ImportError:  # pragma: no cover - uv is a dependency of gpu-router
        raise UserError("the uv package is not installed", fix="pip install uv") from None
    return uv.find_uv_bin()


def installed(venv: Path) -> dict | None:
    """What our marker says was installed into `venv` (spec, python), or None if unmade."""
    try:
        doc = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and python_of(venv).exists() else None


def ensure(venv: Path | None = None, *, python: str | None = None, spec: str = SKYPILOT_SPEC,
           named: bool = False, timeout: float = INSTALL_TIMEOUT_S) -> Path:
    """The python of a venv holding SkyPilot; makes ours when it is missing or half made.

    A venv the person names (`named`) is used as it is: we never install into someone else's
    environment, so one without `sky` is an error that says what to run. Ours is (re)made when
    its marker is missing or names another spec.
    """
    venv = Path(venv) if venv is not None else default_path()
    py = python_of(venv)
    if named:
        if not py.exists():
            raise UserError(f"the SkyPilot venv {venv} has no python",
                            fix=f"uv venv {venv} && uv pip install --python {py} '{spec}'")
        probe = subprocess.run([str(py), "-c", "import sky, sys; sys.stdout.write(sky.__version__)"],
                               capture_output=True, text=True, timeout=120)
        if probe.returncode != 0:
            raise UserError(f"SkyPilot is not installed in {venv}",
                            fix=f"uv pip install --python {py} '{spec}'")
        return py
    mark = installed(venv)
    if mark is not None and mark.get("spec") == spec:
        return py
    uv = _uv()
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "VIRTUAL_ENV": str(venv)}
    venv.parent.mkdir(parents=True, exist_ok=True)
    (venv / MARKER).unlink(missing_ok=True)
    steps = [[uv, "venv", "--quiet", "--allow-existing", "--python", python or sys.executable, str(venv)],
             [uv, "pip", "install", "--quiet", "--python", str(py), spec]]
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise UserError(f"making the SkyPilot venv took over {timeout:.0f} s: {' '.join(argv[1:3])}",
                            fix="check the package index can be reached, then try again") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
            raise UserError(f"making the SkyPilot venv at {venv} failed ({' '.join(argv[1:3])}): "
                            + " | ".join(tail),
                            fix="check the package index can be reached, then try again")
    (venv / MARKER).write_text(json.dumps({"spec": spec, "python": python or sys.executable}))
    return py
