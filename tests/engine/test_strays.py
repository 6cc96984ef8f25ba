"""The sweep of attempts left behind when a job moved (core/engine/strays.py), on a real store.

The target here is a scripted stand-in for a provider (our own interface, not a client
library): it answers each look with the next phase of a script, so the sweep's decisions can
be followed look by look. The real thing, an sshd host cut off and back, is in test_migrate.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.engine import strays
from core.jobs.store import Store
from core.jobs.storethread import StoreThread
from core.providers.base import Poll


class Scripted:
    def __init__(self, *phases: str) -> None:
        self.phases = list(phases)
        self.cancelled: list[tuple[int, dict]] = []
        self.asked: list[int] = []

    async def poll(self, job) -> Poll:
        self.asked.append(job.attempt)
        phase = self.phases.pop(0)
        if phase == "raise":
            raise OSError("connection refused")
        return Poll(phase, detail="no route to host" if phase == "unreachable" else "")

    async def cancel(self, job, force: bool = False) -> None:
        self.cancelled.append((job.attempt, job.handle))


def _job(store: Store) -> str:
    store.insert_job({"id": "j1" * 16, "short_id": "j1j1j1j1", "name": "t", "project_dir": "/p",
                      "outputs_dir": "/p/runs/j1", "fingerprint": "f", "request": {}, "plan": {},
                      "bundle": {}, "handle": {}}, reason="test", actor="cli")
    return "j1" * 16


def _sweep(store: Store, providers: dict, now: float) -> None:
    db = StoreThread()
    try:
        asyncio.run(strays.sweep(db, store, providers, now))
    finally:
        db.close()


def _notes(store: Store, job_id: str) -> list[str]:
    return [e.reason for e in store.events(job_id) if e.src is None and e.dst is None]


def test_a_stray_is_asked_again_until_its_target_answers_then_stopped_and_confirmed(home: Path) -> None:
    store = Store()
    job_id = _job(store)
    store.add_stray(job_id, 1, "a", {"attempt_dir": "/r/jobs/x/attempts/1"})
    store.add_stray(job_id, 1, "a", {"attempt_dir": "/elsewhere"})  # a second record keeps the first
    target = Scripted("unreachable", "raise", "running", "exited")
    t0 = store.strays()[0].since
    _sweep(store, {"a": target}, t0)
    first = store.strays()[0]
    assert first.tries == 1 and first.next_try == pytest.approx(t0 + strays.FIRST_RETRY_S)
    _sweep(store, {"a": target}, t0 + 1)  # not due yet: not asked
    assert target.asked == [1]
    _sweep(store, {"a": target}, first.next_try)  # an exception is "cannot answer" too
    second = store.strays()[0]
    assert second.next_try - first.next_try == pytest.approx(2 * strays.FIRST_RETRY_S)  # waits longer
    _sweep(store, {"a": target}, second.next_try)  # it answers: still running -> stopped
    assert target.cancelled == [(1, {"attempt_dir": "/r/jobs/x/attempts/1"})]  # the old attempt's handle
    assert store.strays()[0].stop_sent is not None and _notes(store, job_id) == []
    _sweep(store, {"a": target}, store.strays()[0].next_try)  # ended now: forgotten, and said
    assert store.strays() == []
    assert _notes(store, job_id) == ["attempt 1 left on a when the job moved was stopped once a answered again"]


def test_a_stray_that_ended_by_itself_is_forgotten_without_a_stop(home: Path) -> None:
    store = Store()
    job_id = _job(store)
    store.add_stray(job_id, 2, "b", {"attempt_dir": "/r"})
    target = Scripted("lost")
    _sweep(store, {"b": target}, store.strays()[0].since)
    assert target.cancelled == [] and store.strays() == []
    assert "attempt 2 left on b when the job moved had already ended there (lost)" in _notes(store, job_id)


def test_a_target_away_for_days_is_given_up_on_and_a_removed_target_is_waited_for(home: Path) -> None:
    store = Store()
    job_id = _job(store)
    store.add_stray(job_id, 1, "gone", {"attempt_dir": "/r"})
    since = store.strays()[0].since
    _sweep(store, {}, since)  # the target is not configured now: it may be added back
    assert store.strays()[0].tries == 1
    _sweep(store, {"gone": Scripted("unreachable")}, since + strays.GIVE_UP_S + 1)
    assert store.strays() == []
    note = _notes(store, job_id)[-1]
    assert note.startswith("gave up stopping attempt 1 on gone after 7 days") and "by hand" in note
    assert strays.keeps_alive([], since) is False


def test_strays_show_in_daemon_status(home: Path) -> None:
    from core.jobs.states import State
    from tests.conftest import gpu_json, run_gpu

    store = Store()
    job_id = _job(store)
    store.transition(job_id, State.CANCELLED, "ended: its stray outlives it")  # no supervisor starts
    store.add_stray(job_id, 1, "a", {"attempt_dir": "/r"})
    doc = gpu_json("daemon", "--status")
    assert [(s["job"], s["attempt"], s["target"], s["stop_sent"]) for s in doc["strays"]] == [(job_id, 1, "a", False)]
    text = run_gpu("daemon", "--status").stdout
    assert f"attempt 1 of job {job_id[:8]} left on a when it moved: a not answering" in text
