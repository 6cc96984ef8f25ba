"""The one table of legal transitions, pinned whole (issue 40).

Every (from, to) pair of states is allowed exactly when the table written out here says so: a
row added to core/jobs/states.py (awaiting_approval -> running would skip the launch's own
judgment) or removed fails this test until the table here is changed with it. The store obeys
the same table: every pair is tried through `Store.transition`.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from core.jobs.states import ACTIVE, LAUNCHED, RESUMABLE, SUPERVISED, TERMINAL, TRANSITIONS, State, can_move

ALLOWED = {
    "queued": {"routing", "cancelled", "failed"},
    "routing": {"awaiting_approval", "provisioning", "queued", "failed", "cancelled"},
    "awaiting_approval": {"provisioning", "routing", "denied", "cancelled", "failed"},
    "provisioning": {"running", "migrating", "done", "failed", "cancelled"},
    "running": {"checkpointing", "migrating", "awaiting_approval", "done", "failed", "cancelled"},
    "checkpointing": {"running", "migrating", "awaiting_approval", "done", "failed", "cancelled"},
    "migrating": {"provisioning", "routing", "awaiting_approval", "failed", "cancelled"},
    "done": set(),
    "failed": {"routing"},
    "cancelled": {"routing"},
    "denied": set(),
}
STATES = [s.value for s in State]
PAIRS = list(itertools.product(STATES, STATES))


def test_the_states_are_the_ones_written_here() -> None:
    assert set(STATES) == set(ALLOWED)
    assert {s.value for s in TRANSITIONS} == set(ALLOWED)


@pytest.mark.parametrize("src, dst", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_is_allowed_exactly_as_written(src: str, dst: str) -> None:
    expected = dst in ALLOWED[src]
    assert can_move(src, dst) is expected, (
        f"{src} -> {dst} is {'allowed' if can_move(src, dst) else 'refused'} by core/jobs/states.py, "
        f"{'allowed' if expected else 'refused'} by the table written here")


def test_the_sets_derived_from_the_table() -> None:
    assert {s.value for s in TERMINAL} == {"done", "failed", "cancelled", "denied"}
    assert {s.value for s in RESUMABLE} == {"failed", "cancelled"}
    assert {s.value for s in LAUNCHED} == {"provisioning", "running", "checkpointing"}
    assert {s.value for s in ACTIVE} == set(STATES) - {"done", "failed", "cancelled", "denied"}
    assert {s.value for s in SUPERVISED} == {s.value for s in ACTIVE} - {"awaiting_approval"}


def test_a_held_job_reaches_running_only_through_provisioning() -> None:
    """The mutation experiment's case: awaiting_approval -> running skips the launch's judgment."""
    assert not can_move("awaiting_approval", "running")
    assert not can_move("routing", "running")
    assert not can_move("queued", "running")
    assert can_move("awaiting_approval", "provisioning")


def test_the_store_obeys_the_table_for_every_pair(home: Path) -> None:
    """Store.transition refuses every pair the table refuses, and takes every pair it allows."""
    from core.jobs.store import IllegalTransition, Store

    store = Store()
    n = 0
    # how to bring a fresh job to each state through allowed moves only
    path_to = {
        "queued": [], "routing": ["routing"], "awaiting_approval": ["routing", "awaiting_approval"],
        "provisioning": ["routing", "provisioning"], "running": ["routing", "provisioning", "running"],
        "checkpointing": ["routing", "provisioning", "running", "checkpointing"],
        "migrating": ["routing", "provisioning", "running", "migrating"],
        "done": ["routing", "provisioning", "running", "done"], "failed": ["failed"],
        "cancelled": ["cancelled"], "denied": ["routing", "awaiting_approval", "denied"],
    }
    for src, dst in PAIRS:
        n += 1
        jid = f"{n:04d}beef" + "0" * 24
        store.insert_job({"id": jid, "short_id": jid[:8], "name": "t", "provider": "local",
                          "project_dir": "/p", "outputs_dir": "/p/runs", "fingerprint": f"f{n}",
                          "request": {"script": "a.py"}, "plan": {"target": "local"}},
                         reason="submitted", actor="test")
        for step in path_to[src]:
            store.transition(jid, State(step), "setting up", actor="test")
        assert store.get(jid).state == src
        if dst in ALLOWED[src]:
            store.transition(jid, State(dst), "allowed", actor="test")
            assert store.get(jid).state == dst
        else:
            with pytest.raises(IllegalTransition):
                store.transition(jid, State(dst), "not allowed", actor="test")
            assert store.get(jid).state == src, f"{src} -> {dst} changed the job"
