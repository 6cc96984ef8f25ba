"""Idempotent sweeps, one test per part of the rule (issue 40; core/engine/sweeps.py
`submit_group` and `_insert_once`, core/jobs/groups.py `find_active_group`, the fingerprint of
core/engine/service.py; docs/sweeps.md "a `request_id` names the group"):

- the same request_id returns the group it made, whatever its points' states, and never makes
  a second, also when many submits race;
- the same request_id with a different sweep is refused, naming the key and the group; what
  counts as "the same sweep" is the fingerprint of the whole request: every field, the sweep's
  points (keys, values, their order) and max_parallel, and the bundle's hash, except wait_s,
  verbose and request_id itself;
- without a request_id an identical sweep returns the group while any one of its points is
  live, and once every point ended the same sweep makes a new group; a request_id'd group never
  answers a request without one;
- one request_id names one thing: a sweep's request_id is refused to a plain submit, and a plain
  job's to a sweep (each would otherwise make a second thing under the key).

Quick: the real submit (`sweeps.submit`, which sends a sweep to `submit_group` and any other
request to `service.submit`) and the real store, with the packing and routing (`plan_group`,
`service.prepare`) replaced by a fixed bundle and plans; no supervisor is started.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples
from tests.engine.test_choke_idempotency import FakeBundle
from tests.stubs import at_once

from core.config.request import JobRequest
from core.config.sweep import point_request
from core.engine import service, sweeps
from core.errors import UserError
from core.jobs.states import ACTIVE, TERMINAL, State
from core.jobs.store import Store

NOT_FINGERPRINTED = {"wait_s", "verbose", "request_id"}
SWEEP = [{"LR": 0.1}, {"LR": 0.01}, {"LR": 0.001}]
LIVE = sorted(ACTIVE, key=lambda s: s.value)
THREE_STATES = st.lists(st.sampled_from(sorted(State, key=lambda s: s.value)), min_size=3, max_size=3)  # a sweep's points
ENDED = sorted(TERMINAL, key=lambda s: s.value)


def fixed_plan(req: JobRequest) -> dict:
    """One point's (or one job's) plan: local, no rule holds it, a digest of its request."""
    digest = hashlib.sha256(repr(sorted(req.env.items())).encode()).hexdigest()
    return {"target": "local", "reasons": ["test", "routed"], "passed_over": [], "holds": [], "digest": digest,
            "submitted_by": "person", "command": req.command()}


def fixed_group_plan(project: Path, bundle_hash: str, by: str = "person",
                     hours: list[float] | None = None, smoke: bool = False,
                     holds: list[dict] | None = None) -> Callable[..., Any]:
    """`plan_group` over a fixed bundle: each point made by the real `point_request`, placed on
    local (`hours`: each point's), the group's digest made as plan_group makes it, held by `holds`."""

    def plan_group(req: JobRequest, **_: Any) -> tuple:
        reqs, plans = [], []
        for n, point in enumerate(req.sweep or [], start=1):
            preq = point_request(req, point, number=n)
            plan = {**fixed_plan(preq), "point": point, "submitted_by": by, "smoke": smoke,
                    "hours": None if hours is None else hours[n - 1]}
            reqs.append(preq)
            plans.append(plan)
        gplan = {"points": list(req.sweep or []), "targets": {"local": len(plans)},
                 "hours": None if hours is None else sum(hours),
                 "estimated_price": 0, "holds": list(holds or []), "submitted_by": by,
                 "command": plans[0]["command"], "max_parallel": req.max_parallel,
                 "digest": sweeps.group_digest([p["digest"] for p in plans], req.max_parallel)}
        return FakeBundle(bundle_hash, project), reqs, plans, gplan

    return plan_group


def use_bundle(monkeypatch: pytest.MonkeyPatch, project: Path, bundle_hash: str = "b" * 64,
               **group: Any) -> None:
    """Packing and routing replaced, for a sweep and for a plain job alike."""
    monkeypatch.setattr(sweeps, "plan_group", fixed_group_plan(project, bundle_hash, **group))
    monkeypatch.setattr(service, "prepare",
                        lambda req, **k: (FakeBundle(bundle_hash, project), fixed_plan(req)))


@pytest.fixture
def submitting(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`submit(req, bundle_hash=...)`: the real submit of every front (`sweeps.submit`) over a
    fixed bundle and plans, in this test's home."""
    project = tmp_path / "project"
    project.mkdir()

    def submit(req: JobRequest, bundle_hash: str = "b" * 64, store: Store | None = None, **group: Any):
        use_bundle(monkeypatch, project, bundle_hash, **group)
        return sweeps.submit(req, actor="tester", interactive=group.get("by", "person") == "person",
                             store=store, start_supervisor=False)

    return project, submit


def sweep_request(project: Path, sweep: list[dict] | None = None, **fields: Any) -> JobRequest:
    return JobRequest(project_dir=str(project), script="train.py", wait_s=0,
                      sweep=[dict(p) for p in (SWEEP if sweep is None else sweep)], **fields)


def plain_request(project: Path, **fields: Any) -> JobRequest:
    return JobRequest(project_dir=str(project), script="train.py", wait_s=0, **fields)


def counts(store: Store | None = None) -> tuple[int, int]:
    """(groups, jobs) in the store."""
    s = store or Store()
    return (s.conn.execute("SELECT COUNT(*) FROM groups").fetchone()[0],
            s.conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])


