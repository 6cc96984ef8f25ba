"""SVG snapshots of the dashboard's main views, from the seeded demo store and a fixed clock.

Update them deliberately with `pytest tests/tui/dash/test_dash_snapshots.py --snapshot-update` and
look at the SVGs before committing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tui.dash.app import DashApp
from tui.dash.demo import CONFIG, NOW, seed


@pytest.fixture
def demo_world(home: Path, monkeypatch: pytest.MonkeyPatch):
    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text(CONFIG)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    seed()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


def _app() -> DashApp:
    return DashApp(clock=lambda: NOW, live=False, bell=False)


async def _settle(pilot) -> None:
    """Until no worker has run for two looks in a row: a busy CI machine is slow, not wrong."""
    from textual.worker import WorkerCancelled, WorkerState

    quiet = 0
    for _ in range(50):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause(0.1)
        busy = any(w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in pilot.app.workers)
        quiet = 0 if busy else quiet + 1
        if quiet >= 2:
            return


def test_dashboard_with_running_pending_finished_jobs_and_a_curve(demo_world, snap_compare) -> None:
    async def select_running(pilot):
        await _settle(pilot)
        await pilot.press("j")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(120, 36), run_before=select_running)


def test_dashboard_at_80x24(demo_world, snap_compare) -> None:
    async def select_running(pilot):
        await _settle(pilot)
        await pilot.press("j")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=select_running)


def test_dashboard_at_200x50(demo_world, snap_compare) -> None:
    """The table as tall as its six jobs, the log and the running job's two charts below it."""
    async def select_running(pilot):
        await _settle(pilot)
        await pilot.press("j")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(200, 50), run_before=select_running)


def test_approval_modal(demo_world, snap_compare) -> None:
    async def open_approval(pilot):
        await _settle(pilot)
        await pilot.press("a")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(120, 36), run_before=open_approval)


def test_job_detail(demo_world, snap_compare) -> None:
    async def open_detail(pilot):
        await _settle(pilot)
        await pilot.press("j", "j", "enter")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(120, 36), run_before=open_detail)


def test_help(demo_world, snap_compare) -> None:
    async def open_help(pilot):
        await _settle(pilot)
        await pilot.press("question_mark")
        await _settle(pilot)

    assert snap_compare(_app(), terminal_size=(120, 36), run_before=open_help)


def _open_moved_job_detail():
    """The detail of bert-finetune (the 5th row): moved from kaggle to lab-a100, then failed."""
    async def open_detail(pilot):
        await _settle(pilot)
        await pilot.press("j", "j", "j", "j", "enter")
        await _settle(pilot)

    return open_detail


def test_job_journey_at_80x24(demo_world, snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_open_moved_job_detail())


def test_job_journey_at_200x50(demo_world, snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(200, 50), run_before=_open_moved_job_detail())


@pytest.fixture
def sweep_world(demo_world):
    from tui.dash.demo import seed_sweep

    seed_sweep()
    yield


def _select_sweep_point(pilot):
    async def select(pilot):
        await _settle(pilot)
        await pilot.press("j")  # below the held job: the sweep's newest point, LR 3e-4
        await _settle(pilot)

    return select(pilot)


def test_sweep_points_overlaid_at_80x24(sweep_world, snap_compare) -> None:
    """A sweep folded into one row, selected: its chart holds every point's loss curve (issue 28)."""
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_select_sweep_point)


def test_sweep_points_overlaid_at_200x50(sweep_world, snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(200, 50), run_before=_select_sweep_point)
