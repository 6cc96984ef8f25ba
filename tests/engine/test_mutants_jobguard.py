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
import time

import pytest

from core.engine import jobguard


CHILD = [sys.executable, "-c", "import time; time.sleep(30)", "x y"]


def _started(argv: list) -> subprocess.Popen:
    """A child that has run its own program: between fork and exec its /proc/PID/cmdline can
    read empty (a loaded machine made test_process_from_proc flaky)."""
    proc = subprocess.Popen(argv)
    want = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
    for _ in range(1000):
        try:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                if f.read() == want:
                    return proc
        except OSError:
            pass
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    raise AssertionError(f"the child {argv} did not start in 10 s")


@pytest.fixture
def child():
    proc = _started(CHILD)
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


# --- the rerun's survivors (bench/README.md: jobguard 329 / 407 with the tests above) ----------

from core.runtime.jobprocs import SANDBOX_MARK  # noqa: E402

ODD = [sys.executable, "-c", "import time; time.sleep(30)", b"odd\xffbyte"]  # argv need not be UTF-8


@pytest.fixture
def odd_child():
    proc = _started(ODD)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_an_argv_that_is_not_utf8_is_read_with_replacement_on_both_paths(odd_child, monkeypatch, tmp_path) -> None:
    assert jobguard.process(odd_child.pid)[1] == [*ODD[:3], "odd\ufffdbyte"]
    # procps' ps prints no byte it cannot show; another ps (macOS) may: one that prints such a byte
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ps").write_bytes(b"#!/bin/sh\nprintf '  7 python odd\\377byte\\n'\n")
    (fake / "ps").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(jobguard, "_proc", lambda: False)
    assert jobguard.process(odd_child.pid) == (7, ["python", "odd\ufffdbyte"], "")


def _files(monkeypatch, files: dict[str, bytes | None]) -> None:
    real = jobguard.read_bytes
    monkeypatch.setattr(jobguard, "read_bytes", lambda path: files[path] if path in files else real(path))


def test_a_cmdline_without_a_final_nul_or_unreadable_keeps_its_words(child, monkeypatch) -> None:
    """A process may rewrite its cmdline (setproctitle): its last word then has no NUL after it."""
    _files(monkeypatch, {f"/proc/{child.pid}/cmdline": b"renamed\0worker"})
    assert jobguard.process(child.pid)[1] == ["renamed", "worker"]
    _files(monkeypatch, {f"/proc/{child.pid}/cmdline": None})  # a kernel thread, or a race
    assert jobguard.process(child.pid)[1] == [""]


def test_an_exe_that_cannot_be_read_is_empty(child, monkeypatch) -> None:
    real = os.readlink

    def readlink(path, *a, **k):
        if path == f"/proc/{child.pid}/exe":
            raise PermissionError(path)
        return real(path, *a, **k)

    monkeypatch.setattr(os, "readlink", readlink)
    assert jobguard.process(child.pid) == (os.getpid(), CHILD, "")


def test_proc_needs_the_folder_of_this_process(monkeypatch) -> None:
    real = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == "/proc/self" else real(p))
    assert jobguard._proc() is False


def _chain(monkeypatch, links: dict[int, int | None]) -> None:
    """process() of a made-up tree: pid -> its parent (None: the pid cannot be read)."""
    monkeypatch.setattr(jobguard, "process",
                        lambda pid: None if links.get(pid, -99) is None or pid not in links
                        else (links[pid], [f"p{pid}"], ""))


def test_ancestors_stop_at_pid_0_a_loop_an_unreadable_parent_and_max_depth(monkeypatch) -> None:
    _chain(monkeypatch, {10: 11, 11: 12, 12: 0, 0: 5, 5: 5})
    assert jobguard.ancestors(10) == [(11, ["p11"], ""), (12, ["p12"], "")]  # pid 0 is no process
    _chain(monkeypatch, {10: 11, 11: 12, 12: 11})
    assert jobguard.ancestors(10) == [(11, ["p11"], ""), (12, ["p12"], "")]  # a loop, not through 10
    _chain(monkeypatch, {10: 11, 11: 12, 12: None})
    assert jobguard.ancestors(10) == [(11, ["p11"], "")]
    _chain(monkeypatch, {i: i + 1 for i in range(1, 400)})
    chain = jobguard.ancestors(1)
    assert len(chain) == jobguard.MAX_DEPTH and chain[-1][0] == jobguard.MAX_DEPTH + 1