def set_states(group_id: str, states: list[State]) -> None:
    """Each point of the group put in the state given for it, in order."""
    store = Store()
    jobs = store.group_jobs(group_id)
    assert len(jobs) == len(states)
    for job, state in zip(jobs, states):
        store.conn.execute("UPDATE jobs SET state = ? WHERE id = ?", (state.value, job.id))
    store.conn.commit()
    store.close()


def refusal(key: str, group_short: str) -> str:
    return f"request_id {key!r} was already used for a different sweep (group {group_short})"


def note(short: str, live: bool) -> str:
    """What a returned sweep's guidance says: its live points, or that every point ended (the
    note once said "still has live points" of a group whose points had all ended)."""
    if live:
        return (f"sweep {short} with the same request still has live points: returned it instead of "
                "starting a second copy")
    return (f"sweep {short} with the same request_id already ended (every point): returned it instead "
            "of running it again; use a new request_id to run it again")


# -- request_id ------------------------------------------------------------------------------


def fresh_world(tmp_path_factory, monkeypatch_session) -> Path:
    """A new data folder and project for one example of a property (function-scoped fixtures
    are made once per test, not per example): the project, its bundle and plans fixed."""
    monkeypatch_session.setenv("GPU_ROUTER_HOME", str(tmp_path_factory.mktemp("home")))
    project = tmp_path_factory.mktemp("project")
    use_bundle(monkeypatch_session, project)
    return project

def test_the_same_request_id_returns_the_same_group_and_its_points(submitting) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="sweep-3"))
    again = submit(sweep_request(project, request_id="sweep-3"))
    assert (first.submitted, again.submitted) == (True, False)
    assert again.group.id == first.group.id
    assert [j.id for j in again.jobs] == [j.id for j in first.jobs]
    assert [j.plan["point"] for j in again.jobs] == SWEEP
    assert counts() == (1, 3)
    assert again.guidance["note"] == note(first.group.short_id, live=True)


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=THREE_STATES)
def test_the_same_request_id_returns_its_group_whatever_its_points_states(
        tmp_path_factory, monkeypatch_session, states: list[State]) -> None:
    project = fresh_world(tmp_path_factory, monkeypatch_session)
    first = sweeps.submit(sweep_request(project, request_id="k"), actor="t", interactive=True,
                          start_supervisor=False)
    set_states(first.group.id, states)
    again = sweeps.submit(sweep_request(project, request_id="k"), actor="t", interactive=True,
                          start_supervisor=False)
    assert again.submitted is False, states
    assert again.group.id == first.group.id, states
    assert [(j.id, j.state) for j in again.jobs] == [(j.id, s) for j, s in zip(first.jobs, states)]
    assert counts() == (1, 3), states
    assert again.guidance["note"] == note(first.group.short_id, live=any(s in ACTIVE for s in states)), states


@pytest.mark.parametrize("state", ENDED, ids=lambda s: s.value)
def test_a_group_returned_after_every_point_ended_says_so(submitting, state: State) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="r1"))
    set_states(first.group.id, [state, State.DONE, State.FAILED])
    again = submit(sweep_request(project, request_id="r1"))
    assert again.submitted is False and again.group.id == first.group.id
    assert again.guidance["note"] == note(first.group.short_id, live=False)


