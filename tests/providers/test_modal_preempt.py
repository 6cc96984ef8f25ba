"""A Modal preemption loses nothing (issue 38, part 4), against tests/fake_modal.py preempting as
Modal does: a signal to the container (SIGINT to its main process, as Modal's guide says; SIGTERM
to every process, as Kubernetes-style runtimes send), a grace period for exit handlers, SIGKILL,
and the same input delivered to a new container.

The job writes its checkpoint in place every step (open "w", write: a container killed halfway
leaves an empty file), marks it with `gpu.checkpoint_saved()`, then logs the step's metric. It
announces the moments the test wants it preempted by writing a file on the job's volume, which
the fake watches (`preempt_when`), and then holds, deaf, until it is killed:
- between two steps, just after a burst of steps whose rows the relay has most likely not
  copied yet (and with no grace at all at that point, so nothing in the dying container can
  copy them): they are only in the metrics file on the volume;
- in the middle of a checkpoint write: the live file is torn when the rerun starts.
Each step's metric must come home exactly once, in step order, and the rerun must go on from a
complete checkpoint, with the job ending `done` at attempt 1 (Modal's rerun is no new attempt).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import make_git_project, run_gpu, gpu_json, wait_state
from tests.fake_modal import FakeModal
from tests.providers.test_modal import add_modal, modal_fake  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

STEPS, BETWEEN, MID = 14, 6, 10

JOB = f"""
import json, os, time
from pathlib import Path
import gpu

here = gpu.checkpoint_dir().parent  # the job's folder on its Modal volume
state = gpu.checkpoint_dir() / "state.txt"
start = int(state.read_text()) + 1 if state.exists() else 0  # a torn (empty) file fails here
print(f"container starts at step {{start}}", flush=True)


def hold(name):
    (here / name).write_text("")  # the fake preempts as soon as it sees this
    while True:  # deaf to the checkpoint request: held until the container is killed
        time.sleep(0.1)


for step in range(start, {STEPS}):
    if step == {BETWEEN} and "between" in os.environ["PREEMPT_AT"] and not (here / "preempt-between").exists():
        hold("preempt-between")
    if step == {MID} and "mid" in os.environ["PREEMPT_AT"] and not (here / "preempt-mid").exists():
        f = open(state, "w")  # rewritten in place: the file is empty from here
        f.write("")
        f.flush()
        hold("preempt-mid")
    with open(state, "w") as f:
        f.write(str(step))
    gpu.checkpoint_saved()
    gpu.log(step=step, loss=1.0 / (step + 1))
    if step > {BETWEEN}:
        time.sleep(0.1)
