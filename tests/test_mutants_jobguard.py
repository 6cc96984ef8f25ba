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


def test_detect_asks_about_the_pid_it_was_given(monkeypatch) -> None:
    """detect(pid) walks that process's ancestors, not this one's."""
    asked = []
    for fact in ("by_namespace", "by_cgroup", "by_environment"):
        monkeypatch.setattr(jobguard, fact, lambda: None)
    monkeypatch.setattr(jobguard, "by_ancestors", lambda pid=None: asked.append(pid))
    assert jobguard.detect(4242) is None and asked == [4242]


def _peer(monkeypatch, chain, top):
    monkeypatch.setattr(jobguard, "ancestors", lambda pid=None: chain)
    monkeypatch.setattr(jobguard, "process", lambda pid: top)
    found = jobguard.peer_origin(os.getpid())
    return found.reason if found else None


def test_a_peer_whose_ancestors_cannot_all_be_read_counts_as_a_jobs(monkeypatch) -> None:
    """Fail closed: an unreadable top of the chain, or one that is not the root of the tree
    (a parent above it, 1 included) while the chain is short, is a job's; a chain that ends at
    pid 0, or is as long as jobguard walks, is judged by its other facts (here: none)."""
    short = [(4321, ["bash"], "/bin/bash")]
    assert _peer(monkeypatch, short, None) == "its ancestors cannot all be read"
    assert _peer(monkeypatch, short, (1, ["init"], "")) == "its ancestors cannot all be read"
    assert _peer(monkeypatch, [], (7, ["init"], "")) == "its ancestors cannot all be read"
    assert _peer(monkeypatch, short, (0, ["init"], "")) is None
    long = [(10_000 + i, ["bash"], "/bin/bash") for i in range(jobguard.MAX_DEPTH)]
    assert _peer(monkeypatch, long, (7, ["bash"], "")) is None


def test_a_peer_is_a_jobs_where_processes_cannot_be_read(monkeypatch) -> None:
    monkeypatch.setattr(jobguard, "_proc", lambda: False)
    found = jobguard.peer_origin(os.getpid())
    assert found is not None and found.reason == "its process cannot be read here"
