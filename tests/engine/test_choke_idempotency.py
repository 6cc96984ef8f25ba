"""Idempotent submits, one test per part of the rule (issue 40; core/engine/service.py
`fingerprint` and `_insert_once`, core/jobs/store.py `find_active`; docs/reference/configuration.md
`request_id`):

- the same request_id returns the job it made, whatever that job's state, and never makes a
  second, also when many submits race;
- the same request_id with a different request is refused, naming the key and the job; what
  counts as "the same request" is the fingerprint: every field of the request and the bundle's
  hash, except wait_s, verbose and request_id itself;
- without a request_id an identical request returns the live job (queued, running, held ...),
  and once that job ended the same request makes a new one; a request_id'd job never answers
  a request without one.

Quick: the real submit (`service.submit`) and the real store, with the packing and routing
(`prepare`) replaced by a fixed bundle and plan; no supervisor is started.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples
from tests.stubs import at_once

from core.config.request import JobRequest
from core.engine import service
from core.errors import UserError
from core.jobs.states import TERMINAL, State
from core.jobs.store import Store
from core.planning.plan import canonical_bytes

NOT_FINGERPRINTED = {"wait_s", "verbose", "request_id"}


class FakeBundle:
    """What submit reads of a bundle: its hash, root and summary."""

    def __init__(self, digest: str, root: Path) -> None:
        self.hash = digest
        self.root = root
        self.project_rel = ""

    def summary(self) -> dict:
        return {"files": 1, "bytes": 10}


@pytest.fixture
def submitting(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`submit(req, bundle_hash=...)`: the real submit over a fixed bundle and a plan no rule
    holds, in this test's home."""
    project = tmp_path / "project"
    project.mkdir()

    def submit(req: JobRequest, bundle_hash: str = "b" * 64, store: Store | None = None):
        plan = {"target": "local", "reasons": ["test"], "passed_over": [], "holds": [],
                "digest": "d" * 64, "submitted_by": "person"}
        monkeypatch.setattr(service, "prepare", lambda *a, **k: (FakeBundle(bundle_hash, project), plan))
        return service.submit(req, actor="tester", interactive=True, store=store,
                              start_supervisor=False)

    return project, submit


def request(project: Path, **fields) -> JobRequest:
    return JobRequest(project_dir=str(project), script="train.py", wait_s=0, **fields)


def job_count(store: Store | None = None) -> int:
    s = store or Store()
    return s.conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]


def end(job_id: str, state: State = State.CANCELLED) -> None:
    store = Store()
    store.conn.execute("UPDATE jobs SET state = ? WHERE id = ?", (state.value, job_id))
    store.conn.commit()


# -- request_id ------------------------------------------------------------------------------

def test_the_same_request_id_returns_the_same_job(submitting) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="train-3"))
    again = submit(request(project, request_id="train-3"))
    assert (first.submitted, again.submitted) == (True, False)
    assert again.job.id == first.job.id
    assert job_count() == 1


@pytest.mark.parametrize("state", sorted(TERMINAL, key=lambda s: s.value))
def test_the_same_request_id_returns_its_job_after_it_ended(submitting, state: State) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="r1"))
    end(first.job.id, state)
    again = submit(request(project, request_id="r1"))
    assert again.submitted is False and again.job.id == first.job.id and again.job.state == state
    assert job_count() == 1


def test_wait_and_verbose_do_not_make_another_request(submitting) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="r1"))
    again = submit(JobRequest(project_dir=str(project), script="train.py", wait_s=30, verbose=True,
                              request_id="r1"))
    assert again.submitted is False and again.job.id == first.job.id


def test_a_different_request_under_the_same_id_is_refused_with_its_reason(submitting) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="r1", hours=0.1))
    with pytest.raises(UserError) as err:
        submit(request(project, request_id="r1", hours=0.5))
    assert err.value.what == (f"request_id 'r1' was already used for a different request "
                              f"(job {first.job.short_id})")
    assert err.value.fix == ("use a new request_id for a new job, or resubmit the original "
                             "request unchanged")
    assert job_count() == 1