(gpu.output_dir() / "done.json").write_text(json.dumps({{"start": start}}))
"""


VARIANTS = pytest.mark.parametrize("sig,to", [(signal.SIGINT, "main"), (signal.SIGTERM, "all")],
                                   ids=["sigint-main", "sigterm-all"])


def _run(fake: FakeModal, home: Path, tmp_path: Path, sig: int, to: str, at: tuple[str, ...]) -> tuple[dict, str, list]:
    """The job, preempted at each point in `at`; (its final status, its log, its home metric rows)."""
    add_modal()
    if "between" in at:  # no grace: nothing in the dying container copies the burst's rows
        fake.preempt_when("job/preempt-between", sig=sig, grace_s=0.0, to=to)
    if "mid" in at:
        fake.preempt_when("job/preempt-mid", sig=sig, grace_s=1.5, to=to)
    project = make_git_project(tmp_path / "pre", {"train.py": JOB})
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--env", f"PREEMPT_AT={','.join(at)}",
                   "--wait-s", "0", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=240)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", (done["reason"], log)
    assert "this attempt already ran" not in log
    assert [(s, t) for _, s, t in fake.preemptions] == [(int(sig), to)] * len(at)
    (call,) = fake.function_calls.values()
    assert call.containers == len(at) + 1 and done["attempt"] == 1, log  # one input, run again by Modal
    assert log.count("Modal ran this input again in a new container") == len(at), log
    done["outputs"] = json.loads((Path(sub["job"]["outputs_dir"]) / "done.json").read_text())
    rows = [json.loads(r) for r in (home / "jobs" / job_id / "metrics.jsonl").read_text().splitlines()]
    assert gpu_json("metrics", short)["metrics"]["loss"]["points"] == len(rows)
    return done, log, rows


@VARIANTS
def test_rows_a_preempted_container_wrote_come_home_once_in_step_order(
        modal_fake: FakeModal, home: Path, tmp_path: Path, sig: int, to: str) -> None:  # noqa: F811
    """Bullet 1: the burst of rows before the preemption is only in the metrics file on the
    volume (never relayed); it comes home, before the rerun's rows, each once. And bullet 3 in
    the SIGTERM variant: the launcher that got the signal records an exit; the rerun is not
    refused for it."""
    done, log, rows = _run(modal_fake, home, tmp_path, sig, to, ("between",))
    assert [r["step"] for r in rows] == list(range(STEPS)), rows
    starts = [line for line in log.splitlines() if line.startswith("container starts at step")]
    assert starts == ["container starts at step 0", f"container starts at step {BETWEEN}"], log


@VARIANTS
def test_a_rerun_after_a_torn_checkpoint_write_resumes_from_the_last_complete_save(
        modal_fake: FakeModal, home: Path, tmp_path: Path, sig: int, to: str) -> None:  # noqa: F811
    """Bullet 2: killed while the checkpoint file was being rewritten (empty on the volume), the
    rerun resumes from the newest complete generation (step MID - 1), never the torn file."""
    done, log, rows = _run(modal_fake, home, tmp_path, sig, to, ("mid",))
    assert "restored the last complete checkpoint (generation %d)" % MID in log, log
    assert done["outputs"] == {"start": MID}
    assert [r["step"] for r in rows] == list(range(STEPS)), rows


@VARIANTS
def test_a_job_preempted_twice_between_steps_and_mid_write_loses_nothing(
        modal_fake: FakeModal, home: Path, tmp_path: Path, sig: int, to: str) -> None:  # noqa: F811
    done, log, rows = _run(modal_fake, home, tmp_path, sig, to, ("between", "mid"))
    assert [r["step"] for r in rows] == list(range(STEPS)), rows
    starts = [line for line in log.splitlines() if line.startswith("container starts at step")]
    assert starts == ["container starts at step 0", f"container starts at step {BETWEEN}",
                      f"container starts at step {MID}"], log
    assert done["outputs"] == {"start": MID}


def _saved(folder: Path, gens: Path, files: dict[str, bytes], generation: int) -> None:
    """`files` written into `folder` and marked complete by the job's own gpu.checkpoint_saved(),
    frozen into `gens` as on a Modal target (GPU_ROUTER_CHECKPOINT_GENERATIONS)."""
    import os
    import subprocess
    import sys

    from core.runtime import RUNTIME_DIR

    folder.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (folder / rel).write_bytes(data)
    env = {**os.environ, "GPU_ROUTER_CHECKPOINT_DIR": str(folder), "GPU_ROUTER_CHECKPOINT_GENERATIONS": str(gens),
           "PYTHONPATH": str(RUNTIME_DIR)}
    got = subprocess.run([sys.executable, "-c", "import gpu; print(gpu.checkpoint_saved())"], env=env,
                         capture_output=True, text=True, check=True)
    assert int(got.stdout) == generation, got.stderr


def test_the_restore_takes_the_newest_whole_generation_only_when_the_live_folder_is_not_its_last_save(
        tmp_path: Path, monkeypatch) -> None:
    """The rule a rerun applies before the job starts (modal_function._restore_complete_checkpoint):
    a live folder that matches its marker stays; a torn file, or a file written after the marker
    (a save under way), brings the newest whole generation back; without a marker nothing says
    what is complete, and nothing is touched."""
    import os
    import sys
    import time

    from core.runtime import modal_function as mf

    monkeypatch.setattr(sys, "path", [*sys.path])  # the restore puts the runtime on the path, as in a container
    ckpt, gens = tmp_path / "job" / "ckpt", tmp_path / "job" / "ckpt-gens"
    assert mf._restore_complete_checkpoint(str(ckpt), str(gens)) is None  # nothing there at all
    _saved(ckpt, gens, {"state.txt": b"1", "w.bin": b"x" * 100}, 1)
    _saved(ckpt, gens, {"state.txt": b"2"}, 2)
    assert mf._restore_complete_checkpoint(str(ckpt), str(gens)) is None  # the last save, whole
    assert (ckpt / "state.txt").read_bytes() == b"2"

    (ckpt / "state.txt").write_bytes(b"")  # torn: rewritten in place when the container died
    note = mf._restore_complete_checkpoint(str(ckpt), str(gens))
    assert note and "generation 2" in note
    assert (ckpt / "state.txt").read_bytes() == b"2" and (ckpt / "w.bin").read_bytes() == b"x" * 100
    assert mf._restore_complete_checkpoint(str(ckpt), str(gens)) is None  # the restored folder matches its marker
    assert not [p for p in ckpt.parent.iterdir() if p.name not in ("ckpt", "ckpt-gens")]  # no leftovers

    time.sleep(0.01)
    (ckpt / "next.bin").write_bytes(b"half")  # a file of the next save, begun after the marker
    assert "generation 2" in (mf._restore_complete_checkpoint(str(ckpt), str(gens)) or "")
    assert not (ckpt / "next.bin").exists()

    plain = tmp_path / "plain" / "ckpt"
    plain.mkdir(parents=True)
    (plain / "state.txt").write_bytes(b"")  # no marker: the job never said what is complete
    assert mf._restore_complete_checkpoint(str(plain), str(tmp_path / "plain" / "ckpt-gens")) is None
    assert (plain / "state.txt").read_bytes() == b""

    for name in os.listdir(gens):  # a marker, but no whole generation to go back to: said, left
        if name.isdigit():
            (gens / name / mf.COMPLETE).unlink()
    (ckpt / "state.txt").write_bytes(b"")
    note = mf._restore_complete_checkpoint(str(ckpt), str(gens))
    assert note and "left as it is" in note and (ckpt / "state.txt").read_bytes() == b""


def test_a_rerun_sets_aside_a_signal_ended_attempt_and_keeps_an_exit_the_job_made(tmp_path: Path) -> None:
    """Only a rerun (the launcher's `started` claim is there) is set aside, and an exit the job
    made by itself stands: the launcher refuses to run it again, and that exit is the result."""
    import json as _json

    from core.runtime import modal_function as mf

    adir = tmp_path / "attempts" / "1"
    adir.mkdir(parents=True)
    assert mf._set_aside_preempted(str(adir)) is None  # a first start
    (adir / "started").write_text("1")
    (adir / "starts.json").write_text('{"log": 5, "metrics": 7}')
    assert mf._set_aside_preempted(str(adir)) == f"{adir}.preempted-1"  # killed before any exit record
    adir.mkdir()
    (adir / "started").write_text("1")
    (adir / "exit.json").write_text(_json.dumps({"code": -15, "terminated_by": 15}))
    assert mf._set_aside_preempted(str(adir)) == f"{adir}.preempted-2"  # the launcher got the signal too
    adir.mkdir()
    (adir / "started").write_text("1")
    (adir / "exit.json").write_text(_json.dumps({"code": 0, "terminated_by": None}))
    (adir / mf.PREEMPTED).write_text("{}")
    assert mf._set_aside_preempted(str(adir)) == f"{adir}.preempted-3"  # checkpointed on the signal, exited 0
    adir.mkdir()
    (adir / "started").write_text("1")
    (adir / "exit.json").write_text(_json.dumps({"code": 1, "terminated_by": None}))
    assert mf._set_aside_preempted(str(adir)) is None and adir.is_dir()  # the job's own failure stands


def test_the_example_job_checkpoints_in_the_grace_and_the_rerun_goes_on_from_there(
        modal_fake: FakeModal, home: Path, tmp_path: Path) -> None:  # noqa: F811
    """The quickstart example honours gpu.should_checkpoint(): Modal's interrupt asks it to
    checkpoint, it saves the step it is at and exits 0 within the grace. That exit is no end of
    the job (Modal runs the input again): the rerun goes on from that save, and every one of the
    200 steps' metrics comes home once, in step order."""
    import time

    from tests.conftest import copy_example

    add_modal()
    project = copy_example(tmp_path / "quickstart")
    sub = gpu_json("submit", "train.py", "--hours", "0.5", "--provider", "md", "--wait-s", "0", "--", "--steps",
                   "200", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    deadline = time.monotonic() + 120
    while "step   50" not in run_gpu("logs", short).stdout:
        assert time.monotonic() < deadline, run_gpu("logs", short).stdout
        time.sleep(0.2)
    (call,) = modal_fake.function_calls.values()
    modal_fake.preempt(call.id, signal.SIGINT, grace_s=5.0)

    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done" and done["attempt"] == 1, (done["reason"], log)
    rows = [json.loads(r) for r in (home / "jobs" / job_id / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(200)), [r["step"] for r in rows]
    assert "Modal is preempting this container: asking the job to checkpoint" in log
    saved = [line for line in log.splitlines() if line.startswith("checkpoint at step")]
    resumed = [line for line in log.splitlines() if line.startswith("resuming from step")]
    assert len(saved) == 1 and len(resumed) == 1, log
    assert int(resumed[0].split()[-1]) == int(saved[0].split()[3].rstrip(":")) + 1, log
    assert json.loads((Path(sub["job"]["outputs_dir"]) / "result.json").read_text())["steps"] == 200


def test_a_restored_generation_keeps_a_sparse_files_holes(tmp_path: Path, monkeypatch) -> None:
    """A rerun's restore copies the generation back sparse (64 MiB apparent, a few KiB on the
    volume), byte for byte, with the mtime the marker checks."""
    import os

    import sys

    from core.runtime import modal_function as mf

    monkeypatch.setattr(sys, "path", [*sys.path])  # the restore puts the runtime on the path, as in a container
    ckpt, gens = tmp_path / "job" / "ckpt", tmp_path / "job" / "ckpt-gens"
    ckpt.mkdir(parents=True)
    with open(ckpt / "big.bin", "wb") as f:
        f.write(b"head")
        f.truncate(64 << 20)
        f.seek((64 << 20) - 4)
        f.write(b"tail")
    _saved(ckpt, gens, {"state.txt": b"1"}, 1)
    (ckpt / "state.txt").write_bytes(b"")  # torn
    assert "generation 1" in (mf._restore_complete_checkpoint(str(ckpt), str(gens)) or "")
    big = ckpt / "big.bin"
    assert big.stat().st_size == 64 << 20 and big.stat().st_blocks * 512 < 1 << 20, big.stat()
    with open(big, "rb") as f:
        head = f.read(4)
        f.seek((64 << 20) - 4)
        assert (head, f.read(4)) == (b"head", b"tail")
    assert mf._restore_complete_checkpoint(str(ckpt), str(gens)) is None  # it matches its marker
    assert sorted(os.listdir(ckpt.parent)) == ["ckpt", "ckpt-gens"]  # no staging or torn folder left