def test_wait_and_verbose_do_not_make_another_sweep(submitting) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="r1"))
    again = submit(dataclasses.replace(sweep_request(project, request_id="r1"), wait_s=30, verbose=True))
    assert again.submitted is False and again.group.id == first.group.id
    assert counts() == (1, 3)


def changed(name: str, value: Any) -> Any:
    """Another value of a request field that a sweep's points still accept."""
    if name == "sweep":
        return [*value, {"LR": 0.5}]
    if name == "max_parallel":
        return 2
    if name == "script":
        return "other.py"
    if name == "project_dir":
        return value  # changed by the caller: the project is the bundle's
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if name in ("env",):
        return {**value, "OTHER": "1"}
    if name == "data":
        return [{"source": "hf://datasets/a/b", "mount": "data"}]
    if name == "kill_rules":
        return [{"metric": "loss", "above": 10.0}]
    if name == "retry_on_exit_codes":
        return [3]
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "K": "1"}
    return {"checkpoint": "ckpt", "provider": "local", "name": "big", "gpu": "H100", "partition": "gpu",
            "container": "img.sif", "image": "python:3.12"}.get(name, 1)  # None: set


FIELDS = [f.name for f in dataclasses.fields(JobRequest)]


@pytest.mark.parametrize("name", sorted(set(FIELDS) - NOT_FINGERPRINTED))
def test_every_field_changed_under_the_same_request_id_is_refused(submitting, name: str) -> None:
    """One field of the request changed (any but wait_s, verbose and request_id) is another
    sweep: refused under the first one's key, naming the key and the group; nothing is made."""
    project, submit = submitting
    base = sweep_request(project, request_id="r1", hours=0.1)
    first = submit(base)
    if name == "project_dir":
        other_dir = project.parent / "other"
        other_dir.mkdir()
        other = dataclasses.replace(base, project_dir=str(other_dir))
    else:
        other = dataclasses.replace(base, **{name: changed(name, getattr(base, name))})
    assert service.fingerprint(other, "b" * 64) != service.fingerprint(base, "b" * 64), name
    with pytest.raises(UserError) as err:
        submit(other)
    assert err.value.what == refusal("r1", first.group.short_id), name
    assert err.value.fix == "use a new request_id for a new sweep, or resubmit the original unchanged"
    assert counts() == (1, 3), name


@pytest.mark.parametrize("sweep, max_parallel, why", [
    ([{"LR": 0.1}, {"LR": 0.01}, {"LR": 0.002}], None, "a value changed"),
    ([{"LR": "0.1"}, {"LR": 0.01}, {"LR": 0.001}], None, "a number given as text"),
    ([{"lr": 0.1}, {"lr": 0.01}, {"lr": 0.001}], None, "the axis renamed"),
    ([{"LR": 0.1, "B": 1}, {"LR": 0.01, "B": 1}, {"LR": 0.001, "B": 1}], None, "an axis added"),
    ([{"LR": 0.1}, {"LR": 0.01}], None, "a point dropped"),
    ([{"LR": 0.1}, {"LR": 0.01}, {"LR": 0.001}, {"LR": 1}], None, "a point added"),
    ([{"LR": 0.001}, {"LR": 0.01}, {"LR": 0.1}], None, "the points reordered"),
    (SWEEP, 1, "max_parallel set"),
])
def test_a_changed_sweep_under_the_same_request_id_is_refused(
        submitting, sweep: list[dict], max_parallel: int | None, why: str) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="r1"))
    with pytest.raises(UserError) as err:
        submit(sweep_request(project, sweep, request_id="r1", max_parallel=max_parallel))
    assert err.value.what == refusal("r1", first.group.short_id), why
    assert counts() == (1, 3), why


def test_max_parallel_changed_under_the_same_request_id_is_refused(submitting) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="r1", max_parallel=1))
    with pytest.raises(UserError) as err:
        submit(sweep_request(project, request_id="r1", max_parallel=2))
    assert err.value.what == refusal("r1", first.group.short_id)
    assert counts() == (1, 3)


