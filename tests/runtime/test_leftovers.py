"""What a job leaves running is stopped and counted; what is a moment from its own exit is
neither (issue 38: "stopped 1 process(es) the job left running" ended 6 of 28 short local jobs'
logs, a process in the middle of exiting counted, and an agent read it as its script's fault)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from core.runtime import jobprocs


def _marked(seconds: float, marker: str) -> subprocess.Popen:
    env = {**os.environ, jobprocs.MARKER_VAR: marker}
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], env=env)


def test_a_process_that_exits_by_itself_is_not_counted() -> None:
    marker = f"test-{uuid.uuid4().hex}"
    proc = _marked(0.25, marker)
    time.sleep(0.1)  # it is running: found by its marker
    assert jobprocs.tracked_pids({"marker": marker}) == {proc.pid}
    reaper = __import__("threading").Thread(target=proc.wait)  # the launcher reaps its children
    reaper.start()
    assert jobprocs.sweep({"marker": marker}) == 0
    reaper.join(5)
    assert proc.returncode == 0  # it ended by itself: never signalled


def test_a_process_left_running_is_stopped_and_counted() -> None:
    marker = f"test-{uuid.uuid4().hex}"
    proc = _marked(60, marker)
    time.sleep(0.1)
    reaper = __import__("threading").Thread(target=proc.wait)
    reaper.start()
    started = time.monotonic()
    assert jobprocs.sweep({"marker": marker}) == 1
    reaper.join(10)
    assert proc.returncode == -15 and time.monotonic() - started < 10
