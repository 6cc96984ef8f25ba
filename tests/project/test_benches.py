"""Every bench in bench/ runs in its small mode (`--small`), so none rots between the runs
that measure: the same code path on tiny inputs, in seconds, as a user would start it
(`python bench/X.py --small`). The figures are printed and not judged here (no timing
assertions); a bench that breaks exits non-zero, and that fails its test.

The benches that need services (sshd, Slurm, the Kaggle and Modal fakes, a keychain) start
them with tests/services.py themselves, as they do when run by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BENCHES = sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))


def test_every_bench_has_a_small_mode() -> None:
    """A new bench without `--small` fails here (and in its own run below)."""
    assert BENCHES, "no bench/*.py found"
    lacking = [p.name for p in BENCHES if "--small" not in p.read_text() and "parse_small(" not in p.read_text()]
    assert not lacking, f"benches without a --small mode (use _common.parse_small): {lacking}"


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_bench_runs_small(bench: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # TMPDIR left alone: unix socket paths (dbus, sshd) stay short
    env.pop("BENCH_KEEP", None)
    out = subprocess.run([sys.executable, str(bench), "--small"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (f"{bench.name} --small exited {out.returncode}\n"
                                 f"--- stdout (tail)\n{out.stdout[-3000:]}\n--- stderr (tail)\n{out.stderr[-3000:]}")
    assert out.stdout.strip(), f"{bench.name} --small printed no figures"
