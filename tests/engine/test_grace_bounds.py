"""A checkpoint grace is bounded by the rules: at most MAX_CHECKPOINT_GRACE_S, never past the
overrun rule, and asking again never starts it over (issue 37: a `--grace 600` right after an
agent's job started kept it `checkpointing` at 2.8x its hours, and each new ask restarted it).

Real supervisor, real local jobs, as an agent runs them (`--json`)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from core.engine.cancelling import MAX_CHECKPOINT_GRACE_S
from tests.conftest import gpu_exe, gpu_json, make_git_project, run_gpu, wait_state

pytestmark = pytest.mark.slow

# never saves a checkpoint, however often it is asked: only the rules can end its grace
STUBBORN = '''
import time, gpu
for i in range(100000):
    gpu.log(step=i, loss=1.0 / (i + 1))
    time.sleep(0.1)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "p", {"stubborn.py": STUBBORN})


def _events(short: str) -> list[str]:
    return [e["reason"] for e in gpu_json("status", short, "--verbose")["events"]]


def test_a_grace_past_the_bound_is_refused_at_the_cli(home: Path, project: Path) -> None:
    sub = gpu_json("submit", "stubborn.py", "--hours", "0.05", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    try:
        wait_state(short, {"running"}, timeout=90)
        proc = run_gpu("cancel", short, "--checkpoint", "--grace", "600", "--json")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"at most {MAX_CHECKPOINT_GRACE_S:g} s" in proc.stderr
        assert gpu_json("status", short)["state"] == "running"  # refused whole: nothing asked
    finally:
        run_gpu("cancel", short)


def test_the_grace_ends_at_the_overrun_rule_and_is_not_restarted(home: Path, project: Path) -> None:
    # 0.003 h = 10.8 s; past x1.25 at 13.5 s of running
    sub = gpu_json("submit", "stubborn.py", "--hours", "0.003", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=90)
    asked = time.monotonic()
    first = subprocess.Popen([gpu_exe(), "cancel", short, "--checkpoint", "--grace",
                              str(int(MAX_CHECKPOINT_GRACE_S)), "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # it waits for the end: an agent asks again meanwhile
    try:
        time.sleep(3)
        again = run_gpu("cancel", short, "--checkpoint", "--grace", "200", "--json")
        assert again.returncode == 0, again.stderr
        out, err = first.communicate(timeout=MAX_CHECKPOINT_GRACE_S + 60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert json.loads(out)["job"]["state"] == "cancelled"
    done = wait_state(short, {"cancelled", "failed", "done"}, timeout=120)
    took = time.monotonic() - asked
    assert done["state"] == "cancelled", done
    assert took < MAX_CHECKPOINT_GRACE_S / 2, took  # the rule ended it, not the 300 s grace
    reasons = _events(short)
    assert any("during its checkpoint grace: stopping it now" in r and "past its 0.003 h estimate" in r
               for r in reasons), "\n".join(reasons)
    assert any("asked again" in r and "is kept, not started over" in r for r in reasons), "\n".join(reasons)
    assert sum(r.startswith("cancel requested by") for r in reasons) == 1, reasons
