"""A data set is a file or a folder, nothing else: never a socket, a FIFO, a device or a view of
the kernel's (/proc, /sys, /dev, /run).

A read-only bind does not stop `connect()`: a socket handed to a job as `--data` (the session
bus, an SSH agent) is the person's keychain or keys. Each case is submitted through the installed
`gpu` command, the way an agent would try it, directly and through a link in the project.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.errors import UserError
from core.packaging.local_data import list_data, source_problem
from tests.conftest import make_git_project, run_gpu


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "proj", {"train.py": "print('hi')\n"})


def _refused(proc: subprocess.CompletedProcess, *says: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and "fix:" in proc.stderr, proc.stderr
    for s in says:
        assert s in proc.stderr, proc.stderr


def _submit(project: Path, data: str) -> subprocess.CompletedProcess:
    return run_gpu("submit", "train.py", "--hours", "0.01", "--data", data, "--json", cwd=project)


@pytest.fixture
def unix_socket(tmp_path: Path):
    """A listening unix socket, as the session bus or an SSH agent is."""
    path = tmp_path / "agent.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    yield path
    s.close()


def test_a_socket_is_refused_directly_and_through_a_link(home: Path, project: Path, unix_socket: Path) -> None:
    _refused(_submit(project, f"agent={unix_socket}"), "is a socket", "files and folders")
    (project / "bus").symlink_to(unix_socket)
    _refused(_submit(project, "bus=bus"), "is a socket")


def test_a_fifo_and_a_device_are_refused(home: Path, project: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(_submit(project, f"p={fifo}"), "is a FIFO")
    _refused(_submit(project, "n=/dev/null"), "/dev/null")


@pytest.mark.parametrize("place", ["/proc/self", "/proc/1", "/sys/kernel", "/dev/shm", "/run"])
def test_kernel_and_runtime_places_are_refused(home: Path, project: Path, place: str) -> None:
    if not os.path.exists(place):
        pytest.skip(f"{place} is not on this system")
    _refused(_submit(project, f"x={place}"), "files and folders")


def test_a_link_to_a_process_is_refused_not_an_internal_error(home: Path, project: Path) -> None:
    (project / "me").symlink_to(f"/proc/{os.getpid()}")
    _refused(_submit(project, "me=me"), "/proc")


def test_a_plain_folder_and_file_still_pass(project: Path, tmp_path: Path) -> None:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text("a\n")
    assert list_data(d, "corpus").files == ["a.txt"]
    assert list_data(d / "a.txt", "one").files == [""]


def test_the_judge_refuses_at_every_door(unix_socket: Path) -> None:
    """list_data is what every target reads a set through (submit, launch, uploads): the
    refusal is there, not only in the request's parser."""
    with pytest.raises(UserError, match="is a socket"):
        list_data(unix_socket, "agent")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["socket", "fifo", "file", "dir"]),
       hops=st.integers(min_value=0, max_value=3))
def test_only_files_and_folders_pass_however_linked(tmp_path_factory: pytest.TempPathFactory,
                                                     kind: str, hops: int) -> None:
    """For any chain of links to any kind of thing, the judge passes exactly files and folders."""
    base = tmp_path_factory.mktemp("kinds")
    target = base / "thing"
    sock = None
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(target))
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "file":
        target.write_text("x\n")
    else:
        target.mkdir()
    try:
        path = target
        for i in range(hops):
            link = base / f"link{i}"
            link.symlink_to(path)
            path = link
        problem = source_problem(path)
        if kind in ("file", "dir"):
            assert problem is None
        else:
            assert problem is not None and ("socket" in problem or "FIFO" in problem)
            assert stat.S_ISSOCK(os.stat(path).st_mode) or stat.S_ISFIFO(os.stat(path).st_mode)
    finally:
        if sock is not None:
            sock.close()
