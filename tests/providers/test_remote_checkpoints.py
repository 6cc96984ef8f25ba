"""Checkpoints come home from remote targets whatever the script does (issue 38, item 2).

A new user's first script looks like examples/quickstart: it writes its state into
gpu.checkpoint_dir() every step (a temporary file renamed over state.json) and never calls
gpu.checkpoint_saved(), so no generation is ever frozen; home counts its folder complete once
two looks agree. Such a job, stopped with `gpu cancel --checkpoint`, must bring the state it
saved when asked home into runs/<id>/checkpoint, and `gpu resume` must go on from it; a job
that ends `done` keeps its last checkpoint as an output too. The same holds for a script that
does call gpu.checkpoint_saved(). Over a real OpenSSH server on 127.0.0.1 and a real one-node
Slurm, through the installed `gpu` and its supervisor, with the default 15 s mirror clock (a
shorter clock would hide a job whose listing never sits still between two looks).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.providers.test_slurm import lab  # noqa: F401 - the `lab` Slurm target fixture

pytestmark = pytest.mark.slow

# quickstart's style: a save every step (rename over state.json), and on a request to
# checkpoint one last save and exit 0; --saved also calls gpu.checkpoint_saved()
TRAIN = """
import json, os, sys, time
import gpu

marked = "--saved" in sys.argv
steps = int(sys.argv[sys.argv.index("--steps") + 1])
ckpt = gpu.checkpoint_dir() / "state.json"
start = json.loads(ckpt.read_text())["step"] + 1 if ckpt.exists() else 0
if start:
    print(f"resuming from step {start}", flush=True)
big = gpu.checkpoint_dir() / "big.bin"  # a 64 MiB sparse file: a few bytes of data, the rest a hole
if not big.exists():
    with open(big, "wb") as f:
        f.write(b"head")
        f.truncate(64 << 20)
        f.seek((64 << 20) - 4)
        f.write(b"tail")
st = os.stat(big)
print(f"big.bin holds {st.st_blocks * 512} bytes on disk of {st.st_size}", flush=True)

def save(step: int) -> None:
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    tmp.replace(ckpt)
    if marked:
        gpu.checkpoint_saved()

step = start
for step in range(start, steps):
    with open(gpu.output_dir() / "steps.log", "a") as f:
        f.write(f"{gpu.attempt()} {step}\\n")
    save(step)
    if gpu.should_checkpoint():
        print(f"checkpoint at step {step}: asked to stop, saving and exiting", flush=True)
        raise SystemExit(0)
    if step % 10 == 0:
        print(f"step {step}", flush=True)
    time.sleep(0.05)
save(step)
print("done", flush=True)
"""


def _project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "p", {"train.py": TRAIN, "gpu.yaml": "script: train.py\n"})


def _wait_log(short: str, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in run_gpu("logs", short).stdout:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {short} never logged {text!r}: {run_gpu('logs', short).stdout[-2000:]}")


def _steps(outputs: Path) -> list[tuple[int, int]]:
    text = (outputs / "steps.log").read_text()
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def cancel_resume_and_finish(project: Path, target: str, *args: str) -> None:
    """A long job cancelled with --checkpoint after a while, then resumed to its end: the
    checkpoint it saved when asked is in runs/<id>/checkpoint and the resume goes on from it;
    at its end (`done`) its last checkpoint is kept there again."""
    sub = gpu_json("submit", "--provider", target, "--hours", "0.2", "--wait-s", "10",
                   "--", "--steps", str(STEPS), *args, cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=180)
    _wait_log(short, "step 100")

    cancelled = gpu_json("cancel", short, "--checkpoint", timeout=180)
    assert cancelled["job"]["state"] == "cancelled", cancelled
    doc = gpu_json("status", short, "--verbose")
    logs = run_gpu("logs", short).stdout
    assert "asked to stop, saving and exiting" in logs, logs[-2000:]
    out = Path(doc["outputs_dir"])
    held = out / "checkpoint" / "state.json"
    assert held.is_file(), (doc["reason"], [e["reason"] for e in doc["events"]], sorted(
        p.name for p in out.iterdir()))
    saved = json.loads(held.read_text())["step"]
    assert max(s for _, s in _steps(out)) == saved  # the state it saved when asked, not an older one

    resumed = gpu_json("resume", short)
    assert resumed["job"]["state"] in ("routing", "provisioning", "running"), resumed
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=240)
    logs = run_gpu("logs", short).stdout
    assert done["state"] == "done", (done["reason"], logs[-2000:])
    assert f"resuming from step {saved + 1}" in logs, logs[-3000:]
    # the sparse file came home sparse and was restored on the host sparse (its holes dug again)
    on_disk = [int(line.split(" holds ")[1].split()[0]) for line in logs.splitlines() if "big.bin holds" in line]
    assert len(on_disk) == 2 and all(n < 1 << 20 for n in on_disk), on_disk
    doc = gpu_json("status", short, "--verbose")
    out = Path(doc["outputs_dir"])
    final = json.loads((out / "checkpoint" / "state.json").read_text())
    assert final == {"step": STEPS - 1}, final
    big = out / "checkpoint" / "big.bin"
    assert big.stat().st_size == 64 << 20 and big.stat().st_blocks * 512 < 1 << 20
    with open(big, "rb") as f:
        head = f.read(4)
        f.seek((64 << 20) - 4)
        assert (head, f.read(4)) == (b"head", b"tail")
    steps = _steps(out)
    assert sorted(s for _, s in steps) == list(range(STEPS))  # every step once across both attempts


STEPS = 1200  # 0.05 s a step: a minute, well past the first look of the 15 s mirror clock


def done_job_keeps_its_checkpoint(project: Path, target: str) -> None:
    """A short job that ends `done` between two looks of the mirror: its last state is an output."""
    sub = gpu_json("submit", "--provider", target, "--hours", "0.1", "--wait-s", "10",
                   "--", "--steps", "60", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    assert done["state"] == "done", (done["reason"], run_gpu("logs", short).stdout[-2000:])
    out = Path(gpu_json("status", short)["outputs_dir"])
    held = out / "checkpoint" / "state.json"
    assert held.is_file(), sorted(p.name for p in out.iterdir())
    assert json.loads(held.read_text()) == {"step": 59}


@pytest.fixture
def box(sshd, home: Path, tmp_path: Path) -> str:
    from tests.providers.test_ssh import add_box

    add_box(sshd, tmp_path)
    return "box"


@pytest.mark.parametrize("marked", [False, True], ids=["no-checkpoint_saved", "checkpoint_saved"])
def test_ssh_cancel_with_checkpoint_resume_and_done(box: str, tmp_path: Path, marked: bool) -> None:
    cancel_resume_and_finish(_project(tmp_path), box, *(["--saved"] if marked else []))


def test_ssh_done_job_brings_its_last_checkpoint_home(box: str, tmp_path: Path) -> None:
    done_job_keeps_its_checkpoint(_project(tmp_path), box)


@pytest.mark.parametrize("marked", [False, True], ids=["no-checkpoint_saved", "checkpoint_saved"])
def test_slurm_cancel_with_checkpoint_resume_and_done(lab: Path, tmp_path: Path, marked: bool) -> None:
    cancel_resume_and_finish(_project(tmp_path), "lab", *(["--saved"] if marked else []))


def test_slurm_done_job_brings_its_last_checkpoint_home(lab: Path, tmp_path: Path) -> None:
    done_job_keeps_its_checkpoint(_project(tmp_path), "lab")
