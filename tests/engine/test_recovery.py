"""The supervisor can die at any moment (kill -9) without losing a job or running one twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from core.runtime import jobprocs
from tests.conftest import gpu_json, lock_holder, make_git_project, run_gpu, wait_state

pytestmark = pytest.mark.slow

COUNTING_JOB = (
    "import os, time, gpu\n"
    "with open(os.environ['STARTS_FILE'], 'a') as f:\n"
    "    f.write(f'{gpu.job_id()} {gpu.attempt()} {os.getpid()}\\n')\n"
    "for step in range(int(os.environ.get('STEPS', '40'))):\n"
    "    gpu.log(step=step, loss=1.0 / (step + 1))\n"
    "    time.sleep(0.1)\n"
    "while os.environ.get('GATE') and not os.path.exists(os.environ['GATE']):\n"
    "    time.sleep(0.05)  # the test lets it end\n"
    "(gpu.output_dir() / 'finished.txt').write_text('yes')\n"
    "print('finished', flush=True)\n"
)


def _state(job_id: str) -> str:
    from core.jobs.store import Store

    return Store().get(job_id).state.value


def _supervisor_pid(home: Path) -> int:
    pid = lock_holder(home / "supervisor.lock")
    assert pid, "no supervisor held its lock"
    return pid


def _kill_supervisor(home: Path) -> int:
    pid = _supervisor_pid(home)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if gpu_json("daemon", "--status")["running"] is False:
            return pid
        time.sleep(0.05)
    raise AssertionError("the killed supervisor still holds its lock")


def _project(tmp_path: Path) -> tuple[Path, str]:
    """The project, and STARTS_FILE's value: a file in the job's own working folder (a local
    job's sandbox lets it write nowhere else), which every attempt of the job shares."""
    project = make_git_project(tmp_path / "p", {"count.py": COUNTING_JOB})
    return project, "starts.txt"


def _starts(job_id: str) -> list[str]:
    from core import paths

    return (paths.jobs_dir() / job_id / "code" / "starts.txt").read_text().splitlines()


def test_kill_9_mid_run_neither_loses_nor_reruns_the_job(home: Path, tmp_path: Path) -> None:
    project, starts = _project(tmp_path)
    sub = gpu_json("submit", "count.py", "--hours", "0.1", "--env", f"STARTS_FILE={starts}", "--wait-s", "10", cwd=project)
    short = sub["job"]["short_id"]
    wait_state(short, {"running"}, timeout=60)
    old = _kill_supervisor(home)
    time.sleep(1.0)  # the job goes on without a supervisor
    assert _state(sub["job"]["id"]) == "running"  # read directly: `gpu status` would start one
    started = gpu_json("daemon", "--detach")
    assert started["pid"] != old
    doc = wait_state(short, {"done", "failed"}, timeout=60)
    assert doc["state"] == "done"
    lines = _starts(sub["job"]["id"])
    assert len(lines) == 1, f"the job started {len(lines)} times: {lines}"
    assert (project / "runs" / short / "finished.txt").read_text() == "yes"
    metrics = gpu_json("metrics", short)["metrics"]
    assert metrics["loss"]["points"] == 40  # nothing lost, nothing ingested twice
    events = gpu_json("status", short, "--verbose")["events"]
    assert sum("attempt 1 started" in e["reason"] for e in events) == 1


def test_a_job_that_ends_while_the_supervisor_is_down_is_recorded(home: Path, tmp_path: Path) -> None:
    project, starts = _project(tmp_path)
    sub = gpu_json("submit", "count.py", "--hours", "0.1", "--env", f"STARTS_FILE={starts}", "--env", "STEPS=10",
                   "--env", "GATE=go", "--wait-s", "10", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    wait_state(short, {"running"}, timeout=60)
    _kill_supervisor(home)
    (home / "jobs" / job_id / "code" / "go").touch()  # only now may it end: nobody is watching
    exit_file = home / "jobs" / job_id / "attempts" / "1" / "exit.json"
    deadline = time.monotonic() + 60
    while not exit_file.exists():
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.1)
    assert _state(job_id) == "running"  # nobody has looked yet (`gpu status` would start one)
    gpu_json("daemon", "--detach")
    doc = wait_state(short, {"done", "failed"}, timeout=30)
    assert doc["state"] == "done" and doc["exit_code"] == 0
    assert len(_starts(job_id)) == 1
    assert (project / "runs" / short / "job.json").exists()


def test_a_job_whose_process_vanished_with_no_checkpoint_is_failed_not_rerun(home: Path, tmp_path: Path) -> None:
    """A vanished launcher is a session that ended (tests/engine/test_migrate.py resumes such a job),
    but with no checkpoint and no `restart: allow` it would start again from step 0: it fails."""
    project, starts = _project(tmp_path)
    sub = gpu_json("submit", "count.py", "--hours", "0.1", "--env", f"STARTS_FILE={starts}", "--env", "STEPS=600",
                   "--wait-s", "10", cwd=project)
    short, job_id = sub["job"]["short_id"], sub["job"]["id"]
    wait_state(short, {"running"}, timeout=60)
    _kill_supervisor(home)
    pid = json.loads((home / "jobs" / job_id / "attempts" / "1" / "pid").read_text())
    assert jobprocs.signal_group(pid, signal.SIGKILL) is not None  # launcher and job die together: no exit status
    time.sleep(0.5)
    gpu_json("daemon", "--detach")
    doc = wait_state(short, {"done", "failed"}, timeout=30)
    assert doc["state"] == "failed" and "lost" in doc["reason"]
    assert "is gone and left no exit record" in doc["reason"] and "restart: allow" in doc["reason"], doc
    assert len(_starts(job_id)) == 1


def test_an_attempt_is_never_started_twice(home: Path, tmp_path: Path) -> None:
    """Placed but not started when the supervisor died: a restart starts it once."""
    from core.config.request import build_request
    from core.engine.service import submit
    from core.jobs.states import State
    from core.jobs.store import Store
    from core.engine.supervisor import Supervisor

    project, starts = _project(tmp_path)
    req = build_request(project, {"script": "count.py", "hours": 0.1, "env": [f"STARTS_FILE={starts}", "STEPS=3"],
                                  "wait_s": 0})
    store = Store()
    job = submit(req, store=store, start_supervisor=False).job
    # what a supervisor killed right after placing the job leaves behind
    job = store.transition(job.id, State.PROVISIONING, "placed on local", attempt=1, handle={})
    sup = Supervisor(store=store, tick_s=0.1)
    provider = sup.providers["local"]

    async def drive() -> None:
        await provider.launch(store.get(job.id), {})  # the first supervisor got this far...
        for _ in range(100):  # ...and a new one re-adopts, launching the same attempt again
            await sup.tick()
            if store.get(job.id).state.value in ("done", "failed"):
                return
            await asyncio.sleep(0.1)

    asyncio.run(drive())
    assert store.get(job.id).state == State.DONE
    assert len(_starts(job.id)) == 1


def test_only_one_supervisor_runs(home: Path) -> None:
    first = gpu_json("daemon", "--detach")
    second = gpu_json("daemon", "--detach")
    assert first["pid"] and second["pid"] == _supervisor_pid(home)
    proc = run_gpu("daemon", timeout=20)  # a foreground one refuses politely
    assert proc.returncode == 0 and "already runs" in proc.stderr


def test_a_look_at_the_supervisor_never_starts_one(home: Path, tmp_path: Path) -> None:
    """`gpu daemon --status` (and --stop) read the store without starting a supervisor: with a
    live job and none running, a look used to start one, and --stop started the next."""
    project, starts = _project(tmp_path)
    sub = gpu_json("submit", "count.py", "--hours", "0.1", "--env", f"STARTS_FILE={starts}", "--env", "STEPS=600",
                   "--wait-s", "10", cwd=project)
    wait_state(sub["job"]["short_id"], {"running"}, timeout=60)
    _kill_supervisor(home)
    for _ in range(3):
        assert gpu_json("daemon", "--status")["running"] is False
        time.sleep(0.5)
    assert gpu_json("daemon", "--detach")["pid"]
    assert gpu_json("daemon", "--stop")["stopped"] is True
    deadline = time.monotonic() + 15
    while gpu_json("daemon", "--status")["running"]:
        assert time.monotonic() < deadline, "a supervisor still runs after --stop"
        time.sleep(0.1)
    time.sleep(1.5)  # a supervisor started by the stop itself would hold the lock by now
    assert gpu_json("daemon", "--status")["running"] is False