def test_another_bundle_under_the_same_request_id_is_refused(submitting) -> None:
    project, submit = submitting
    first = submit(sweep_request(project, request_id="r1"), bundle_hash="1" * 64)
    with pytest.raises(UserError) as err:
        submit(sweep_request(project, request_id="r1"), bundle_hash="2" * 64)
    assert err.value.what == refusal("r1", first.group.short_id)
    assert counts() == (1, 3)


def test_another_request_id_is_another_group(submitting) -> None:
    project, submit = submitting
    a = submit(sweep_request(project, request_id="r1"))
    b = submit(sweep_request(project, request_id="r2"))
    assert b.submitted is True and b.group.id != a.group.id
    assert not {j.id for j in a.jobs} & {j.id for j in b.jobs}
    assert counts() == (2, 6)


def test_racing_sweeps_with_one_request_id_make_one_group(submitting) -> None:
    """Eight threads, each with its own connection, insert the same sweep at once: one group of
    three points, seven answered with it."""
    project, submit = submitting
    submit(sweep_request(project, request_id="warm-up"))  # the store's schema made before the race
    req = sweep_request(project, request_id="race")
    bundle, reqs, plans, gplan = sweeps.plan_group(req)
    fp = service.fingerprint(req, bundle.hash)

    def one() -> tuple:
        store = Store()
        try:
            group, jobs, made = sweeps._insert_once(
                store, req, reqs, [dict(p) for p in plans], dict(gplan), bundle, fp, bundle.summary(), "tester")
            return group.id, [j.id for j in jobs], made
        finally:
            store.close()

    results, errors = at_once(one)
    assert errors == []
    assert len({group for group, _, _ in results}) == 1
    assert len({tuple(jobs) for _, jobs, _ in results}) == 1 and len(results[0][1]) == 3
    assert sorted(made for _, _, made in results) == [False] * 7 + [True]
    assert counts() == (2, 6)


def test_the_store_itself_refuses_a_second_group_with_one_request_id(home: Path) -> None:
    store = Store()
    row = {"name": "s", "created_at": 1.0, "project_dir": "/p", "request_id": "k", "fingerprint": "fp",
           "digest": "d", "spec": {}, "max_parallel": None, "approval": "none"}
    with store.write() as db:
        store.insert_group({**row, "id": "1" * 32, "short_id": "11111111"}, db)
    with pytest.raises(sqlite3.IntegrityError) as err:
        with store.write() as db:
            store.insert_group({**row, "id": "2" * 32, "short_id": "22222222"}, db)
    assert "groups.request_id" in str(err.value)


# -- without a request_id: an identical sweep with a live point -------------------------------

def test_an_identical_live_sweep_returns_the_live_group(submitting) -> None:
    project, submit = submitting
    first = submit(sweep_request(project))
    again = submit(sweep_request(project))
    assert again.submitted is False and again.group.id == first.group.id
    assert [j.id for j in again.jobs] == [j.id for j in first.jobs]
    assert again.guidance["note"] == note(first.group.short_id, live=True)
    assert counts() == (1, 3)


@pytest.mark.parametrize("live", LIVE, ids=lambda s: s.value)
@pytest.mark.parametrize("where", [0, 1, 2])
def test_one_live_point_anywhere_in_the_group_answers_an_identical_sweep(
        submitting, live: State, where: int) -> None:
    project, submit = submitting
    first = submit(sweep_request(project))
    states = [State.DONE, State.FAILED, State.CANCELLED]
    states[where] = live
    set_states(first.group.id, states)
    again = submit(sweep_request(project))
    assert again.submitted is False and again.group.id == first.group.id, (live, where)
    assert counts() == (1, 3)


@pytest.mark.parametrize("state", ENDED, ids=lambda s: s.value)
def test_once_every_point_ended_the_same_sweep_makes_a_new_group(submitting, state: State) -> None:
    project, submit = submitting
    first = submit(sweep_request(project))
    set_states(first.group.id, [state, State.DONE, State.CANCELLED])
    again = submit(sweep_request(project))
    assert again.submitted is True and again.group.id != first.group.id
    assert not {j.id for j in first.jobs} & {j.id for j in again.jobs}
    assert counts() == (2, 6)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=THREE_STATES)
