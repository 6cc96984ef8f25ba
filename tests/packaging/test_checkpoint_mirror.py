"""Checkpoints come home incrementally and only when complete (core/packaging/checkpoints/),
read from a real job folder by the local target's provider and the runtime's own marker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from core.packaging import checkpoints
from core.providers.local import LocalProvider
from core.runtime import RUNTIME_DIR
from tests.stubs import StubJob as _Job


def _saved(ckpt: Path) -> int:
    """gpu.checkpoint_saved() as a job calls it: in its own process, with its environment."""
    out = subprocess.run([sys.executable, "-c", "import gpu; print(gpu.checkpoint_saved())"],
                         env={**os.environ, "PYTHONPATH": str(RUNTIME_DIR),
                              "GPU_ROUTER_CHECKPOINT_DIR": str(ckpt)},
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_a_marked_checkpoint_comes_home_and_only_changed_files_move(home: Path) -> None:
    job = _Job("cd" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "big.bin").write_bytes(os.urandom(200_000))
    (ckpt / "step.json").write_text(json.dumps({"step": 1}))
    assert _saved(ckpt) == 1
    doc = asyncio.run(checkpoints.mirror(job, provider))
    assert doc is not None and doc["generation"] == 1 and doc["last_moved"] > 150_000
    home_copy = checkpoints.home_dir(job.id)
    assert (home_copy / "big.bin").read_bytes() == (ckpt / "big.bin").read_bytes()

    # a second save changes only step.json: only it moves
    (ckpt / "step.json").write_text(json.dumps({"step": 2}))
    assert _saved(ckpt) == 2
    doc = asyncio.run(checkpoints.mirror(job, provider))
    assert doc["generation"] == 2 and doc["last_moved"] < 10_000, doc
    assert json.loads((home_copy / "step.json").read_text()) == {"step": 2}
    assert (home_copy / "big.bin").stat().st_size == 200_000

    # a save under way (marked files changing) never replaces the complete one at home
    (ckpt / "big.bin").write_bytes(b"half")
    assert asyncio.run(checkpoints.mirror(job, provider)) is None
    assert (home_copy / "big.bin").stat().st_size == 200_000
    info = checkpoints.summary(job.id)
    assert info["generation"] == 2 and info["bytes"] > 200_000 and info["files"] == 2
    assert "checkpoint 2" in checkpoints.describe(info)


def test_without_a_marker_a_folder_counts_once_it_settles(home: Path) -> None:
    job = _Job("ef" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(b"a" * 1000)
    assert asyncio.run(checkpoints.mirror(job, provider)) is None  # first look: not yet
    (ckpt / "model.pt").write_bytes(b"b" * 2000)
    assert asyncio.run(checkpoints.mirror(job, provider)) is None  # it changed: not yet
    doc = asyncio.run(checkpoints.mirror(job, provider))  # the same listing twice: settled
    assert doc is not None and (checkpoints.home_dir(job.id) / "model.pt").read_bytes() == b"b" * 2000
    assert asyncio.run(checkpoints.mirror(job, provider)) is None  # nothing new to move

    # restored into a fresh ckpt/ (what a new target gets), and kept as an output at the end
    dest = home / "elsewhere" / "ckpt"
    dest.parent.mkdir()
    assert checkpoints.restore_local(job.id, dest)
    assert (dest / "model.pt").read_bytes() == b"b" * 2000
    runs = home / "runs" / "x"
    assert checkpoints.settle(job.id, runs) is None
    assert (runs / "checkpoint" / "model.pt").exists() and checkpoints.summary(job.id) is None


def test_a_copied_checkpoint_whose_marker_names_a_path_outside_touches_nothing_there(tmp_path: Path) -> None:
    """scan_copy gives a copy's files the marker's times; the marker is the job's word, so a
    name out of the folder (a Modal volume's or a Kaggle output's marker) is left alone."""
    from core.runtime import ckptscan

    folder = tmp_path / "copy" / "ckpt"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"m" * 10)
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 4)
    before = victim.stat().st_mtime_ns
    (folder / checkpoints.MARKER).write_text(json.dumps({"generation": 2, "files": {
        "model.pt": [10, 1_000_000_000], "../../victim": [4, 5_000_000_000], str(victim): [4, 5_000_000_000]}}))
    doc = ckptscan.scan_copy(str(folder))
    assert doc["final"] and doc["files"]["model.pt"][1] == 1_000_000_000
    assert victim.stat().st_mtime_ns == before


# -- what home takes: special files, sparse files, a full disk --------------------------------

def _mirror(job, provider, notes: list[str], now: float | None = None):
    async def say(text: str) -> None:
        notes.append(text)
    return asyncio.run(checkpoints.mirror(job, provider, say=say, now=now))


def test_fifos_sockets_devices_and_links_are_skipped_said_once_never_opened(home: Path, tmp_path: Path) -> None:
    """A FIFO blocks whoever opens it: this test would hang if the listing opened one."""
    import socket

    job = _Job("a1" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(b"w" * 5000)
    os.mkfifo(ckpt / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(ckpt)  # a socket's path must be short: bound by its name from inside
    try:
        sock.bind("sock")
    finally:
        os.chdir(here)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    os.symlink(secret, ckpt / "link.pt")
    if os.geteuid() == 0:
        os.mknod(ckpt / "dev", 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    notes: list[str] = []
    try:
        assert _mirror(job, provider, notes) is None  # first look
        doc = _mirror(job, provider, notes)  # settled: comes home without them
        assert _mirror(job, provider, notes) is None
    finally:
        sock.close()
    assert doc is not None and set(doc["files"]) == {"model.pt"}
    assert len(notes) == 1, notes
    for name in ("pipe (a FIFO)", "sock (a socket)", "link.pt (a link)"):
        assert name in notes[0]
    assert sorted(p.name for p in checkpoints.home_dir(job.id).iterdir()) == ["model.pt"]


def test_a_sparse_file_counts_its_full_length_and_is_never_read(home: Path) -> None:
    """A 1 TiB sparse file (no block written) is 1 TiB to the caps: said once, nothing moves,
    and it is not even hashed (that would take many minutes)."""
    import time

    job = _Job("b2" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "step.json").write_text("{}")
    with open(ckpt / "huge.bin", "wb") as f:
        f.truncate(1 << 40)
    assert (ckpt / "huge.bin").stat().st_blocks == 0
    notes: list[str] = []
    start = time.monotonic()
    for _ in range(3):
        assert _mirror(job, provider, notes) is None
    assert time.monotonic() - start < 10
    assert len(notes) == 1 and "over the 21.5 GB output cap" in notes[0] and "sparse" in notes[0], notes
    assert checkpoints.manifest(job.id) is None
    assert not [p for p in checkpoints.home_dir(job.id).parent.glob(".ckpt-*") if p.name.startswith((".ckpt-new-", ".ckpt-") ) and not p.name.startswith(".ckpt-hashes")]

# -- a checkpoint file named after a secret --------------------------------------------------

TOKEN = "hf_Zq8xTOKENvalue/77+x"


class _SecretJob(_Job):
    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.request = {"secrets": ["MY_TOKEN"]}


def _names_and_bytes(root: Path) -> list[tuple[str, bytes]]:
    return [(p.relative_to(root).as_posix(), p.read_bytes() if p.is_file() else b"")
            for p in root.rglob("*")]


def test_a_checkpoint_named_after_a_secret_comes_home_masked_and_resumes_under_its_name(
        keychain, home: Path) -> None:
    """A real keychain holds the job's token; the job names a checkpoint file after it (as is,
    and its hex in a folder name) and marks the save. Home (ckpt-home, the manifest, the look
    file, the marker's copy) holds no form of the token in any name or byte; a restore with
    the value the launch reads puts every file back under the name the job wrote, the marker
    naming them; a restore after the token changed keeps the masked name (the job then sees a
    checkpoint without that file, never a wrong one). The token holds a '/', so the name the
    job wrote spans a folder: the whole path is what is masked."""
    import base64

    from core.runtime.redact import SecretPattern
    from core.secrets import keychain as kc

    kc.set("MY_TOKEN", TOKEN)
    job = _SecretJob("ab" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    (ckpt / f"{TOKEN.encode().hex()}.d").mkdir(parents=True)
    (ckpt / f"tok_{TOKEN}.pt").parent.mkdir(parents=True)  # its '/' makes a folder of half of it
    (ckpt / f"tok_{TOKEN}.pt").write_bytes(b"weights" * 100)
    (ckpt / f"{TOKEN.encode().hex()}.d" / "opt.bin").write_bytes(b"optimizer")
    (ckpt / "step.json").write_text('{"step": 7}')
    assert _saved(ckpt) == 1
    doc = asyncio.run(checkpoints.mirror(job, provider))
    assert doc is not None and doc["generation"] == 1

    # nothing at home holds the token: names, manifest, look file, marker copy
    pattern = SecretPattern([TOKEN])
    forms = [TOKEN, TOKEN.encode().hex(), base64.b64encode(TOKEN.encode()).decode()]
    jobs_home = home / "jobs" / job.id
    for name, data in _names_and_bytes(jobs_home):
        if name.startswith("ckpt/") or name == "ckpt" or name.startswith(".ckpt-hashes"):
            continue  # the local target's own job folder: the job's files as it wrote them
        assert not pattern.holds(name), name
        for form in forms:
            assert form.encode() not in data, (name, form)
    home_copy = checkpoints.home_dir(job.id)
    shown = sorted(n for n, _ in _names_and_bytes(home_copy))
    assert "tok_[secret].pt" in shown and "[secret].d/opt.bin" in shown, shown
    marker = json.loads((home_copy / checkpoints.MARKER).read_text())
    assert sorted(marker["files"]) == ["[secret].d/opt.bin", "step.json", "tok_[secret].pt"]
    manifest = checkpoints.manifest(job.id)
    assert set(manifest["files"]) == {"[secret].d/opt.bin", "step.json", "tok_[secret].pt"}
    assert manifest["files"]["tok_[secret].pt"]["sealed"] and "sealed" not in manifest["files"]["step.json"]
    # an unchanged second look moves nothing (masked names compare alike from look to look)
    assert asyncio.run(checkpoints.mirror(job, provider)) is None

    # restore onto a "new target": the job's names are back, the marker names them
    dest = home / "elsewhere" / "ckpt"
    dest.parent.mkdir()
    assert checkpoints.restore_local(job.id, dest, {"MY_TOKEN": TOKEN})
    assert (dest / f"tok_{TOKEN}.pt").read_bytes() == b"weights" * 100
    assert (dest / f"{TOKEN.encode().hex()}.d" / "opt.bin").read_bytes() == b"optimizer"
    back = json.loads((dest / checkpoints.MARKER).read_text())
    assert sorted(back["files"]) == sorted(marker_name for marker_name in json.loads(
        (ckpt / checkpoints.MARKER).read_text())["files"])
    # the archive a remote target gets holds the same names
    import tarfile

    archive = checkpoints.restore_archive(job.id, {"MY_TOKEN": TOKEN})
    try:
        with tarfile.open(archive) as tar:
            assert f"tok_{TOKEN}.pt" in tar.getnames()
    finally:
        archive.unlink()

    # the token was rotated: the seal does not open, the masked name is kept
    other = home / "rotated" / "ckpt"
    other.parent.mkdir()
    assert checkpoints.restore_local(job.id, other, {"MY_TOKEN": "a-new-token-value"})
    assert (other / "tok_[secret].pt").exists() and (other / "step.json").exists()
    assert not any(TOKEN.replace("/", "_") in n for n, _ in _names_and_bytes(other))

    # the job ends: its checkpoint is kept with the outputs, masked
    runs = home / "runs" / "x"
    assert checkpoints.settle(job.id, runs) is None
    assert (runs / "checkpoint" / "tok_[secret].pt").exists()


def test_a_checkpoint_marker_nested_past_the_parser_s_depth_is_not_a_marker(tmp_path: Path) -> None:
    """The job writes its checkpoint's marker: one nested too deep to parse is dropped (the
    checkpoint is then not complete), never an error that stops the supervisor's step."""
    from core.packaging import checkpoints
    from core.packaging.checkpoints.mirroring import _rename_marker
    from core.packaging.checkpoints.restore import _marker_bytes

    marker = tmp_path / ".complete"
    marker.write_text('{"files":' + "[" * 100_000 + "]" * 100_000 + "}")
    _rename_marker(marker, lambda rel: rel)
    assert not marker.exists()
    (tmp_path / checkpoints.MARKER).write_text('{"files":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _marker_bytes(tmp_path, {}) is None


def test_the_last_look_at_an_ended_job_counts_its_unmarked_folder(home: Path) -> None:
    """A job that never calls gpu.checkpoint_saved() and saved once more right before it ended
    (issue 38): the one look after its end finds a listing no look had seen; `ended` looks again
    at once, so that last save comes home. Without `ended`, the same look does not count."""
    job = _Job("ab" * 16)
    provider = LocalProvider()
    ckpt = provider.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text(json.dumps({"step": 10}))
    assert asyncio.run(checkpoints.mirror(job, provider)) is None  # a look while it ran
    (ckpt / "state.json").write_text(json.dumps({"step": 340}))  # its last save, then it exits
    assert asyncio.run(checkpoints.mirror(job, provider)) is None  # one look: not settled
    (ckpt / "state.json").write_text(json.dumps({"step": 341}))
    doc = asyncio.run(checkpoints.mirror(job, provider, ended=True))
    assert doc is not None
    assert json.loads((checkpoints.home_dir(job.id) / "state.json").read_text()) == {"step": 341}

    # a marked folder whose marker no longer matches (a save under way) is not counted by it
    (ckpt / "state.json").write_text(json.dumps({"step": 342}))
    assert _saved(ckpt) >= 1
    (ckpt / "state.json").write_text(json.dumps({"step": 343, "torn": True}))
    assert asyncio.run(checkpoints.mirror(job, provider, ended=True)) is None
    assert json.loads((checkpoints.home_dir(job.id) / "state.json").read_text()) == {"step": 341}
