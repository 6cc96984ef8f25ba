"""Checkpoints keep their holes (issue 39, item 5): a sparse checkpoint file (64 MiB long, a few
bytes of data) comes home, is copied into each new version at home, restored into a fresh
ckpt/, settled into runs/<id>/checkpoint/ and back across disks, and stays a few blocks on disk
each time with every byte equal; its full length still counts against the output cap, exactly
as a dense file's does. core/runtime/sparsefile.py does the copies and the writes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples
from tests.conftest import rename_across_disks
from tests.stubs import StubJob as _Job

from core.packaging import checkpoints
from core.packaging.safe_extract import OutputCaps
from core.providers.local import LocalProvider
from core.runtime import RUNTIME_DIR, sparsefile

SIZE = 64 << 20
SMALL = 1 << 20  # what such a file may take on disk after any copy


def _sparse_ok(where: Path) -> bool:
    probe = where / ".sparse-probe"
    with open(probe, "wb") as f:
        f.truncate(SIZE)
    ok = os.stat(probe).st_blocks * 512 < SMALL
    probe.unlink()
    return ok


@pytest.fixture
def sparse_home(home: Path) -> Path:
    if not _sparse_ok(home):
        pytest.skip("this file system does not keep sparse files")
    return home


# what a job writes: a 64 MiB file with data at two places, then marks the save complete
JOB = f"""
import gpu, os
folder = gpu.checkpoint_dir()
with open(os.path.join(folder, "buffer.bin"), "wb") as f:
    f.truncate({SIZE})
    f.seek(12345)
    f.write(b"state at the start")
    f.seek({SIZE} - 70000)
    f.write(os.urandom(5000))
with open(os.path.join(folder, "step.json"), "w") as f:
    f.write(os.environ.get("STEP", "1"))