def test_an_identical_sweep_is_answered_exactly_while_one_point_is_live(
        tmp_path_factory, monkeypatch_session, states: list[State]) -> None:
    project = fresh_world(tmp_path_factory, monkeypatch_session)
    first = sweeps.submit(sweep_request(project), actor="t", interactive=True, start_supervisor=False)
    set_states(first.group.id, states)
    again = sweeps.submit(sweep_request(project), actor="t", interactive=True, start_supervisor=False)
    live = any(s in ACTIVE for s in states)
    assert (again.submitted, again.group.id == first.group.id) == (not live, live), states
    assert counts() == ((1, 3) if live else (2, 6)), states


def test_a_request_id_group_does_not_answer_a_sweep_without_one(submitting) -> None:
    project, submit = submitting
    keyed = submit(sweep_request(project, request_id="r1"))
    plain = submit(sweep_request(project))
    assert plain.submitted is True and plain.group.id != keyed.group.id
    assert counts() == (2, 6)


def test_a_group_without_a_request_id_does_not_answer_one_with_it(submitting) -> None:
    project, submit = submitting
    plain = submit(sweep_request(project))
    keyed = submit(sweep_request(project, request_id="r1"))
    assert keyed.submitted is True and keyed.group.id != plain.group.id
    assert counts() == (2, 6)


def test_a_changed_sweep_or_bundle_without_a_request_id_is_a_new_group(submitting) -> None:
    project, submit = submitting
    a = submit(sweep_request(project), bundle_hash="1" * 64)
    b = submit(sweep_request(project), bundle_hash="2" * 64)
    c = submit(sweep_request(project, [{"LR": 0.1}, {"LR": 0.01}]), bundle_hash="2" * 64)
    d = submit(sweep_request(project, max_parallel=1), bundle_hash="2" * 64)
    assert [r.submitted for r in (a, b, c, d)] == [True] * 4
    assert len({r.group.id for r in (a, b, c, d)}) == 4
    assert counts() == (4, 11)


# -- one request_id, one thing: a sweep and a plain job ----------------------------------------

def test_a_sweeps_request_id_is_refused_to_a_plain_submit(submitting) -> None:
    project, submit = submitting
    group = submit(sweep_request(project, request_id="r1"))
    with pytest.raises(UserError) as err:
        submit(plain_request(project, request_id="r1"))
    assert err.value.what == ("request_id 'r1' was already used for a different request "
                              f"(sweep {group.group.short_id})")
    assert err.value.fix == "use a new request_id for a new job, or resubmit the original request unchanged"
    assert counts() == (1, 3)
    again = submit(sweep_request(project, request_id="r1"))
    assert again.submitted is False and again.group.id == group.group.id


def test_a_plain_jobs_request_id_is_refused_to_a_sweep(submitting) -> None:
    project, submit = submitting
    job = submit(plain_request(project, request_id="r1"))
    with pytest.raises(UserError) as err:
        submit(sweep_request(project, request_id="r1"))
    assert err.value.what == f"request_id 'r1' was already used for a different request (job {job.job.short_id})"
    assert err.value.fix == "use a new request_id for a new sweep, or resubmit the original unchanged"
    assert counts() == (0, 1)
    again = submit(plain_request(project, request_id="r1"))
    assert again.submitted is False and again.job.id == job.job.id


def test_a_live_sweep_does_not_answer_a_plain_submit_nor_a_live_job_a_sweep(submitting) -> None:
    """Without a request_id the sweep and the plain job of one script are two requests: neither
    is returned for the other (their fingerprints differ by the sweep)."""
    project, submit = submitting
    group = submit(sweep_request(project))
    job = submit(plain_request(project))
    assert job.submitted is True and job.job.id not in {j.id for j in group.jobs}
    again = submit(sweep_request(project))
    assert again.submitted is False and again.group.id == group.group.id
    assert counts() == (1, 4)


# -- the fingerprint: what "the same sweep" is ------------------------------------------------

@pytest.mark.parametrize("name", FIELDS)
def test_every_field_but_three_changes_a_sweeps_fingerprint(name: str) -> None:
    base = JobRequest(project_dir="/p", script="train.py", sweep=[dict(p) for p in SWEEP])
    other = dataclasses.replace(base, **{name: changed(name, getattr(base, name)) if name != "project_dir"
                                         else "/q"})
    same = service.fingerprint(base, "b" * 64) == service.fingerprint(other, "b" * 64)
    assert same is (name in NOT_FINGERPRINTED), name


VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([0.1, 0.01, 1.5]), st.sampled_from(["a", "b", "1"]),
                   st.booleans())
KEYS = st.sampled_from(["LR", "BATCH", "SEED"])


@st.composite
def sweep_and_change(draw) -> tuple[list[dict], list[dict], str]:
    """A sweep, and the same sweep with one change: a value, an axis, a point added or dropped."""
    keys = draw(st.lists(KEYS, min_size=1, max_size=3, unique=True))
    pts = draw(st.lists(st.fixed_dictionaries({k: VALUES for k in keys}), min_size=1, max_size=4))
    kind = draw(st.sampled_from(["value", "axis", "add", "drop"] if len(pts) > 1 else ["value", "axis", "add"]))
    other = [dict(p) for p in pts]
    n = draw(st.integers(0, len(pts) - 1))
    if kind == "value":
        key = draw(st.sampled_from(keys))
        other[n][key] = draw(VALUES.filter(lambda v: repr(v) != repr(pts[n][key])))
    elif kind == "axis":
        old = draw(st.sampled_from(keys))
        new = draw(st.sampled_from([old.lower(), old + "2"]))
        other = [{(new if k == old else k): v for k, v in p.items()} for p in other]
    elif kind == "add":
        other.append({k: draw(VALUES) for k in keys})
    else:
        del other[n]
    return pts, other, kind


@settings(max_examples=examples(100), deadline=None)
@given(change=sweep_and_change(), max_parallel=st.sampled_from([None, 1, 4]))
def test_any_one_change_to_a_sweep_changes_its_fingerprint(change, max_parallel: int | None) -> None:
    pts, other, kind = change
    a = JobRequest(project_dir="/p", script="train.py", sweep=pts, max_parallel=max_parallel)
    b = dataclasses.replace(a, sweep=other)
    c = dataclasses.replace(a, sweep=[dict(p) for p in pts], request_id="k", wait_s=1.0, verbose=True)
    assert service.fingerprint(a, "b" * 64) != service.fingerprint(b, "b" * 64), (kind, pts, other)
    assert service.fingerprint(a, "b" * 64) == service.fingerprint(c, "b" * 64), pts


@settings(max_examples=examples(30), deadline=None)
@given(change=sweep_and_change())
def test_max_parallel_changes_a_sweeps_fingerprint(change) -> None:
    pts = change[0]
    fps = {service.fingerprint(JobRequest(project_dir="/p", script="t.py", sweep=pts, max_parallel=m), "b" * 64)
           for m in (None, 1, 2, 8)}
    assert len(fps) == 4, pts


# -- the one group a sweep records -------------------------------------------------------------

def test_the_group_recorded_is_the_sweep_its_plan_and_its_points(submitting) -> None:
    project, submit = submitting
    req = sweep_request(project, request_id="r9", hours=0.25, name="grid", max_parallel=2)
    got = submit(req, bundle_hash="c" * 64)
    store = Store()
    group = store.group(got.group.id)
    assert len(group.id) == 32 and all(c in "0123456789abcdef" for c in group.id)
    assert group.short_id == group.id[:8]
    assert (group.name, group.project_dir, group.request_id, group.max_parallel, group.approval) == (
        "grid", str(project), "r9", 2, "none")
    assert group.fingerprint == service.fingerprint(req, "c" * 64)
    _, reqs, plans, gplan = fixed_group_plan(project, "c" * 64)(req)
    assert group.digest == gplan["digest"] == sweeps.group_digest([p["digest"] for p in plans], 2)
    assert group.spec == {**gplan, "tell_user": ""}
    points = store.group_jobs(group.id)
    assert [j.id for j in points] == [j.id for j in got.jobs]
    for n, (job, preq, plan) in enumerate(zip(points, reqs, plans), start=1):
        assert len(job.id) == 32 and job.short_id == job.id[:8] and job.short_id != group.short_id
        assert (job.name, job.provider, job.project_dir) == (f"grid[LR={SWEEP[n - 1]['LR']}]", "local", str(project))
        assert job.outputs_dir == str(project / "runs" / job.short_id)
        assert (job.request_id, job.group_id) == (None, group.id)  # the group holds the key
        assert job.fingerprint == service.fingerprint(preq, "c" * 64)
        doc = preq.to_json()
        doc.pop("wait_s")
        doc.pop("verbose")
        assert job.request == doc and job.request["env"]["LR"] == str(SWEEP[n - 1]["LR"])
        assert job.plan == {**plan, "group": {"id": group.id, "short_id": group.short_id, "index": n,
                                              "max_parallel": 2}}
        assert (job.digest, job.bundle_hash) == (plan["digest"], "c" * 64)
        assert job.bundle == {"files": 1, "bytes": 10, "hash": "c" * 64, "root": str(project), "project_rel": ""}
        assert job.state == State.ROUTING
        events = [(e.reason, e.actor, e.data) for e in store.events(job.id)]
        assert events == [(f"submitted by tester as point {n} of sweep {group.short_id}", "tester", {}),
                          ("test; routed", "tester", {"target": "local", "passed_over": []})], events
    assert got.guidance["needs_approval"] is False and "note" not in got.guidance
    store.close()


