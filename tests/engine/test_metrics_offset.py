"""Where the read of a job's metrics begins after a move (core/engine/jobsteps.py:
metrics_offset_for). Each target reads one file that only grows: home's metrics.jsonl (the
local target appends to it; Kaggle, Modal and SkyPilot mirror their attempts' rows into it) or
a remote host's own file. A move that started the read at 0 stored every earlier row again
(tests/providers/test_modal.py runs the move between two Modal targets end to end); one that
skipped to the end of a file would lose its rows not read yet.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from core import paths
from core.engine.jobsteps import metrics_offset_for
from core.jobs.states import State
from core.jobs.store import Job, Store
from core.providers.local import LocalProvider
from core.providers.logmirror import MirroredLog


class Mirrored(MirroredLog):
    """A Modal- or Kaggle-like target: the real mixin, whose read_metrics reads home's file."""

    def __init__(self, name: str) -> None:
        self.name = name


class Host:
    """An SSH host's target as the rule sees it: a name and its own file there."""

    def __init__(self, name: str) -> None:
        self.name = name


def _job(store: Store) -> Job:
    jid = "cd" * 16
    store.insert_job({"id": jid, "short_id": jid[:8], "name": "t", "provider": "local",
                      "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": "f",
                      "request": {"script": "a.py"}, "plan": {"hours": 1}}, reason="t", actor="t")
    return store.transition(jid, State.ROUTING, "t", attempt=1)


def _move(job: Job, src, dst, carried: dict, read_to: int) -> tuple[Job, int]:
    """The job read up to `read_to` on `src`, then moved to `dst`: the offset it starts at."""
    job = replace(job, metrics_offset=read_to, handle=dict(carried))
    start = metrics_offset_for(job, src, dst, carried)
    return job, start


def test_each_file_is_read_on_from_where_its_own_read_stopped(home: Path) -> None:
    job = _job(Store())
    here, md, md2, a, b = LocalProvider(), Mirrored("md"), Mirrored("md2"), Host("a"), Host("b")
    carried: dict = {}
    # 120 bytes read at home, then on Modal: the same file, read on from byte 120
    job, start = _move(job, here, md, carried, read_to=120)
    assert start == 120
    # Modal read home's file to 200; host a's own file starts empty
    job, start = _move(job, md, a, carried, read_to=200)
    assert start == 0
    # a read 700 of its file, b starts empty, and back on a its 700 bytes are not read again
    job, start = _move(job, a, b, carried, read_to=700)
    assert start == 0
    job, start = _move(job, b, a, carried, read_to=300)
    assert start == 700
    # from a (now 900) to another Modal target: home's file goes on at 200, where md stopped,
    # so rows mirrored there after md's last read (its last moments) are still read
    job, start = _move(job, a, md2, carried, read_to=900)
    assert start == 200
    assert carried["metrics_offsets"] == {"home": 200, "a": 900, "b": 300}


def test_a_file_at_home_never_read_under_the_rule_goes_on_at_its_end(home: Path) -> None:
    """A job moved before this rule (no offsets carried), or from a target since removed: the
    rows home's file holds came from attempts already read, so the read starts at its end."""
    job = _job(Store())
    f = paths.jobs_dir() / job.id / "metrics.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b'{"step":0,"loss":1.0}\n' * 3)
    job, start = _move(job, Host("a"), Mirrored("md"), {}, read_to=500)
    assert start == f.stat().st_size
    job, start = _move(job, None, LocalProvider(), {}, read_to=500)
    assert start == f.stat().st_size
    job, start = _move(job, None, Host("b"), {}, read_to=500)
    assert start == 0
