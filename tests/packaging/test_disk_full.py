"""A full disk is said, not suffered: "disk full at PATH (N MB free)", and nothing is lost.

gpu-router's home (the store, bundles, job folders) lives on a real 20 MB tmpfs for these
tests, filled up the way a user's disk fills. These tests need to mount one (root, or
CAP_SYS_ADMIN); where that is not allowed they fail saying so rather than skip silently.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.errors import DiskFull, UserError, disk_full_guard
from core.runtime.diskspace import disk_full_text, says_disk_full
from tests.conftest import _stop_world, gpu_json, kill_remote_jobs, make_git_project, run_gpu, wait_state

DISK_FULL_RE = r"disk full at (\S+) \((\d+) MB free\)"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 20 MB tmpfs of our own, unmounted afterwards."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"the disk-full tests need a 20 MB tmpfs and could not mount one at {mnt}: "
                    f"{(r.stderr or r.stdout).strip() or 'mount failed'} (run them as root, or "
                    "with CAP_SYS_ADMIN)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def small_home(home: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch):
    """GPU_ROUTER_HOME on the small disk (its supervisor and jobs stopped before unmounting)."""
    h = small_disk / "home"
    h.mkdir()
    monkeypatch.setenv("GPU_ROUTER_HOME", str(h))
    yield h
    _stop_world(h)
    kill_remote_jobs(h)  # local jobs: every process still running (laid out as a remote target's)


def fill(disk: Path, name: str = "filler") -> Path:
    """Write until the disk says ENOSPC, as a user's downloads would."""
    path = disk / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, os.urandom(size))
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return path


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_submit_on_a_full_home_exits_2_saying_where_and_keeps_the_store(small_home: Path, small_disk: Path,
                                                                       tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n", "data.bin": "x" * 200_000})
    first = gpu_json("submit", "a.py", "--hours", "0.1", "--wait-s", "0", "--name", "first", cwd=project)
    # the first job ends before the disk fills: its supervisor frees its working copy when it
    # ends, and space freed after the fill let a later command through (seen under -n 2)
    wait_state(first["job"]["short_id"], {"done", "failed"}, timeout=120)
    filler = fill(small_disk)
    (project / "b.py").write_text("print('changed')\n")  # a new bundle must be written
    listing = run_gpu("bundle", cwd=project)
    assert listing.returncode == 2 and re.search(DISK_FULL_RE, listing.stderr), listing.stderr
    proc = run_gpu("submit", "b.py", "--hours", "0.1", "--wait-s", "0", "--name", "second", cwd=project)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    m = re.search(DISK_FULL_RE, proc.stderr)
    assert m, proc.stderr
    assert Path(m.group(1)) == small_home and int(m.group(2)) < 2
    assert "Traceback" not in proc.stderr
    # the store still answers on the full disk: the first job is there, no half-made second one
    jobs = gpu_json("jobs")["jobs"]
    assert [(j["id"], j["name"]) for j in jobs] == [(first["job"]["id"], "first")]
    filler.unlink()
    assert _integrity(small_home / "store.sqlite3") == "ok"
    # once there is room again, the same command works
    again = gpu_json("submit", "b.py", "--hours", "0.1", "--wait-s", "0", "--name", "second", cwd=project)
    assert again["submitted"] is True


def test_a_job_that_fills_its_disk_fails_saying_so_not_lost(small_home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"big.py": (
        "import gpu\n"
        "print('writing', flush=True)\n"
        "with open(gpu.output_dir() / 'huge.bin', 'wb') as f:\n"
        "    while True:\n"
        "        f.write(b'\\1' * (1 << 20))\n"
        "        f.flush()\n")})
    sub = gpu_json("submit", "big.py", "--hours", "0.1", "--wait-s", "10", cwd=project)
    job_id = sub["job"]["id"]
    deadline = time.monotonic() + 120
    from core.jobs.store import Store

    while time.monotonic() < deadline:
        job = Store().get(job_id)
        if job.state.value in ("done", "failed", "cancelled"):
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"the job never ended: {job.state} {job.reason}")
    assert job.state.value == "failed", job.reason
    m = re.fullmatch(DISK_FULL_RE, job.reason)
    assert m, f"reason should say the disk is full: {job.reason!r}"
    assert Path(m.group(1)) == small_home / "jobs" / job_id and int(m.group(2)) < 2
    assert "lost" not in job.reason
    for f in (small_home / "jobs" / job_id / "out").iterdir():
        f.unlink()  # room again: the store is whole
    assert _integrity(small_home / "store.sqlite3") == "ok"


