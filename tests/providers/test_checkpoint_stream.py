"""A remote checkpoint streams home: `ckptscan.py pack ... -` writes the tar to stdout and home
reads it through Transport.stream_to into its staging folder, then the usual safe extraction.
No archive file is ever made on the host (a checkpoint as large as the host's free space still
comes home), and the copy is capped by the target's max_output_bytes.

A real OpenSSH server on 127.0.0.1 (the `sshd` fixture) plays the host; its "remote" folder is
on this machine, so the test watches the job's folder on the host while the copy runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.packaging import checkpoints
from core.providers.ssh import SSHProvider
from core.runtime import RUNTIME_DIR
from core.transport.base import OverCap
from core.transport.ssh import Endpoint, SSHTransport, close_all
from tests.stubs import StubJob as _Job

pytestmark = pytest.mark.slow

PYTHON = getattr(sys, "_base_executable", None) or sys.executable
BIG = 50_000_000


def _box(sshd, tmp_path: Path, **options) -> SSHProvider:
    o = sshd.target_options(tmp_path / "remote", PYTHON)
    ep = Endpoint(o["host"], o["port"], user=o["user"], key=o["key"], known_hosts=o["known_hosts"])
    return SSHProvider("box", SSHTransport(ep, name="box"), root=o["root"], python=PYTHON, options=options)


def _saved_checkpoint(jdir: Path) -> bytes:
    """A 50 MB checkpoint saved by gpu.checkpoint_saved() in the job's folder on the host."""
    ckpt = jdir / "ckpt"
    ckpt.mkdir(parents=True)
    big = os.urandom(BIG)
    (ckpt / "model.bin").write_bytes(big)
    (ckpt / "state.json").write_text('{"step": 7}')
    subprocess.run([PYTHON, "-c", "import gpu; gpu.checkpoint_saved()"], check=True,
                   env={**os.environ, "PYTHONPATH": str(RUNTIME_DIR), "GPU_ROUTER_CHECKPOINT_DIR": str(ckpt),
                        "GPU_ROUTER_CHECKPOINT_GENERATIONS": str(jdir / "ckpt-gens")})
    return big


class _Watch:
    """Every name that appears in the job's folder on the host while it runs (a thread)."""

    def __init__(self, jdir: Path) -> None:
        self.jdir, self.seen, self.looks = jdir, set(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for dirpath, dirnames, filenames in os.walk(self.jdir):
                for n in dirnames + filenames:
                    self.seen.add(os.path.relpath(os.path.join(dirpath, n), self.jdir))
            self.looks += 1
            self._stop.wait(0.002)

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_a_50_mb_checkpoint_streams_home_with_no_archive_file_on_the_host(sshd, home: Path, tmp_path: Path) -> None:
    box = _box(sshd, tmp_path)
    job = _Job("cd" * 16)
    jdir = big = None

    async def go():
        nonlocal jdir, big
        await box.remote()
        jdir = Path(box.job_dir(job))
        big = _saved_checkpoint(jdir)
        before = {os.path.relpath(os.path.join(d, n), jdir)
                  for d, ds, fs in os.walk(jdir) for n in ds + fs}
        with _Watch(jdir) as watch:
            doc = await checkpoints.mirror(job, box)
        await close_all()
        return doc, before, watch

    doc, before, watch = asyncio.run(go())
    assert doc is not None and doc["generation"] == 1, doc
    home_copy = checkpoints.home_dir(job.id)
    assert (home_copy / "model.bin").read_bytes() == big
    assert (home_copy / "state.json").read_text() == '{"step": 7}'
    assert doc["last_moved"] >= BIG  # it came over the link (random bytes do not shrink)
    # what appeared on the host during the copy: the listing's hash cache, nothing else
    new = watch.seen - before
    assert watch.looks > 1 and all(n.startswith(".ckpt-hashes.json") for n in new), sorted(new)
    assert not any(".tar" in name for name in watch.seen)
    # and nothing is left in home's staging either
    assert sorted(p.name for p in home_copy.parent.iterdir() if p.name.startswith(".ckpt")) == []


def test_a_stream_over_the_targets_cap_stops_and_says_so(sshd, home: Path, tmp_path: Path) -> None:
    """The listing said the checkpoint fits, then the live file grew to 50 MB before it was
    packed: the copy stops at the target's cap (with the tar's allowance), keeps nothing at
    home, and the link goes on serving."""
    box = _box(sshd, tmp_path, max_output_bytes=10_000_000)
    job = _Job("ef" * 16)
    archive = tmp_path / "home-side.tar.gz"

    async def go() -> str:
        await box.remote()
        jdir = Path(box.job_dir(job))
        (jdir / "ckpt").mkdir(parents=True)
        (jdir / "ckpt" / "model.bin").write_bytes(os.urandom(BIG))
        try:
            await box.checkpoint_pack(job, ["model.bin"], archive)
        except OverCap as exc:
            said = str(exc)
        else:
            raise AssertionError("a copy over the cap came home")
        assert (await box.transport.run("echo still")).out == "still\n"
        await close_all()
        return said

    said = asyncio.run(go())
    assert "the checkpoint of job efefefef" in said and "max_output_bytes" in said
    assert "over its 11049600 byte cap" in said  # 10 MB + the tar's 1 MiB + 1 KB a file
    assert not archive.exists()
