"""A job's journey (core.engine.reports.journey): each attempt, where it ran, why it moved,
from which checkpoint, read from the store's events; shown by `gpu status --verbose` (and
--json) and by the dashboard's detail screen.

The store is the demo's (tui/dash/demo.py), built through the store's public methods with the
events the supervisor writes when a job's session is lost and it moves (core/engine/jobmoves.py);
tests/engine/test_migrate.py checks the same document on a job a real lost ssh host moved.
"""

from __future__ import annotations

import html
import os
import re
import time
from pathlib import Path

import pytest

from core.engine.reports import journey, status_doc
from core.jobs.store import Store
from tui.dash.app import DashApp
from tui.dash.demo import CONFIG, MOVED_CKPT, MOVED_WHY, NOW, _id, seed
from tui.dash.screens import DetailScreen

MOVED = _id(5)  # bert-finetune: kaggle, session lost, moved to lab-a100 from checkpoint 2, failed


@pytest.fixture
def demo(home: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text(CONFIG)
    return seed()


def test_the_journey_of_a_moved_job_names_each_attempt_where_why_and_from_which_checkpoint(demo) -> None:
    doc = journey(demo, demo.get(MOVED))
    first, second = doc["attempts"]
    assert (first["attempt"], first["target"], first["ended"]) == (1, "kaggle", "moved")
    assert MOVED_WHY in first["why"] and first["checkpoint"] is None and first["from_target"] is None
    assert (second["attempt"], second["target"], second["ended"]) == (2, "lab-a100", "failed")
    assert second["from_target"] == "kaggle"
    assert second["checkpoint"]["generation"] == MOVED_CKPT["generation"]
    assert second["checkpoint"]["bytes"] == MOVED_CKPT["bytes"]
    assert "CUDA out of memory" in second["why"]
    assert first["end"] <= second["start"] <= second["end"]  # ISO strings: in order
    assert doc["moves"] == 1
    # a failed job: its error and the end of its log, the traceback's last line last
    assert "CUDA out of memory" in doc["error"]
    assert doc["error_tail"][-1] == "RuntimeError: CUDA out of memory"


def test_a_job_that_never_left_one_target_has_one_attempt_and_a_held_one_none(demo) -> None:
    running = journey(demo, demo.get(_id(1)))
    assert [(a["target"], a["ended"]) for a in running["attempts"]] == [("lab-a100", None)]
    assert "error" not in running and running["moves"] == 0
    assert journey(demo, demo.get(_id(3)))["attempts"] == []  # awaiting approval: never placed


def test_status_verbose_json_carries_the_journey_and_the_plain_one_does_not(demo) -> None:
    job = demo.get(MOVED)
    assert status_doc(demo, job, verbose=True)["journey"] == journey(demo, job)
    assert "journey" not in status_doc(demo, job)


@pytest.mark.slow  # runs the supervisor: end to end
def test_gpu_status_verbose_shows_the_journey_block(demo) -> None:
    from tests.conftest import gpu_json, run_gpu

    text = run_gpu("status", MOVED[:8], "--verbose").stdout
    block = text[text.index("journey"):]
    assert "kaggle" in block and "lab-a100" in block and "moved from kaggle" in block, block
    assert "checkpoint 2 (48.2 MB)" in block and "error: exited with status 1: CUDA out of memory" in text
    assert gpu_json("status", MOVED[:8], "--verbose")["journey"]["attempts"][1]["target"] == "lab-a100"


def _lossy_lines(svg: str) -> list[str]:
    """The screen as a renderer that drops each text run's leading spaces draws it (what made
    "job eacce1c7main" and "yapprove" of the SVGs): each line's runs, leading spaces gone."""
    runs: dict[str, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg):
        runs.setdefault(y, []).append((float(x), html.unescape(text).replace("\xa0", " ").lstrip(" ")))
    return ["".join(t for _, t in sorted(line)) for _, line in sorted(runs.items(), key=lambda kv: float(kv[0]))]


async def _detail(app: DashApp, pilot, downs: int) -> str:
    from textual.worker import WorkerCancelled

    for _ in range(downs):
        await pilot.press("j")
    await pilot.press("enter")
    for _ in range(20):
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause(0.1)
        if isinstance(app.screen, DetailScreen):
            break
    assert isinstance(app.screen, DetailScreen)
    return app.export_screenshot()


async def test_the_detail_screen_shows_the_journey_first_and_keeps_spaces_between_styled_words(
        demo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    app = DashApp(clock=lambda: NOW, live=False, bell=False)
    async with app.run_test(size=(200, 50)) as pilot:
        lines = _lossy_lines(await _detail(app, pilot, 4))  # the 5th row: bert-finetune
    text = "\n".join(lines)
    assert "job 05c0ffee  bert-finetune" in text, text
    assert "41 files" not in text and "45 files, 900.0 KB will ship" in text, text
    # the journey comes before the request, the error before the attempts
    assert text.index("error: exited with status 1") < text.index("moved from kaggle") < text.index("request")
    assert "RuntimeError: CUDA out of memory" in text
    monkeypatch.delenv("TZ")
    time.tzset()


async def test_the_approval_hints_keep_their_spaces(demo) -> None:
    app = DashApp(clock=lambda: NOW, live=False, bell=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("a")
        await pilot.pause(0.5)
        text = "\n".join(_lossy_lines(app.export_screenshot()))
    assert "y approve this plan" in text and "d deny" in text and "esc back" in text, text
    assert "Approve job 03c0ffee (sweep-lr3e-4)?" in text, text
    assert "⏸" not in text  # the SVG font has no such glyph: it drew a box
