"""No job waits for a supervisor that never starts.

A submit killed right after it committed its job (before it started the supervisor) leaves a
live job and no supervisor. Every command that reads the jobs then starts one: `gpu logs -f`
sees the job run to done. A supervisor that decides to leave just as a job is committed looks
once more after letting go of its lock.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.engine import daemon
from core.jobs.states import State
from core.jobs.store import Job, Store
from tests.conftest import make_git_project, run_gpu

pytestmark = pytest.mark.slow

JOB = "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.1)\nprint('finished', flush=True)\n"


def _committed_without_supervisor(tmp_path: Path, name: str = "orphan") -> Job:
    """What a submit killed between its commit and starting the supervisor leaves behind."""
    from core.config.request import build_request
    from core.engine.service import submit

    project = make_git_project(tmp_path / name, {"job.py": JOB})
    req = build_request(project, {"script": "job.py", "hours": 0.1, "wait_s": 0, "name": name})
    job = submit(req, store=Store(), start_supervisor=False).job
    assert job.state == State.ROUTING
    assert daemon.running_pid() is None
    return job


def _wait_done(job_id: str, timeout: float = 90) -> Job:
    store = Store()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = store.get(job_id)
        if job.state.value in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job_id[:8]} is still {store.get(job_id).state}: no supervisor drove it")


def test_logs_follow_sees_an_orphaned_job_run_to_done(home: Path, tmp_path: Path) -> None:
    job = _committed_without_supervisor(tmp_path)
    proc = run_gpu("logs", "-f", job.short_id, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"-- job {job.short_id} done: exited with status 0")


@pytest.mark.parametrize("command", [("status",), ("jobs",), ("status", "{short}")])
def test_reading_the_jobs_starts_the_missing_supervisor(command: tuple[str, ...], home: Path,
                                                      tmp_path: Path) -> None:
    job = _committed_without_supervisor(tmp_path)
    proc = run_gpu(*[c.format(short=job.short_id) for c in command])
    assert proc.returncode == 0, proc.stderr
    assert _wait_done(job.id).state == State.DONE


def test_a_held_job_does_not_start_a_supervisor(home: Path, tmp_path: Path) -> None:
    """Nothing to drive: a job awaiting a person's approval needs no supervisor."""
    job = _committed_without_supervisor(tmp_path)
    store = Store()
    store.transition(job.id, State.AWAITING_APPROVAL, "held for the test")
    assert run_gpu("jobs").returncode == 0
    time.sleep(0.5)
    assert daemon.running_pid() is None


async def test_the_dashboard_starts_the_missing_supervisor(home: Path, tmp_path: Path) -> None:
    from tui.dash.app import DashApp

    job = _committed_without_supervisor(tmp_path)
    app = DashApp(live=True, bell=False, supervise=True)
    async with app.run_test(size=(120, 36)) as pilot:
        deadline = time.monotonic() + 30
        while daemon.running_pid() is None and time.monotonic() < deadline:
            await pilot.pause(0.2)
        assert daemon.running_pid() is not None, "the dashboard did not start a supervisor"
        app.paused = True  # its readers stop before it closes (a log read in flight at exit
        await pilot.pause(0.5)  # would reach a torn-down screen)
    assert _wait_done(job.id).state == State.DONE


def test_a_job_committed_while_the_supervisor_leaves_is_picked_up(home: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor's idle exit and a submit's commit cross: the submit saw the lock held and
    only woke it; the leaving supervisor looks again once its lock is released."""
    from core.engine import supervisor

    monkeypatch.setenv("GPU_ROUTER_IDLE_EXIT_S", "0.5")
    monkeypatch.setenv("GPU_ROUTER_TICK_S", "0.1")
    real_run = supervisor.Supervisor.run
    arrived: list[Job] = []

    async def leave_as_a_job_arrives(self) -> None:
        if not arrived:  # the first loop has just decided to exit when the commit lands
            arrived.append(_committed_without_supervisor_locked(tmp_path))
            return
        await real_run(self)

    monkeypatch.setattr(supervisor.Supervisor, "run", leave_as_a_job_arrives)
    try:
        assert supervisor.main() == 0
    finally:
        (home / "supervisor.lock").write_text("")  # it ran in this process: not one to kill
    assert arrived and Store().get(arrived[0].id).state == State.DONE


def _committed_without_supervisor_locked(tmp_path: Path) -> Job:
    """As `_committed_without_supervisor`, while this process holds the supervisor lock."""
    from core.config.request import build_request
    from core.engine.service import submit

    project = make_git_project(tmp_path / "late", {"job.py": JOB})
    req = build_request(project, {"script": "job.py", "hours": 0.1, "wait_s": 0, "name": "late"})
    return submit(req, store=Store(), start_supervisor=False).job