def test_the_store_refuses_writes_on_a_full_disk_and_stays_whole(small_home: Path, small_disk: Path) -> None:
    """Writes that do not fit raise DiskFull; none is half-kept; the connection stays usable."""
    from core.jobs.states import State
    from core.jobs.store import Store

    store = Store()

    def row(i: int) -> dict:
        return {"id": f"{i:032x}", "short_id": f"{i:08x}", "name": f"j{i}", "provider": "local",
                "project_dir": "/p", "outputs_dir": f"/p/runs/{i:08x}", "fingerprint": f"f{i}",
                "request": {"pad": "x" * 20_000}, "plan": {}}

    kept = []
    fill(small_disk)
    failures = 0
    for i in range(1, 400):
        try:
            store.insert_job(row(i), reason="t", actor="t")
            store.transition(f"{i:032x}", State.ROUTING, "r")
            kept.append(f"{i:032x}")
        except UserError as exc:
            assert isinstance(exc, DiskFull) and re.fullmatch(DISK_FULL_RE, exc.what), exc.what
            assert not store.conn.in_transaction
            failures += 1
            if failures >= 5:
                break
    assert failures >= 5, "the disk never filled"
    assert _integrity(store.path) == "ok"
    fresh = Store()
    ids = {j.id for j in fresh.jobs()}
    assert set(kept) <= ids  # every write that returned is there
    for job_id in ids:  # and every job there is whole: inserted and routed in full, or absent
        events = [e.dst for e in fresh.events(job_id)]
        assert events[0] == "queued"
    (small_disk / "filler").unlink()
    store.insert_job(row(1000), reason="t", actor="t")  # room again: the same connection writes
    assert fresh.get(f"{1000:032x}").name == "j1000"


# -- the one phrasing, for any failure ------------------------------------------------------

_ERRNOS = st.sampled_from([errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EIO, errno.ENOENT, errno.EROFS])


class _SqliteLike(Exception):
    def __init__(self, code: int) -> None:
        super().__init__("sqlite")
        self.sqlite_errorcode = code


@settings(max_examples=examples(150), deadline=None)
@given(err=st.one_of(_ERRNOS.map(lambda e: OSError(e, os.strerror(e))),
                     st.sampled_from([13, 13 | 256, 5, 19, 1]).map(_SqliteLike)),
       where=st.sampled_from(["/", "/tmp", "/nonexistent/deeper/still"]))
def test_the_guard_turns_exactly_a_full_disk_into_disk_full(err: Exception, where: str) -> None:
    full = (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) or \
        (isinstance(err, _SqliteLike) and err.sqlite_errorcode & 0xFF == 13)
    try:
        with disk_full_guard(where):
            raise err
    except DiskFull as exc:
        assert full
        assert exc.exit_code == 2 and exc.fix
        m = re.fullmatch(DISK_FULL_RE.replace(r"(\S+)", "(.+)"), exc.what)
        assert m and m.group(1) == where and says_disk_full(exc.what)
    except Exception as exc:  # noqa: BLE001
        assert not full and exc is err


@settings(max_examples=examples(100), deadline=None)
@given(free=st.integers(min_value=0, max_value=1 << 50), path=st.text(min_size=1, max_size=30).map(lambda t: "/" + t))
def test_the_phrase_says_the_path_and_whole_megabytes(free: int, path: str) -> None:
    text = disk_full_text(path, free)
    assert text == f"disk full at {path} ({free // (1 << 20)} MB free)"
    assert says_disk_full(text) and not says_disk_full("lost: " + text)


