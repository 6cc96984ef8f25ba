"""The quick loop fails a test that leaves a process running (issue 40 item 3, issue 41 item 5):
run as a developer runs it, over tests that leave a child, a detached process carrying the
test's GPU_ROUTER_HOME (a supervisor's way out), one whose child ends by itself a moment after
the test, and one that leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a whole pytest run in a subprocess (about 5 s): the guard is checked in the full run
def test_the_quick_loop_fails_each_test_that_leaves_a_process_and_stops_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"gpu-guard-{os.getpid()}"
    pytester.makepyfile(test_left=f'''
import subprocess, time

def test_child():
    subprocess.Popen(["bash", "-c", "exec -a {marker}-child sleep 60"])

def test_detached(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ROUTER_HOME", str(tmp_path / "gpu-home"))
    subprocess.run(["bash", "-c", "(exec -a {marker}-detached sleep 60) >/dev/null 2>&1 &"], check=True)

def test_one_that_ends_by_itself():
    subprocess.Popen(["bash", "-c", "exec -a {marker}-short sleep 0.5"])

def test_clean(home):  # the home fixture's own teardown stops what carries its home
    subprocess.run(["true"], check=True)
''')
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = pytester.runpytest_subprocess("-p", "tests.conftest", "-m", "quick", "-p", "no:cacheprovider",
                                           "-W", "ignore::pytest.PytestUnknownMarkWarning")
    out = result.stdout.str()
    result.assert_outcomes(passed=4, errors=2)
    assert "test_left.py::test_child left 1 process(es) running after its teardown" in out, out
    assert f"{marker}-child" in out and "started by this test" in out, out
    assert "test_left.py::test_detached left 1 process(es) running after its teardown" in out, out
    assert f"{marker}-detached" in out and "carries this test's GPU_ROUTER_HOME" in out, out
    assert "test_one_that_ends_by_itself left" not in out and "test_clean left" not in out, out
    leftover = [p for p in os.listdir("/proc") if p.isdigit() and _cmd(p).startswith(marker)]
    assert leftover == [], [_cmd(p) for p in leftover]  # each was stopped, not only named


@pytest.mark.slow  # a whole pytest run in a subprocess: the guard is checked in the full run
def test_the_whole_run_fails_when_a_slow_test_leaves_a_process_past_every_fixture(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full run's slow tests are not checked one by one; what any of them leaves running
    past the session's end (a detached process carrying a test's home) fails the run, named,
    and is stopped."""
    marker = f"gpu-session-guard-{os.getpid()}"
    pytester.makepyfile(test_slow_left=f'''
import subprocess
import pytest

@pytest.mark.slow
def test_leaves_one(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ROUTER_HOME", str(tmp_path / "gpu-home"))
    subprocess.run(["bash", "-c", "(exec -a {marker} sleep 60) >/dev/null 2>&1 &"], check=True)

@pytest.mark.slow
def test_clean():
    pass
''')
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = pytester.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider",
                                           "-W", "ignore::pytest.PytestUnknownMarkWarning")
    out = result.stdout.str()
    assert result.ret != 0, out
    assert "the run left 1 process(es) running after every fixture ended" in out, out
    assert marker in out and "carries a test's GPU_ROUTER_HOME" in out, out
    leftover = [p for p in os.listdir("/proc") if p.isdigit() and _cmd(p).startswith(marker)]
    assert leftover == [], [_cmd(p) for p in leftover]


def _cmd(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