def test_a_points_name_is_the_sweeps_with_its_values_cut_at_120(submitting) -> None:
    project, submit = submitting
    got = submit(sweep_request(project, name="n" * 115))
    names = [j.name for j in got.jobs]
    assert names == [("n" * 115 + f"[LR={p['LR']}]")[:120] for p in SWEEP]
    assert {len(n) for n in names} == {120}


def test_a_held_sweep_records_every_point_held_with_its_group(submitting) -> None:
    project, submit = submitting
    holds = [{"rule": "cost", "reason": "costs more than $5"}, {"rule": "hours", "reason": "runs over 1 hour"}]
    got = submit(sweep_request(project), holds=holds)
    store = Store()
    group = store.group(got.group.id)
    assert group.approval == "held"
    assert group.spec["tell_user"] == sweeps.tell_user(group.short_id, "train", {**group.spec})
    assert "gpu approve " + group.short_id in group.spec["tell_user"]
    for job in store.group_jobs(group.id):
        assert job.state == State.AWAITING_APPROVAL
        assert (job.plan["holds"], job.plan["hold_kind"], job.plan["tell_user"]) == (
            holds, "group", group.spec["tell_user"])
        assert job.plan["group_totals"] == {"points": 3, "targets": {"local": 3}, "hours": None,
                                            "estimated_price": 0}
        held = [(e.reason, e.actor, e.data) for e in store.events(job.id) if e.reason.startswith("held")]
        assert held == [(f"held with its sweep {group.short_id} for approval: costs more than $5; runs over 1 hour",
                         "tester",
                         {"holds": holds, "group": group.short_id})]
    assert got.guidance["needs_approval"] is True and got.guidance["approve"] == f"gpu approve {group.short_id}"
    again = submit(sweep_request(project), holds=holds)  # held points are live: the same group
    assert again.submitted is False and again.group.id == group.id
    store.close()


def test_an_agents_sweep_is_counted_in_its_day_inside_the_insert(submitting) -> None:
    """Each point of an agent's sweep is counted against its day in the insert's transaction
    (why: its point of the sweep); a sweep whose points together would pass the day's hours is
    held as one group, by the submitter, and nothing of it is counted."""
    project, submit = submitting
    first = submit(sweep_request(project), by="agent", hours=[1.0, 2.0, 3.0])
    short = first.group.short_id
    store = Store()
    for n, job in enumerate(first.jobs, start=1):
        counted = [(e.reason, e.actor, e.data) for e in store.events(job.id) if "agent's day" in e.reason]
        assert counted == [(f"counted against the agent's day: {n} h, $0.00 (point {n} of sweep {short})", "tester",
                            {"agent_start": {"hours": float(n), "usd": 0.0, "why": f"point {n} of sweep {short}"}})]
        assert store.get(job.id).state == State.ROUTING
    second = submit(sweep_request(project, [{"LR": 5}, {"LR": 6}, {"LR": 7}]), by="agent", hours=[3.0] * 3)
    assert second.submitted is True and second.group.approval == "held"
    reason = ("the sweep's 3 points together: the work agents started without you in the last 24 hours "
              "comes to 6 hours and $0.00 (3 starts), and this one's 9 hours and $0.00 would pass the "
              "12-hour daily limit (approvals.agent_daily_hours)")
    assert second.group.spec["holds"] == [{"rule": "agent_day", "reason": reason}]
    for job in second.jobs:
        assert job.state == State.AWAITING_APPROVAL and job.plan["hold_kind"] == "group"
        assert [e for e in store.events(job.id) if "agent's day" in e.reason] == []
    store.close()


