"""Each fact alone makes a process a job's, with its own reason (issue 40).

core/engine/jobguard.detect is the one judgment approving, denying and setting the PIN ask. Each
fact it reads (the sandbox mark, /proc/1 being a job's bwrap, a pid namespace other than the
supervisor's, the attempt cgroup, a launcher or a job's bwrap among the ancestors, and
GPU_ROUTER_JOB) is set up here alone, as this process would see it, and `detect()` must find
it with the exact reason naming it. A fact dropped from `detect` (the cgroup check, say) makes
its case find nothing and fail; with no fact at all, nothing is found.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from core.engine import jobguard
from core.runtime.jobprocs import MARKER_VAR

CGROUP = "0::/user.slice/user-0.slice/gpu-router-1f2e3d4c5b6a-2\n"
LAUNCHER = ["/usr/bin/python3", "/home/ada/.local/share/gpu-router/jobs/1f2e3d4c5b6a/runtime/launch.py",
            "/home/ada/.local/share/gpu-router/jobs/1f2e3d4c5b6a/attempts/2/spec.json"]


def bwrap() -> list[str]:
    """A job's bwrap: it binds the sandbox mark (the place jobguard looks for it)."""
    return ["bwrap", "--unshare-pid", "--ro-bind", "/tmp/a/sandbox-mark", jobguard.SANDBOX_MARK, "--",
            "python", "a.py"]


@pytest.fixture
def plain(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """This process with no fact of a job's: no mark, a /proc/1 and cgroup of no job's, a parent
    chain of a shell and init, no supervisor, no GPU_ROUTER_JOB. Each test adds one fact."""
    monkeypatch.delenv(MARKER_VAR, raising=False)
    monkeypatch.setattr(jobguard, "SANDBOX_MARK", str(tmp_path / "no-mark-here"))
    files: dict[str, bytes] = {"/proc/self/cgroup": b"0::/user.slice/user-0.slice/session-3.scope\n",
                               "/proc/1/cmdline": b"/sbin/init\0splash\0"}
    real_read = jobguard.read_bytes
    monkeypatch.setattr(jobguard, "read_bytes", lambda path: files[path] if path in files else real_read(path))
    chain = {os.getpid(): (4000, ["pytest"], ""), 4000: (1, ["-bash"], "/usr/bin/bash"), 1: (0, ["/sbin/init"], "")}
    monkeypatch.setattr(jobguard, "process", lambda pid: chain.get(pid))
    world = types.SimpleNamespace(files=files, chain=chain, tmp=tmp_path)
    assert jobguard.detect() is None, "the plain process was already found to be a job's"
    return world


def _found(expected_reason: str, expected_job: str | None) -> None:
    found = jobguard.detect()
    assert found is not None, f"no fact found; expected: {expected_reason}"
    assert found.reason and found.reason == expected_reason, found
    assert found.job_id == expected_job, found
    assert jobguard.job_origin() == expected_reason


def test_the_cgroup_alone(plain) -> None:
    plain.files["/proc/self/cgroup"] = CGROUP.encode()
    _found("it is in a job's cgroup (gpu-router-1f2e3d4c5b6a-2)", "1f2e3d4c5b6a")


def test_a_v1_cgroup_line_alone(plain) -> None:
    plain.files["/proc/self/cgroup"] = (b"12:pids:/user.slice\n"
                                        b"4:memory:/gpu-router-1f2e3d4c5b6a-7\n0::/user.slice\n")
    _found("it is in a job's cgroup (gpu-router-1f2e3d4c5b6a-7)", "1f2e3d4c5b6a")


def test_the_sandbox_mark_alone(plain, monkeypatch: pytest.MonkeyPatch) -> None:
    mark = plain.tmp / "gpu-router-job"
    mark.write_text("1f2e3d4c5b6a:3\n")
    monkeypatch.setattr(jobguard, "SANDBOX_MARK", str(mark))
    _found(f"it is inside a job's sandbox ({mark} exists)", "1f2e3d4c5b6a")


def test_a_job_bwrap_as_pid_1_alone(plain) -> None:
    plain.files["/proc/1/cmdline"] = "\0".join(bwrap()).encode() + b"\0"
    _found("it is inside a job's sandbox (its pid namespace was made by bwrap for a job)", None)


def test_another_pid_namespace_than_the_supervisor_s_alone(plain, monkeypatch: pytest.MonkeyPatch) -> None:
    from core import paths

    paths.daemon_lock_file().write_text("4242\n")
    plain.files["/proc/4242/cmdline"] = b"/usr/bin/python3\0-m\0core.engine.supervisor\0"
    links = {"/proc/4242/ns/pid": "pid:[4026531836]", "/proc/self/ns/pid": "pid:[4026532999]"}
    fake_os = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    fake_os.readlink = lambda p: links[p] if p in links else os.readlink(p)
    monkeypatch.setattr(jobguard, "os", fake_os)
    _found("it is in another pid namespace than the supervisor (pid:[4026532999], not pid:[4026531836])", None)
    links["/proc/self/ns/pid"] = links["/proc/4242/ns/pid"]  # the person's terminal: the same namespace
    assert jobguard.detect() is None


def test_a_launcher_among_the_ancestors_alone(plain) -> None:
    plain.chain[4000] = (3000, ["-bash"], "/usr/bin/bash")
    plain.chain[3000] = (1, LAUNCHER, "/usr/bin/python3.11")
    _found("it descends from the job launcher (pid 3000, job 1f2e3d4c5b6a)", "1f2e3d4c5b6a")


def test_a_job_bwrap_among_the_ancestors_alone(plain) -> None:
    plain.chain[4000] = (3000, ["-bash"], "/usr/bin/bash")
    plain.chain[3000] = (1, bwrap(), "/usr/bin/bwrap")
    _found("it descends from a job's sandbox (bwrap, pid 3000)", None)


def test_a_launcher_s_cancel_is_no_job(plain) -> None:
    plain.chain[4000] = (3000, ["-bash"], "/usr/bin/bash")
    plain.chain[3000] = (1, [*LAUNCHER, "--kill"], "/usr/bin/python3.11")
    assert jobguard.detect() is None


def test_the_marker_variable_alone(plain, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKER_VAR, "1f2e3d4c5b6a:2")
    _found(f"{MARKER_VAR} is set in its environment", "1f2e3d4c5b6a")


def test_every_fact_is_asked(plain, monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts in the order detect asks them: each one, with all those before it absent, is
    what detect answers (none shadows another for good)."""
    asked = []
    for name in ("by_namespace", "by_cgroup", "by_ancestors", "by_environment"):
        real = getattr(jobguard, name)
        monkeypatch.setattr(jobguard, name, lambda *a, _n=name, _r=real, **k: asked.append(_n) or _r(*a, **k))
    assert jobguard.detect() is None
    assert asked == ["by_namespace", "by_cgroup", "by_ancestors", "by_environment"]


def test_a_peer_in_a_job_s_cgroup_is_a_job_s(plain, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm server's question about its client: the same cgroup fact, asked of another pid."""
    plain.chain[77] = (1, ["gpu", "submit"], "")
    plain.files["/proc/77/cgroup"] = CGROUP.encode()
    found = jobguard.peer_origin(77)
    assert found is not None and found.reason == "it is in a job's cgroup (gpu-router-1f2e3d4c5b6a-2)"
    plain.chain[77] = (3000, ["gpu", "submit"], "")
    plain.chain[3000] = (1, LAUNCHER, "")
    found = jobguard.peer_origin(77)
    assert found is not None and found.reason == "it descends from the job launcher (pid 3000, job 1f2e3d4c5b6a)"