def test_another_bundle_under_the_same_id_is_refused(submitting) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="r1"), bundle_hash="1" * 64)
    with pytest.raises(UserError) as err:
        submit(request(project, request_id="r1"), bundle_hash="2" * 64)
    assert err.value.what == (f"request_id 'r1' was already used for a different request "
                              f"(job {first.job.short_id})")
    assert job_count() == 1


def test_another_request_id_is_another_job(submitting) -> None:
    project, submit = submitting
    a = submit(request(project, request_id="r1"))
    b = submit(request(project, request_id="r2"))
    assert b.submitted is True and b.job.id != a.job.id
    assert job_count() == 2


def test_racing_submits_with_one_request_id_make_one_job(submitting) -> None:
    project, submit = submitting
    req = request(project, request_id="race")
    submit(request(project, request_id="warm-up"))  # the store's schema made before the race

    def one() -> tuple:
        store = Store()
        try:
            return service._insert_once(
                store, req, {"target": "local", "reasons": [], "passed_over": [], "holds": [],
                             "digest": "d" * 64, "submitted_by": "person"},
                FakeBundle("b" * 64, project), service.fingerprint(req, "b" * 64), {}, req.to_json(),
                "tester")
        finally:
            store.close()

    results, errors = at_once(one)
    assert errors == []
    assert len({job.id for job, _ in results}) == 1
    assert sorted(made for _, made in results) == [False] * 7 + [True]
    assert job_count() == 2


def test_the_store_itself_refuses_a_second_job_with_one_request_id(home: Path) -> None:
    import sqlite3

    store = Store()
    row = {"provider": "local", "project_dir": "/p", "outputs_dir": "/p/runs/x", "name": "t",
           "request_id": "k", "fingerprint": "fp", "request": {}, "plan": {}, "bundle": {}, "handle": {}}
    store.insert_job({**row, "id": "1" * 32, "short_id": "11111111"}, reason="t", actor="t")
    with pytest.raises(sqlite3.IntegrityError) as err:
        store.insert_job({**row, "id": "2" * 32, "short_id": "22222222"}, reason="t", actor="t")
    assert "jobs.request_id" in str(err.value)


# -- without a request_id: an identical live request ------------------------------------------

def test_an_identical_live_request_returns_the_live_job(submitting) -> None:
    project, submit = submitting
    first = submit(request(project))
    again = submit(request(project))
    assert again.submitted is False and again.job.id == first.job.id
    assert "returned it instead of starting a second copy" in again.guidance["note"]


@pytest.mark.parametrize("state", sorted(TERMINAL, key=lambda s: s.value))
def test_once_the_job_ended_the_same_request_makes_a_new_one(submitting, state: State) -> None:
    project, submit = submitting
    first = submit(request(project))
    end(first.job.id, state)
    again = submit(request(project))
    assert again.submitted is True and again.job.id != first.job.id


def test_every_live_state_answers_an_identical_request(submitting) -> None:
    project, submit = submitting
    first = submit(request(project))
    for state in sorted(set(State) - TERMINAL, key=lambda s: s.value):
        end(first.job.id, state)
        again = submit(request(project))
        assert again.submitted is False and again.job.id == first.job.id, state


def test_a_request_id_job_does_not_answer_a_request_without_one(submitting) -> None:
    project, submit = submitting
    keyed = submit(request(project, request_id="r1"))
    plain = submit(request(project))
    assert plain.submitted is True and plain.job.id != keyed.job.id


def test_a_changed_bundle_without_a_request_id_is_a_new_job(submitting) -> None:
    project, submit = submitting
    a = submit(request(project), bundle_hash="1" * 64)
    b = submit(request(project), bundle_hash="2" * 64)
    assert b.submitted is True and b.job.id != a.job.id


# -- the fingerprint: what "the same request" is ----------------------------------------------

