"""The compute contract's `checkpoint` folder is mirrored and restored like gpu.checkpoint_dir().

An agent starts a job through `compute_job` (the official MCP client, over stdio, against the
installed `gpu`) with `checkpoint: "ckpts"`. The script knows nothing of gpu-router's folders:
it saves `ckpts/state.json` in its working folder and calls gpu.checkpoint_saved(). The saved
checkpoint is at home while the job still runs (`gpu status`'s checkpoint summary); after a
cancel and `gpu resume` the next attempt finds its `ckpts/` restored and goes on from there,
every step done once. A `checkpoint` that climbs out of the project is refused at the start.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state
from tests.tui.mcp.test_mcp import call, fails, session

pytestmark = pytest.mark.slow

STEPS = 40
EVERY = 5

TRAIN = f"""
import json, os, time
from pathlib import Path
import gpu

ckpt = Path("ckpts") / "state.json"  # the contract's folder, relative to the working folder
same = os.path.realpath("ckpts") == os.path.realpath(gpu.checkpoint_dir())
start = json.loads(ckpt.read_text())["step"] + 1 if ckpt.exists() else 0
print(f"attempt {{gpu.attempt()}} starts at step {{start}}; ckpts is checkpoint_dir: {{same}}", flush=True)
for step in range(start, {STEPS}):
    time.sleep(0.25)
    with open(gpu.output_dir() / "steps.log", "a") as f:
        f.write(f"{{gpu.attempt()}} {{step}}\\n")
    print(f"step {{step}}", flush=True)
    if step % {EVERY} == {EVERY} - 1:
        tmp = ckpt.with_suffix(".tmp")
        tmp.write_text(json.dumps({{"step": step}}))
        os.replace(tmp, ckpt)
        gpu.checkpoint_saved()
"""


def _steps(outputs_dir: str) -> list[tuple[int, int]]:
    text = (Path(outputs_dir) / "steps.log").read_text()
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def _checkpoint_home(short: str, timeout: float = 90) -> dict:
    """`gpu status` once its checkpoint summary says a checkpoint came home."""
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = gpu_json("status", short)
        if doc.get("checkpoint"):
            return doc
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint came home for {short}: {doc}\n{run_gpu('logs', short).stdout}")


async def test_contract_checkpoint_folder_comes_home_mid_run_and_is_restored_on_resume(
        home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"train.py": TRAIN}, gitignore="ckpts/\n")
    async with session() as s:
        bad = await fails(s, "compute_job", action="start", command="python train.py",
                          cwd=str(project), hours=0.1, checkpoint="../elsewhere")
        assert "checkpoint" in bad and "inside the job's working folder" in bad, bad

        started = await call(s, "compute_job", action="start", command="python train.py",
                             cwd=str(project), hours=0.1, name="contract ckpt",
                             checkpoint="ckpts", wait_s=0)  # it is followed while it runs
        assert started["submitted"] is True and started["job"]["state"] != "awaiting_approval"
        short, job_id = started["job"]["short_id"], started["job"]["id"]

    wait_state(short, {"running"})
    request = gpu_json("status", short, "--verbose")["request"]
    assert request["checkpoint"] == "ckpts" and not request["outputs"]

    # home while it runs: the summary names a generation, and home's copy holds ckpts/state.json
    doc = _checkpoint_home(short)
    assert doc["state"] == "running", doc
    summary = doc["checkpoint"]
    assert summary["files"] == 1 and summary["bytes"] > 0 and summary["generation"] >= 1, summary
    saved_home = json.loads((home / "jobs" / job_id / "ckpt-home" / "state.json").read_text())
    assert saved_home["step"] % EVERY == EVERY - 1

    logs = run_gpu("logs", short).stdout
    assert "starts at step 0; ckpts is checkpoint_dir: True" in logs, logs

    cancelled = gpu_json("cancel", short)
    assert cancelled["job"]["state"] == "cancelled", cancelled
    ended = gpu_json("status", short, "--verbose")
    kept = json.loads((Path(ended["outputs_dir"]) / "checkpoint" / "state.json").read_text())
    first = _steps(ended["outputs_dir"])
    assert kept["step"] >= saved_home["step"] and max(s for _, s in first) >= kept["step"]

    resumed = gpu_json("resume", short)
    assert resumed["job"]["id"] == job_id
    done = wait_state(short, {"done", "failed", "cancelled"}, timeout=120)
    doc = gpu_json("status", short, "--verbose")
    logs = run_gpu("logs", short).stdout
    assert done["state"] == "done", (doc["reason"], logs)
    assert doc["attempt"] == 2
    # the second attempt found ckpts/ restored in its working folder and went on from it
    assert f"attempt 2 starts at step {kept['step'] + 1}; ckpts is checkpoint_dir: True" in logs, logs
    steps = _steps(doc["outputs_dir"])
    assert [s for a, s in steps if a == 2] == list(range(kept["step"] + 1, STEPS))
    final = json.loads((Path(doc["outputs_dir"]) / "checkpoint" / "state.json").read_text())
    assert final["step"] == STEPS - 1
    assert "is a link: not copied" not in logs  # the folder is no output of its own


def _job_dir(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path, Path]:
    """A job's folder as the launcher sees it: code/<workdir>, and ckpt/ beside it."""
    job = tmp_path / "job"
    work = job / "code" / "proj"
    work.mkdir(parents=True)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    (job / "ckpt").mkdir()
    return job, work, job / "ckpt"


def test_the_folder_becomes_a_link_to_ckpt_and_shipped_files_move_in(tmp_path: Path) -> None:
    from core.runtime.workdir import link_checkpoint

    job, work, ckpt = _job_dir(tmp_path, {"runs/ckpts/old.pt": "shipped", "runs/ckpts/same.pt": "shipped"})
    (ckpt / "same.pt").write_text("restored")
    note = link_checkpoint(str(work), str(job), "runs/ckpts", str(ckpt))
    assert (work / "runs" / "ckpts").is_symlink()
    assert (work / "runs" / "ckpts").resolve() == ckpt.resolve()
    assert (ckpt / "old.pt").read_text() == "shipped"  # what ckpt/ lacked moved in
    assert (ckpt / "same.pt").read_text() == "restored"  # a restored checkpoint wins
    assert (work / "runs" / "ckpts.shipped" / "same.pt").read_text() == "shipped"
    assert "ckpts.shipped" in note
    # a second launcher of the same attempt finds its own link and leaves it
    assert link_checkpoint(str(work), str(job), "runs/ckpts", str(ckpt)) is None


@pytest.mark.parametrize("make, why", [
    (lambda work, out: (work / "ckpts").symlink_to(out), "is a link"),
    (lambda work, out: (work / "ckpts").write_text("x"), "not a folder"),
    (lambda work, out: (work / "a").symlink_to(out), "(no link is followed)"),
])
def test_a_link_or_a_file_in_the_way_is_refused(tmp_path: Path, make, why: str) -> None:
    from core.runtime.workdir import link_checkpoint

    job, work, ckpt = _job_dir(tmp_path, {})
    outside = tmp_path / "outside"
    outside.mkdir()
    make(work, outside)
    rel = "a/ckpts" if "no link" in why else "ckpts"
    with pytest.raises(RuntimeError, match=r"checkpoint .*") as err:
        link_checkpoint(str(work), str(job), rel, str(ckpt))
    assert why in str(err.value)
    assert list(outside.iterdir()) == []  # nothing made through the link