class _CheckpointsElsewhere:
    """The local target's checkpoint calls (the real ckptscan) on a folder off the small disk,
    counting how often the target was asked: a paused mirror asks nothing."""

    name = "local"

    def __init__(self, ckpt: Path) -> None:
        from core.packaging.safe_extract import OutputCaps

        self.ckpt, self.caps, self.asked = ckpt, OutputCaps(), 0

    async def checkpoint_scan(self, job) -> dict:
        from core.runtime import ckptscan

        self.asked += 1
        return ckptscan.scan(str(self.ckpt))

    async def checkpoint_pack(self, job, rels: list[str], archive: Path, progress=None) -> dict:
        from core.runtime import ckptscan

        self.asked += 1
        return ckptscan.pack(str(self.ckpt), str(archive), rels)


def test_a_full_home_pauses_checkpoint_mirroring_said_once_then_it_resumes(
        small_home: Path, small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from core.packaging import checkpoints
    from core.packaging.checkpoints import pause
    from core.jobs.store import Event
    from tui.show.render import status_panel

    monkeypatch.setattr(pause, "RESERVE_BYTES", 1 << 20)
    ckpt = tmp_path / "job" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(os.urandom(4 << 20))  # 4 MB: home needs 8 MB + the reserve

    class Job:
        id, short_id, attempt, handle = "f0" * 16, "f0f0f0f0", 1, {}

    provider = _CheckpointsElsewhere(ckpt)
    notes: list[str] = []

    def look(now: float):
        async def say(text: str) -> None:
            notes.append(text)
        return asyncio.run(checkpoints.mirror(Job(), provider, say=say, now=now))

    filler = fill(small_disk)
    os.truncate(filler, filler.stat().st_size - (6 << 20))  # 6 MB free: not enough
    assert look(1000.0) is None  # first look: the listing settles
    assert look(1001.0) is None  # complete, but home has no room: paused, said once
    assert len(notes) == 1 and notes[0].startswith(pause.PAUSED), notes
    assert re.search(DISK_FULL_RE, notes[0]) and "resumes by itself" in notes[0]
    asked = provider.asked
    for now in (1002.0, 1010.0, 1031.0, 1050.0):  # the back-off: the target is not asked, nothing said
        assert look(now) is None
    assert provider.asked == asked and len(notes) == 1
    paused = json.loads((small_home / "jobs" / Job.id / "ckpt-look.json").read_text())["paused"]
    assert paused["wait_s"] == 60.0  # looked once at 1031 (still full), then waits twice as long
    # gpu status says it, from the job's events
    events = [Event(1, Job.id, 1001.0, None, None, notes[0], "supervisor", {})]
    assert checkpoints.paused_note(events) == notes[0]
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(status_panel(_status_job(), events, {}, mirroring=checkpoints.paused_note(events)))
    assert "checkpoint mirroring paused: disk full at" in console.export_text()
    # room comes back: at the next look after the back-off it resumes, says so, and the checkpoint comes home
    filler.unlink()
    assert look(1060.0) is None and len(notes) == 1  # still within the back-off
    doc = look(1100.0)
    assert len(notes) == 2 and notes[1].startswith(pause.RESUMED), notes
    assert doc is not None and set(doc["files"]) == {"model.pt"}
    assert (checkpoints.home_dir(Job.id) / "model.pt").read_bytes() == (ckpt / "model.pt").read_bytes()
    events.append(Event(2, Job.id, 1100.0, None, None, notes[1], "supervisor", {}))
    assert checkpoints.paused_note(events) is None


def _status_job():
    """A job as `gpu status` renders it (any live job will do)."""
    from core.jobs.states import State
    from core.jobs.store import Job

    fields = {f: None for f in Job.__dataclass_fields__}
    fields.update(id="f0" * 16, short_id="f0f0f0f0", name="train", state=State.RUNNING, reason="",
                  provider="local", plan={}, request={}, bundle={}, attempt=1, created_at=0.0,
                  updated_at=0.0, handle={}, last_metric={}, config={}, final={}, rev=0)
    return Job(**{k: v for k, v in fields.items()})