def test_an_agents_smoke_sweep_counts_each_point_at_the_smoke_cap(submitting) -> None:
    """A smoke point without hours is judged by the rules' smoke cap (the supervisor stops it
    there): that is what each point counts against the agent's day."""
    from core.config import user as userconfig

    cap = userconfig.load().rules.smoke_max_minutes / 60
    project, submit = submitting
    got = submit(sweep_request(project), by="agent", smoke=True)
    store = Store()
    counted = [e.data["agent_start"]["hours"] for j in got.jobs for e in store.events(j.id)
               if "agent's day" in e.reason]
    assert cap > 0 and counted == [round(cap, 6)] * 3
    store.close()


def test_a_persons_sweep_is_not_counted_in_the_agents_day(submitting) -> None:
    project, submit = submitting
    got = submit(sweep_request(project), hours=[1.0, 1.0, 1.0])
    store = Store()
    assert [e.reason for j in got.jobs for e in store.events(j.id) if "agent's day" in e.reason] == []
    assert got.group.approval == "none"
    store.close()


# -- a model of the whole rule -----------------------------------------------------------------

@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["sweep", "other", "plain"]),
                                st.booleans()), min_size=1, max_size=7))
def test_any_run_of_submits_makes_one_thing_per_key_and_refuses_changed_requests(
        tmp_path_factory, monkeypatch_session, steps: list) -> None:
    """A model of the rule over sweeps, another sweep and a plain job, each step maybe ending
    everything after it: per request_id the first request sticks (the same: its group or job;
    another: refused); without one, the live group (or job) of that request, or a new one."""
    project = fresh_world(tmp_path_factory, monkeypatch_session)
    make = {"sweep": lambda k: sweep_request(project, request_id=k),
            "other": lambda k: sweep_request(project, [{"LR": 1}, {"LR": 2}], request_id=k),
            "plain": lambda k: plain_request(project, request_id=k)}
    by_key: dict = {}  # key -> (what, id)
    live: dict = {}  # what -> id of its live thing without a key
    made = 0
    store = Store()
    try:
        for key, what, end_after in steps:
            try:
                got = sweeps.submit(make[what](key), actor="t", interactive=True, store=store,
                                    start_supervisor=False)
                thing = got.group if what != "plain" else got.job
                said = ("made" if got.submitted else "returned", thing.id)
            except UserError as exc:
                said = ("refused", exc.what)
            if key is None:
                expected = ("returned", live[what]) if what in live else ("made", said[1])
                live.setdefault(what, said[1])
            elif key in by_key:
                first_what, first_id = by_key[key]
                kind = "job" if first_what == "plain" else "group"
                if first_what != "plain" and what != "plain":
                    text = f"request_id {key!r} was already used for a different sweep (group {first_id[:8]})"
                elif first_what != "plain":
                    text = f"request_id {key!r} was already used for a different request (sweep {first_id[:8]})"
                else:
                    text = f"request_id {key!r} was already used for a different request ({kind} {first_id[:8]})"
                expected = ("returned", first_id) if what == first_what else ("refused", text)
            else:
                expected = ("made", said[1])
                by_key[key] = (what, said[1])
            assert said == expected, (key, what)
            made += said[0] == "made"
            if end_after:
                store.conn.execute("UPDATE jobs SET state = 'cancelled'")
                store.conn.commit()
                live.clear()
        groups, jobs = counts(store)
        things = groups + store.conn.execute("SELECT COUNT(*) FROM jobs WHERE group_id IS NULL").fetchone()[0]
        assert things == made
    finally:
        store.close()


@pytest.fixture
def monkeypatch_session(home: Path):
    """One monkeypatch for all of a property's examples (the home fixture's variables stay)."""
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()
