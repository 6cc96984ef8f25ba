"""Jobs on SkyPilot (issue 43's third step), against the real SkyPilot API server over a real
one-node Slurm cluster (tests/skypilot_service.py; the recipe in ../shared/recipes/skypilot):
a job launched on a cluster of its own, its log, metric rows, checkpoint and outputs home, its
price in the plan and in `gpu cost` beside SkyPilot's own cost report; a cluster ended from
under the job (`scancel` of its allocation) and the job resumed on a new cluster from the
checkpoint that came home; cancel taking the cluster down; `gpu gc` taking down a cluster of
gpu-router's that no live job needs.

A launch takes half a minute to a minute here (the uv cache warm), `down` about ten seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config
from tests.providers.conftest import server_test

TRAIN = r'''
import json, os, time
import gpu
ck = gpu.checkpoint_dir() / "state.json"
done = json.loads(ck.read_text())["done"] if ck.exists() else []
print(f"attempt {gpu.attempt()} starts after {len(done)} steps", flush=True)
for step in range(len(done), int(os.environ["STEPS"])):
    time.sleep(float(os.environ.get("PAUSE", "1")))
    done.append(step)
    ck.write_text(json.dumps({"done": done}))
    gpu.checkpoint_saved()
    gpu.log(step=step, loss=1.0 / (step + 1))
    print(f"step {step} on GPU {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
(gpu.output_dir() / "steps.json").write_text(json.dumps(done))
'''


@pytest.fixture
def sky_target(skypilot_server, home: Path, tmp_path: Path) -> Path:
    """A skypilot target on the session's server, and a project with TRAIN."""
    env = {k: v for k, v in skypilot_server.env.items() if k not in ("PATH", "LANG", "TMPDIR")}
    write_user_config(json.dumps({"targets": {"sky": {"kind": "skypilot", "venv": str(skypilot_server.venv),
                                                      "env": env, "poll_interval_s": 3}}}))
    return make_git_project(tmp_path / "proj", {"train.py": TRAIN})


def _clusters(server) -> list[str]:
    async def ask() -> list[str]:
        from core.providers.skypilot.client import SkyPilotClient

        client = await SkyPilotClient.start(server.python, env=server.env)
        try:
            return [c["name"] for c in (await client.request("status", {}, timeout=300))["clusters"]]
        finally:
            await client.close()
    return asyncio.run(ask())


def _submit(project: Path, steps: int, pause: float = 1.0) -> str:
    doc = gpu_json("submit", "train.py", "--provider", "sky", "--gpu", "FAKE", "--hours", "0.1",
                   "--env", f"STEPS={steps}", "--env", f"PAUSE={pause}", cwd=project, timeout=300)
    assert doc["submitted"] and doc["job"]["provider"] == "sky", doc
    return doc["job"]["short_id"]


def _events(job: str, project: Path) -> str:
    return " | ".join(e["reason"] for e in gpu_json("status", job, "--verbose", cwd=project)["events"])


