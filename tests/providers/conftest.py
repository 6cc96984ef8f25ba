"""Fixtures of the providers' tests: the real SkyPilot server, one per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

SERVER = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.sshd, pytest.mark.xdist_group("skypilot"),
          pytest.mark.timeout(1500)]


def server_test(fn):
    """A test of the real SkyPilot server: slow, on the session's one server (one xdist worker)."""
    for mark in SERVER:
        fn = mark(fn)
    return fn


@pytest.fixture(scope="session")
def skypilot_server():
    """One server and Slurm cluster for the session, in a folder of its own under /tmp: munged
    wants every folder above its socket searchable, which pytest's own tmp folders (0700) are not."""
    import shutil
    import tempfile

    from tests.skypilot_service import SkyPilotServer

    root = Path(tempfile.mkdtemp(prefix="gpu-router-skypilot-"))
    try:
        server = SkyPilotServer(root)
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