def test_by_ancestors_walks_the_pid_it_was_given(tmp_path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    launcher = runtime / "launch.py"
    launcher.write_text("import subprocess, sys, time\n"
                        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                        "print(p.pid, flush=True)\n"
                        "p.wait()\n")
    spec = str(tmp_path / "jobs" / "j-42" / "attempts" / "1" / "spec.json")
    proc = subprocess.Popen([sys.executable, str(launcher), spec], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(proc.stdout.readline())
        assert jobguard.by_ancestors(grandchild) == jobguard.Origin(
            f"it descends from the job launcher (pid {proc.pid}, job j-42)", "j-42")
        assert jobguard.by_ancestors() is None  # this test's own process
    finally:
        os.kill(grandchild, 9)
        proc.wait()


def test_a_launcher_without_a_spec_and_a_bwrap_known_by_its_exe() -> None:
    assert jobguard._launcher_among([(9, ["python3", "/x/runtime/launch.py", "--foreground"], "")]) == \
        jobguard.Origin("it descends from the job launcher (pid 9)")
    assert jobguard._launcher_among([(9, ["python3", "/x/runtime/launch.py", "/tmp/spec.json"], "")]) == \
        jobguard.Origin("it descends from the job launcher (pid 9)")
    argv = ["/proc/self/fd/3", "--ro-bind", "/j/mark", SANDBOX_MARK, "--", "python"]
    assert jobguard._launcher_among([(3, ["sh"], "/bin/sh"), (7, argv, "/usr/bin/bwrap")]) == \
        jobguard.Origin("it descends from a job's sandbox (bwrap, pid 7)")
    assert jobguard._launcher_among([(7, argv, "/usr/bin/true")]) is None


def test_launcher_spec_at_each_of_its_edges(tmp_path) -> None:
    assert jobguard.launcher_spec(["python", "/x/runtime/launch.py"]) == ""
    assert jobguard.launcher_spec(["python", "/x/runtime/launch.py", "--foreground"]) == ""
    assert jobguard.launcher_spec(["python", "/x/runtime/launch.py", "--foreground", "s.json"]) == "s.json"
    assert jobguard.launcher_spec(["python", "/opt/runtime/x/y/launch.py", "s.json"]) is None  # too deep
    assert jobguard.launcher_spec(["python", "/opt/runtime/x/launch.py", "s.json"]) == "s.json"
    assert jobguard.launcher_spec(["python", "-X", "a", "-W", "b", "/x/runtime/launch.py", "s"]) is None
    assert jobguard.launcher_spec(["python", "-X", "a", "-W", "/x/runtime/launch.py", "s"]) == "s"
    beside = tmp_path / "gr-copy"  # not named runtime: known by jobprocs.py beside it
    beside.mkdir()
    (beside / "launch.py").write_text("")
    assert jobguard.launcher_spec(["python", str(beside / "launch.py"), "s.json"]) is None
    (beside / "jobprocs.py").write_text("")
    assert jobguard.launcher_spec(["python", str(beside / "launch.py"), "s.json"]) == "s.json"


def test_job_of_spec_and_of_cgroup_at_their_edges() -> None:
    assert jobguard.job_of_spec("j-9/attempts/1/spec.json") == "j-9"
    assert jobguard.job_of_spec("attempts/1/spec.json") is None
    assert jobguard.job_of_cgroup("gpu-router-7") is None  # no job before the attempt
    assert jobguard.job_of_cgroup("gpu-router-j-x") is None  # the attempt is a number
    assert jobguard.job_of_cgroup("gpu-router-j-a-3") == "j-a"


def test_cgroup_job_reads_every_line_and_paths_with_colons() -> None:
    assert jobguard.cgroup_job("garbage\n0::/gpu-router-j-1\n") == "gpu-router-j-1"
    assert jobguard.cgroup_job("0::/gpu-router-j-1/a:b\n") == "gpu-router-j-1"
    assert jobguard.cgroup_job("0::/a:b/gpu-router-j-1\n") == "gpu-router-j-1"
    assert jobguard.cgroup_job("12:cpu,cpuacct:/x:y/gpu-router-j-2\n") == "gpu-router-j-2"


def test_parse_stat_at_its_edges() -> None:
    assert jobguard.parse_stat(b"(comm) S 5") == ("comm", 5)  # '(' first
    assert jobguard.parse_stat(b"5 (a)S 7") == ("a", 7)  # the fields after ')', however spaced
    assert jobguard.parse_stat(b"1 (a) S X7") is None
    assert jobguard.parse_stat(b"1 5 6") is None  # no parentheses at all


def test_facts_read_bytes_that_are_not_utf8_with_replacement(monkeypatch, tmp_path) -> None:
    _files(monkeypatch, {"/proc/self/cgroup": b"0::/gpu-router-j\xff-1\n"})
    assert jobguard.by_cgroup() == jobguard.Origin("it is in a job's cgroup (gpu-router-j\ufffd-1)", "j\ufffd")
    mark = str(tmp_path / "no-mark")
    monkeypatch.setattr(jobguard, "SANDBOX_MARK", mark)
    _files(monkeypatch, {"/proc/1/cmdline": b"bwrap\0--ro-bind\0/j/m\xff\0" + mark.encode() + b"\0"})
    assert jobguard.by_namespace() == jobguard.Origin(
        "it is inside a job's sandbox (its pid namespace was made by bwrap for a job)")


@pytest.mark.parametrize("content, job", [
    (b"j-1:2\n", "j-1"), (b"", None), (b":2\n", None), (b"  \n", None), (b"j\xff-1:2", "j\ufffd-1"),
    (b"j-3", "j-3"),
])
def test_the_sandbox_mark_names_its_job(tmp_path, monkeypatch, content: bytes, job: str | None) -> None:
    mark = tmp_path / "mark"
    mark.write_bytes(content)
    monkeypatch.setattr(jobguard, "SANDBOX_MARK", str(mark))
    assert jobguard._mark_job() == job
    assert jobguard.by_namespace() == jobguard.Origin(f"it is inside a job's sandbox ({mark} exists)", job)


def test_no_sandbox_mark_names_no_job(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jobguard, "SANDBOX_MARK", str(tmp_path / "gone"))
    assert jobguard._mark_job() is None


# peer_origin past the ancestors: a real child, each later fact made to fail or fire in turn

@pytest.fixture
def peer(child, monkeypatch):
    """A real child whose ancestors (this test, its parents) are no job's."""
    monkeypatch.setattr(jobguard, "ancestors", lambda pid=None: [(1, ["/sbin/init"], "")])
    monkeypatch.setattr(jobguard, "process", lambda pid: (0, ["/sbin/init"], ""))
    return child.pid


def _paths(monkeypatch, name: str, fail: dict[str, Exception | str]) -> None:
    real = getattr(os, name)

    def call(path, *a, **k):
        if path in fail:
            if isinstance(fail[path], Exception):
                raise fail[path]
            return fail[path]
        return real(path, *a, **k)

    monkeypatch.setattr(os, name, call)


def test_a_peer_is_no_job_s_when_every_fact_says_so(peer) -> None:
    assert jobguard.peer_origin(peer) is None


def test_a_peer_whose_cgroup_cannot_be_read_counts_as_a_job_s(peer, monkeypatch) -> None:
    _files(monkeypatch, {f"/proc/{peer}/cgroup": None})
    assert jobguard.peer_origin(peer) == jobguard.Origin("its cgroup cannot be read")
    _files(monkeypatch, {f"/proc/{peer}/cgroup": b"0::/gpu-router-j\xff-2\n"})
    assert jobguard.peer_origin(peer) == jobguard.Origin("it is in a job's cgroup (gpu-router-j\ufffd-2)", "j\ufffd")


def test_a_peer_whose_root_holds_the_mark_or_cannot_be_looked_into(peer, monkeypatch) -> None:
    where = f"/proc/{peer}/root{SANDBOX_MARK}"
    _paths(monkeypatch, "lstat", {where: os.lstat("/")})
    assert jobguard.peer_origin(peer) == jobguard.Origin(f"it is inside a job's sandbox ({SANDBOX_MARK} exists)")
    _paths(monkeypatch, "lstat", {where: PermissionError(where)})
    assert jobguard.peer_origin(peer) == jobguard.Origin("its root cannot be looked into")


@pytest.mark.parametrize("ns", ["pid", "mnt", "user"])
def test_a_peer_in_another_namespace_or_one_that_cannot_be_read(peer, monkeypatch, ns: str) -> None:
    ours = os.readlink(f"/proc/self/ns/{ns}")
    _paths(monkeypatch, "readlink", {f"/proc/{peer}/ns/{ns}": f"{ns}:[1]"})
    assert jobguard.peer_origin(peer) == jobguard.Origin(f"it is in another {ns} namespace ({ns}:[1], not {ours})")
    _paths(monkeypatch, "readlink", {f"/proc/{peer}/ns/{ns}": PermissionError(ns)})
    assert jobguard.peer_origin(peer) == jobguard.Origin(f"its {ns} namespace cannot be read")