def _wait_log(job: str, text: str, project: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in run_gpu("logs", job, cwd=project).stdout:
            return
        time.sleep(1)
    raise AssertionError(f"{text!r} never showed in job {job}'s log: {run_gpu('logs', job, cwd=project).stdout[-2000:]}")


@server_test
def test_a_job_runs_on_its_own_cluster_and_everything_comes_home(skypilot_server, sky_target: Path) -> None:
    project = sky_target
    plan = gpu_json("plan", "train.py", "--gpu", "FAKE", cwd=project, timeout=300)["plan"]
    assert plan["target"] == "sky" and plan["price_per_hour"] == 2.0
    assert plan["skypilot"]["max_hourly_cost"] == pytest.approx(2.2)
    job = _submit(project, steps=4)
    doc = wait_state(job, {"done", "failed", "cancelled"}, timeout=900, cwd=project)
    assert doc["state"] == "done", doc
    log = run_gpu("logs", job, cwd=project).stdout
    assert "attempt 1 starts after 0 steps" in log and "step 3 on GPU 0" in log  # Slurm gave it a GPU
    rows = [json.loads(line) for line in (project / "runs" / job / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [0, 1, 2, 3]
    assert json.loads((project / "runs" / job / "steps.json").read_text()) == [0, 1, 2, 3]
    assert json.loads((project / "runs" / job / "checkpoint" / "state.json").read_text()) == {"done": [0, 1, 2, 3]}
    events = _events(job, project)
    assert f"SkyPilot launched cluster gr-{job}-a1" in events and "at most $2.20/h" in events
    from core import paths

    attempt = list(paths.jobs_dir().glob(f"{job}*/sky/a1"))
    assert attempt and not (attempt[0] / "work").exists()  # the workdir staged, launched, then removed
    # the cluster went down with the job: SkyPilot lists it no more, Slurm holds no allocation
    assert f"gr-{job}-a1" not in _clusters(skypilot_server)
    assert not [a for a in skypilot_server.allocations() if f"gr-{job}" in a]
    # its cost: slurm.pricing's 2.0 an hour for the time it ran, beside SkyPilot's own report
    cost = gpu_json("cost", cwd=project)
    row = next(r for r in cost["rows"] if r["key"] == "sky")
    assert 0 < row["cost"] < 2.0 * 0.1 and row["cost"] == pytest.approx(row["hours"] * 2.0, abs=1e-3)
    report = cost["skypilot"]["sky"]
    assert report["clusters"] == 1 and 0 < report["reported"] < 2.0 * 0.1
    assert report["reported"] == pytest.approx(report["hours_up"] * 2.0, rel=0.05)
    # gpu-router counts from asking for the launch to the job's end, SkyPilot from the cluster's
    # start to its end: the two agree within a minute and a half at the price
    assert abs(row["cost"] - report["reported"]) <= 2.0 * 90 / 3600, (row, report)
    assert "SkyPilot's cost report says" in run_gpu("cost", cwd=project).stdout


@server_test
def test_a_cluster_ended_under_the_job_resumes_it_on_a_new_one_from_its_checkpoint(
        skypilot_server, sky_target: Path) -> None:
    project = sky_target
    job = _submit(project, steps=30)
    _wait_log(job, "step 4 on GPU", project)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # a checkpoint home before the cluster goes
        ckpt = gpu_json("status", job, cwd=project).get("checkpoint") or {}
        if ckpt.get("generation"):
            break
        time.sleep(1)
    assert ckpt.get("generation"), "no checkpoint came home while the job ran"
    allocs = [a.split()[0] for a in skypilot_server.allocations() if f"gr-{job}-a1" in a]
    assert allocs, skypilot_server.allocations()
    skypilot_server.slurm("scancel", *allocs)
    doc = wait_state(job, {"done", "failed", "cancelled"}, timeout=900, cwd=project)
    assert doc["state"] == "done", doc
    events = _events(job, project)
    assert f"SkyPilot's cluster gr-{job}-a1 is" in events and "the session ended" in events
    assert f"SkyPilot launched cluster gr-{job}-a2" in events
    log = run_gpu("logs", job, cwd=project).stdout
    resumed = [line for line in log.splitlines() if line.startswith("attempt 2 starts after")]
    assert resumed and int(resumed[0].split()[4]) >= 1, log[-3000:]
    assert "resuming from the checkpoint gpu-router brought from home" in log
    # every step done once, across the two clusters
    assert json.loads((project / "runs" / job / "steps.json").read_text()) == list(range(30))
    assert not [c for c in _clusters(skypilot_server) if c.startswith(f"gr-{job}")]


@server_test
def test_cancel_takes_the_cluster_down_and_gc_downs_a_stray_one(skypilot_server, sky_target: Path) -> None:
    project = sky_target
    job = _submit(project, steps=300)
    _wait_log(job, "step 1 on GPU", project)
    assert f"gr-{job}-a1" in _clusters(skypilot_server)
    done = run_gpu("cancel", job, cwd=project)
    assert done.returncode == 0, done.stderr
    assert wait_state(job, {"cancelled"}, timeout=600, cwd=project)["state"] == "cancelled"
    assert f"gr-{job}-a1" not in _clusters(skypilot_server)
    assert not [a for a in skypilot_server.allocations() if f"gr-{job}" in a]

    # a cluster named as gpu-router names them, that no job of this home owns (a supervisor
    # that died before it could take it down): `gpu gc` lists it, then takes it down
    async def stray() -> None:
        from core.providers.skypilot.client import SkyPilotClient

        client = await SkyPilotClient.start(skypilot_server.python, env=skypilot_server.env)
        try:
            await client.request("launch", {"cluster": "gr-0badc0de-a1", "run": "sleep 600",
                                            "resources": {"infra": "slurm", "cpus": 1}}, timeout=900)
        finally:
            await client.close()
    asyncio.run(stray())
    seen = gpu_json("gc", "--where", "sky", "--dry-run", cwd=project, timeout=300)
    where = seen["locations"][0]
    assert where["error"] is None and [e["path"] for e in where["evict"]] == ["gr-0badc0de-a1"]
    gone = gpu_json("gc", "--where", "sky", cwd=project, timeout=900)["locations"][0]
    assert [e["path"] for e in gone["evict"]] == ["gr-0badc0de-a1"]
    assert "gr-0badc0de-a1" not in _clusters(skypilot_server)