def changed(value):
    """Another value of a request field's kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, {"k": 1}]
    if isinstance(value, dict):
        return {**value, "K": "1"}
    return "set"  # None


FIELDS = [f.name for f in dataclasses.fields(JobRequest)]


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_but_three_changes_the_fingerprint(name: str) -> None:
    base = JobRequest(project_dir="/p", script="train.py")
    other = dataclasses.replace(base, **{name: changed(getattr(base, name))})
    same = service.fingerprint(base, "b" * 64) == service.fingerprint(other, "b" * 64)
    assert same is (name in NOT_FINGERPRINTED), name


def test_the_bundle_hash_is_part_of_the_fingerprint() -> None:
    req = JobRequest(project_dir="/p", script="train.py")
    assert service.fingerprint(req, "a" * 64) != service.fingerprint(req, "b" * 64)


def test_the_fingerprint_of_a_plain_job_is_the_one_it_always_had() -> None:
    """sweep and max_parallel unset leave no trace (fingerprints made before they existed still
    match); set, they count."""
    req = JobRequest(project_dir="/p", script="train.py")
    doc = req.to_json()
    for key in ("wait_s", "verbose", "request_id", "sweep", "max_parallel"):
        doc.pop(key)
    doc["bundle_hash"] = "b" * 64
    assert service.fingerprint(req, "b" * 64) == hashlib.sha256(canonical_bytes(doc)).hexdigest()
    assert service.fingerprint(dataclasses.replace(req, max_parallel=2), "b" * 64) != \
        service.fingerprint(req, "b" * 64)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=6),
       hours=st.lists(st.sampled_from([0.1, 0.2]), min_size=6, max_size=6))
def test_any_run_of_submits_makes_one_job_per_key_and_refuses_changed_requests(
        tmp_path_factory, monkeypatch_session, keys: list, hours: list) -> None:
    """A model of the rule: per request_id the first request's hours stick (the same: its job;
    other hours: refused); without one, the live job with those hours (or a new one)."""
    import os

    home = tmp_path_factory.mktemp("home")
    monkeypatch_session.setenv("GPU_ROUTER_HOME", str(home))
    project = tmp_path_factory.mktemp("project")
    plan = {"target": "local", "reasons": ["t"], "passed_over": [], "holds": [], "digest": "d" * 64,
            "submitted_by": "person"}
    monkeypatch_session.setattr(service, "prepare", lambda *a, **k: (FakeBundle("b" * 64, project), plan))
    by_key: dict = {}
    plain: dict = {}
    store = Store()
    try:
        for key, h in zip(keys, hours):
            req = request(project, request_id=key, hours=h)
            try:
                got = service.submit(req, actor="t", interactive=True, store=store, start_supervisor=False)
                said = ("job", got.job.id, got.submitted)
            except UserError as exc:
                said = ("refused", exc.what)
            if key is None:
                expected = ("job", plain[h], False) if h in plain else ("job", said[1], True)
                plain.setdefault(h, said[1])
            elif key in by_key:
                first_h, first_id = by_key[key]
                expected = ("job", first_id, False) if h == first_h else (
                    "refused", f"request_id {key!r} was already used for a different request "
                               f"(job {first_id[:8]})")
            else:
                expected = ("job", said[1], True)
                by_key[key] = (h, said[1])
            assert said == expected, (key, h)
        assert job_count(store) == len(by_key) + len(plain)
    finally:
        store.close()
        assert os.environ["GPU_ROUTER_HOME"] == str(home)


@pytest.fixture
def monkeypatch_session(home: Path):
    """One monkeypatch for all of a property's examples (the home fixture's variables stay)."""
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


# -- the one job a submit records ------------------------------------------------------------------

def test_the_job_recorded_is_the_request_its_plan_and_bundle(submitting) -> None:
    project, submit = submitting
    req = request(project, request_id="r9", hours=0.25, name="train-big")
    got = submit(req, bundle_hash="c" * 64)
    job = Store().get(got.job.id)
    assert len(job.id) == 32 and all(c in "0123456789abcdef" for c in job.id)
    assert job.short_id == job.id[:8]
    assert (job.name, job.provider, job.project_dir) == ("train-big", "local", str(project))
    assert job.outputs_dir == str(project / "runs" / job.short_id)
    assert (job.request_id, job.fingerprint) == ("r9", service.fingerprint(req, "c" * 64))
    doc = req.to_json()
    doc.pop("wait_s")
    doc.pop("verbose")
    assert job.request == doc
    assert (job.digest, job.bundle_hash) == ("d" * 64, "c" * 64)
    assert job.bundle == {"files": 1, "bytes": 10, "hash": "c" * 64, "root": str(project), "project_rel": ""}
    assert job.state == State.ROUTING
    events = [(e.reason, e.actor) for e in Store().events(job.id)]
    assert events[:2] == [("submitted by tester", "tester"), ("test", "tester")]


def test_a_held_plan_records_the_job_held(submitting, monkeypatch: pytest.MonkeyPatch) -> None:
    project, _ = submitting
    plan = {"target": "local", "reasons": ["a", "b"], "passed_over": [{"target": "x"}], "digest": "d" * 64,
            "submitted_by": "person", "holds": [{"rule": "cost", "reason": "costs more than $5"}]}
    monkeypatch.setattr(service, "prepare", lambda *a, **k: (FakeBundle("b" * 64, project), plan))
    got = service.submit(request(project), actor="tester", interactive=True, start_supervisor=False)
    assert got.submitted is True and got.job.state == State.AWAITING_APPROVAL
    routed = [e for e in Store().events(got.job.id) if e.reason == "a; b"]
    assert [e.data for e in routed] == [{"target": "local", "passed_over": [{"target": "x"}]}]


def test_a_short_id_already_taken_is_drawn_again(submitting, monkeypatch: pytest.MonkeyPatch) -> None:
    project, submit = submitting
    first = submit(request(project, request_id="one"))
    taken = bytes.fromhex(first.job.id)
    draws = iter([taken[:4] + b"\x00" * 12, bytes(range(16))])
    monkeypatch.setattr(service.os, "urandom", lambda n: next(draws))
    second = submit(request(project, request_id="two"))
    assert second.job.id == bytes(range(16)).hex()
    assert second.job.short_id == "00010203" != first.job.short_id


def test_an_agents_submit_is_counted_in_its_day_inside_the_insert(submitting, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's day is read and counted in the same transaction as the insert: a start that
    fits is counted (why: submitted); one that would pass the day's hours is held by rule, by
    the submitter, and not counted."""
    project, _ = submitting

    def submit_agents(hours: float, script: str):
        plan = {"target": "local", "reasons": ["t"], "passed_over": [], "holds": [], "digest": "d" * 64,
                "submitted_by": "agent", "hours": hours}
        monkeypatch.setattr(service, "prepare", lambda *a, **k: (FakeBundle("b" * 64, project), plan))
        return service.submit(JobRequest(project_dir=str(project), script=script, wait_s=0, hours=hours),
                              actor="an agent", interactive=False, start_supervisor=False)

    first = submit_agents(2.0, "a.py")
    counted = [(e.reason, e.actor, e.data) for e in Store().events(first.job.id) if "agent's day" in e.reason]
    assert counted == [("counted against the agent's day: 2 h, $0.00 (submitted)", "an agent",
                        {"agent_start": {"hours": 2.0, "usd": 0.0, "why": "submitted"}})]
    assert first.job.state == State.ROUTING
    second = submit_agents(11.0, "b.py")
    assert second.submitted is True and second.job.state == State.AWAITING_APPROVAL
    job = Store().get(second.job.id)
    reason = ("the work agents started without you in the last 24 hours comes to 2 hours and $0.00 "
              "(1 start), and this one's 11 hours and $0.00 would pass the 12-hour daily limit "
              "(approvals.agent_daily_hours)")
    assert job.plan["holds"] == [{"rule": "agent_day", "reason": reason}]
    assert job.plan["hold_kind"] == "rules"
    held = [(e.reason, e.actor, e.data.get("kind"), e.data.get("holds")) for e in Store().events(job.id)
            if e.reason.startswith("held for approval:")]
    assert held == [(f"held for approval: {reason}", "an agent", "rules", [{"rule": "agent_day", "reason": reason}])]
    assert [e for e in Store().events(job.id) if "agent's day" in e.reason] == []
