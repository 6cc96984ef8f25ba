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
from tests.test_modal import add_modal, modal_fake  # noqa: F401 - the fixture

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
