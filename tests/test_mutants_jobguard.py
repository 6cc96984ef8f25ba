"""What jobguard reads of a process, on both of its paths (issue 40: survivors of `python
bench/mutation.py --module jobguard`).

`process` gives (ppid, argv, exe) from /proc on Linux and from `ps` elsewhere (macOS); the
quick tests only ever took the /proc path, so a broken `ps` reading (the parent's pid, the
command's words, a process that is gone) passed them. Both are asked here of real processes
whose parent and words are known, and the stat parser of a process whose name holds ')' and
spaces.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.engine import jobguard


CHILD = [sys.executable, "-c", "import time; time.sleep(30)", "x y"]


@pytest.fixture
def child():
    proc = subprocess.Popen(CHILD)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_process_from_proc(child) -> None:
    assert jobguard._proc()
    ppid, argv, exe = jobguard.process(child.pid)
    assert ppid == os.getpid()
    assert argv == CHILD
    assert exe == os.path.realpath(sys.executable)
    mine = jobguard.process(os.getpid())
    assert mine[0] == os.getppid() and mine[2] == os.readlink("/proc/self/exe")


def test_process_from_ps_where_there_is_no_proc(child, monkeypatch) -> None:
    monkeypatch.setattr(jobguard, "_proc", lambda: False)
    assert jobguard.process(child.pid) == (os.getpid(), " ".join(CHILD).split(), "")
    chain = jobguard.ancestors(child.pid)
    assert chain[0][0] == os.getpid() and chain[0][2] == "" and chain[0][1]  # this test's process, by ps
    assert chain[1][0] == os.getppid()


def test_a_gone_process_is_none_on_both_paths(monkeypatch) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert jobguard.process(gone.pid) is None
    monkeypatch.setattr(jobguard, "_proc", lambda: False)
    assert jobguard.process(gone.pid) is None
    assert jobguard.ancestors(gone.pid) == []


def test_parse_stat_takes_the_last_parenthesis() -> None:
    assert jobguard.parse_stat(b"42 (a) b (c)) S 7 42 42 0") == ("a) b (c)", 7)
    assert jobguard.parse_stat(b"42 (x) S -1 0") == ("x", -1)
    for bad in (b"", b"42 x S 7", b"42 )x( S 7", b"42 (x) S", b"42 (x) S seven 1"):
        assert jobguard.parse_stat(bad) is None, bad
