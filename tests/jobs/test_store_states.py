"""The store and the one transition table: every change is legal and leaves an event."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from core.errors import IllegalTransition
from core.jobs.states import ACTIVE, RESUMABLE, TERMINAL, TRANSITIONS, State, can_move
from core.jobs.schema import MIGRATIONS
from core.jobs.store import Store


def _job(store: Store, n: int = 0):
    return store.insert_job({
        "id": f"{n:032x}", "short_id": f"{n:08x}", "name": "t", "provider": "local",
        "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": f"fp{n}",
        "request": {"script": "a.py"}}, reason="test", actor="test")


def test_the_state_set_is_the_design_and_terminal_states_are_final() -> None:
    assert {s.value for s in State} == {
        "queued", "routing", "awaiting_approval", "provisioning", "running", "checkpointing",
        "migrating", "done", "failed", "cancelled", "denied"}
    assert TERMINAL == {State.DONE, State.FAILED, State.CANCELLED, State.DENIED}
    # done and denied are final; cancelled and failed leave only by a resume (back to routing)
    assert TRANSITIONS[State.DONE] == TRANSITIONS[State.DENIED] == frozenset()
    assert RESUMABLE == {State.FAILED, State.CANCELLED}
    for s in RESUMABLE:
        assert TRANSITIONS[s] == {State.ROUTING}
    assert can_move("running", "checkpointing") and can_move("checkpointing", "running")
    assert can_move("running", "migrating") and can_move("migrating", "provisioning")
    assert not can_move("queued", "running") and not can_move("denied", "provisioning")
    # every non-terminal state can be cancelled: a person can always stop a job
    for s in ACTIVE:
        assert can_move(s, State.CANCELLED), s


def test_transitions_write_events_and_illegal_ones_raise(home: Path) -> None:
    store = Store()
    job = _job(store)
    store.transition(job.id, State.ROUTING, "routed")
    store.transition(job.id, State.PROVISIONING, "placed")
    with pytest.raises(IllegalTransition):
        store.transition(job.id, State.QUEUED, "back")
    with pytest.raises(IllegalTransition):
        store.update(job.id, state="done")
    store.transition(job.id, State.RUNNING, "started")
    done = store.transition(job.id, State.DONE, "exited 0", actor="supervisor")
    assert done.started_at and done.ended_at and done.ended_at >= done.started_at
    events = store.events(job.id)
    assert [(e.src, e.dst) for e in events] == [
        (None, "queued"), ("queued", "routing"), ("routing", "provisioning"),
        ("provisioning", "running"), ("running", "done")]
    assert all(e.reason and e.ts for e in events)
    with pytest.raises(IllegalTransition):
        store.transition(job.id, State.RUNNING, "again")
    with pytest.raises(IllegalTransition):
        store.transition(job.id, State.ROUTING, "a done job is not resumed")
    assert len(store.events(job.id)) == 5  # the refused change left no trace


def test_a_resume_makes_an_ended_job_live_again(home: Path) -> None:
    store = Store()
    job = _job(store, 7)
    store.transition(job.id, State.ROUTING, "routed")
    ended = store.transition(job.id, State.CANCELLED, "cancelled")
    assert ended.ended_at and not ended.active
    again = store.transition(job.id, State.ROUTING, "resumed", cancel_requested=0)
    assert again.active and again.ended_at is None and not again.cancel_requested


def test_wal_mode_and_numbered_migrations(home: Path) -> None:
    store = Store()
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    Store()  # opening again migrates nothing and does not fail


def test_concurrent_writers_never_see_database_is_locked(home: Path) -> None:
    """Read-then-write from many connections: BEGIN IMMEDIATE serialises them."""
    Store()
    errors: list[Exception] = []

    def writer(n: int) -> None:
        try:
            s = Store()
            job = _job(s, n)
            for dst in (State.ROUTING, State.PROVISIONING, State.RUNNING, State.DONE):
                s.transition(job.id, dst, "x")
            s.close()
        except (sqlite3.OperationalError, IllegalTransition) as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(1, 21)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = Store()
    assert len(store.jobs(states=[State.DONE])) == 20


def test_resolve_by_prefix_short_id_and_last(home: Path) -> None:
    store = Store()
    a = _job(store, 0xABC)
    b = _job(store, 0xABD)
    assert store.resolve(a.short_id).id == a.id
    assert store.resolve(b.id).id == b.id
    assert store.resolve("last").id == b.id
    from core.errors import NotFound, UserError

    with pytest.raises(UserError, match="several"):
        store.resolve("00000000000")
    with pytest.raises(NotFound):
        store.resolve("zzzz")
    with pytest.raises(NotFound):
        store.resolve("'; drop table jobs; --")


def test_the_per_target_counts_are_the_jobs_counted(tmp_path: Path) -> None:
    """`count_by_provider` (what a submit's routing reads instead of every queued job) says
    what counting the jobs themselves says, a job with no target under ""."""
    store = Store(tmp_path / "s.db")
    for n, provider in enumerate(["local", "local", "box", None, "box", "local"]):
        job = _job(store, n)
        store.conn.execute("UPDATE jobs SET provider = ? WHERE id = ?", (provider, job.id))
        if n % 2:
            store.transition(job.id, State.ROUTING, "placed", actor="test")
    for states in ([State.ROUTING], [State.QUEUED], [State.QUEUED, State.ROUTING], [State.RUNNING]):
        counted: dict[str, int] = {}
        for job in store.jobs(states=states):
            counted[job.provider or ""] = counted.get(job.provider or "", 0) + 1
        assert store.count_by_provider(states) == counted, states
    assert store.count_by_provider([State.ROUTING]) == {"local": 2, "": 1}