print(gpu.checkpoint_saved())
"""


def _env(ckpt: Path, frozen: bool) -> dict[str, str]:
    """The job's environment; `frozen`: each save is frozen into ckpt-gens/ (core/runtime/
    ckptgen.py: a file written anew is copied there), as where gpu-router mirrors."""
    env = {**os.environ, "PYTHONPATH": str(RUNTIME_DIR), "GPU_ROUTER_CHECKPOINT_DIR": str(ckpt)}
    if frozen:
        env["GPU_ROUTER_CHECKPOINT_GENERATIONS"] = str(ckpt.with_name("ckpt-gens"))
    return env


def _job_saves(ckpt: Path, step: int, frozen: bool) -> None:
    subprocess.run([sys.executable, "-c", JOB], check=True, capture_output=True,
                   env={**_env(ckpt, frozen), "STEP": str(step)})


def _same_and_sparse(copy: Path, original: Path) -> None:
    assert copy.stat().st_size == original.stat().st_size == SIZE
    assert sparsefile.allocated(copy) < SMALL, f"{copy}: {sparsefile.allocated(copy)} bytes on disk"
    assert copy.read_bytes() == original.read_bytes()


@pytest.mark.parametrize("frozen", [True, False], ids=["generations", "live-folder"])
def test_a_sparse_checkpoint_comes_home_sparse_and_stays_sparse_on_every_copy(
        sparse_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen: bool) -> None:
    job = _Job(("5a" if frozen else "5b") * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    _job_saves(ckpt, 1, frozen)
    original = ckpt / "buffer.bin"
    assert sparsefile.allocated(original) < SMALL
    if frozen:  # the copy frozen on the target, which the pack reads
        gens = sorted(p for p in ckpt.with_name("ckpt-gens").iterdir() if p.name.isdigit())
        _same_and_sparse(gens[-1] / "buffer.bin", original)

    doc = asyncio.run(checkpoints.mirror(job, provider))  # packed there, unpacked here
    assert doc is not None and doc["bytes"] >= SIZE  # it counts its full length
    _same_and_sparse(checkpoints.home_dir(job.id) / "buffer.bin", original)

    # the next save changes only step.json: the new version at home copies buffer.bin over
    (ckpt / "step.json").write_text("2")
    subprocess.run([sys.executable, "-c", "import gpu; gpu.checkpoint_saved()"], check=True,
                   env=_env(ckpt, frozen))
    doc = asyncio.run(checkpoints.mirror(job, provider))
    assert doc is not None and doc["last_moved"] < SMALL
    _same_and_sparse(checkpoints.home_dir(job.id) / "buffer.bin", original)

    # back onto a (local) target at a resume
    dest = tmp_path / "elsewhere" / "ckpt"
    dest.parent.mkdir()
    assert checkpoints.restore_local(job.id, dest)
    _same_and_sparse(dest / "buffer.bin", original)

    # settled into runs/<id>/checkpoint/ and reclaimed, home and the project on two disks
    rename_across_disks(monkeypatch)
    runs = tmp_path / "project" / "runs" / job.id
    assert checkpoints.settle(job.id, runs) is None
    _same_and_sparse(runs / "checkpoint" / "buffer.bin", original)
    info = checkpoints.reclaim(job.id, runs)
    assert info is not None
    _same_and_sparse(checkpoints.home_dir(job.id) / "buffer.bin", original)


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_a_sparse_file_over_the_cap_is_refused_as_a_dense_one_is(home: Path, sparse: bool) -> None:
    """A 64 MiB file against a 32 MiB cap: not mirrored, said once, in the same words, whether
    its blocks are on disk or not."""
    job = _Job(("6b" if sparse else "7c") * 16)
    provider = LocalProvider(caps=OutputCaps(max_bytes=32 << 20))
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    with open(ckpt / "buffer.bin", "wb") as f:
        if sparse:
            f.truncate(SIZE)
            f.seek(100)
            f.write(b"x")
        else:
            f.write(os.urandom(SIZE))
    notes: list[str] = []

    async def say(text: str) -> None:
        notes.append(text)

    for _ in range(3):
        assert asyncio.run(checkpoints.mirror(job, provider, say=say)) is None
    assert notes == ["checkpoint not mirrored: 67.1 MB (every file at its full length, sparse ones too) "
                     "is over the 33.6 MB output cap of local (max_output_bytes); home keeps no checkpoint"]
    assert checkpoints.manifest(job.id) is None


def test_unpacking_counts_the_holes_against_the_cap(tmp_path: Path) -> None:
    """An archive from a host (its member written out in full) holding a mostly-zero 64 MiB
    file: unpacked with holes, and stopped at a 32 MiB cap as a dense file would be."""
    import tarfile

    from core.packaging.safe_extract import safe_extract

    if not _sparse_ok(tmp_path):
        pytest.skip("this file system does not keep sparse files")
    src = tmp_path / "buffer.bin"
    with open(src, "wb") as f:
        f.truncate(SIZE)
        f.seek(SIZE // 2)
        f.write(b"middle")
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(src, arcname="buffer.bin")
    whole = tmp_path / "whole"
    assert safe_extract(archive, whole) == []
    _same_and_sparse(whole / "buffer.bin", src)
    notes = safe_extract(archive, tmp_path / "capped", caps=OutputCaps(max_bytes=32 << 20))
    assert len(notes) == 1 and "byte cap" in notes[0], notes
    assert not (tmp_path / "capped" / "buffer.bin").exists()


@settings(max_examples=examples(100), deadline=None)
@given(pieces=st.lists(st.tuples(st.integers(0, 3 * sparsefile.BLOCK + 7), st.booleans()), max_size=12),
       reads=st.lists(st.integers(1, 3 * sparsefile.BLOCK), min_size=1, max_size=5),
       tail_hole=st.integers(0, 2 * sparsefile.BLOCK))
def test_copies_and_writes_keep_every_byte(tmp_path_factory, pieces, reads, tail_hole) -> None:
    """Any layout of data and zero runs, streamed in any read sizes or copied by regions: the
    copy reads back byte for byte, with its full length."""
    where = tmp_path_factory.mktemp("s")
    data = b"".join((os.urandom(n).replace(b"\0", b"\1") if dense else bytes(n)) for n, dense in pieces)
    src = where / "src"
    with open(src, "wb") as f:
        f.write(data)
        f.truncate(len(data) + tail_hole)
    expected = src.read_bytes()
    streamed = where / "streamed"
    fd = os.open(streamed, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        at, i = 0, 0
        while at < len(expected):
            n = reads[i % len(reads)]
            sparsefile.write(fd, expected[at:at + n])
            at, i = at + n, i + 1
        os.ftruncate(fd, len(expected))
    finally:
        os.close(fd)
    assert streamed.read_bytes() == expected
    copied = where / "copied"
    assert sparsefile.copy_file(src, copied) == len(expected)
    assert copied.read_bytes() == expected
