"""An agent's rolling day (issue 37, item 3): many small jobs add up.

Each agent job under an hour and under approvals.agent_max_usd runs unasked, so a ten-hour job
split into twenty would run with no person ever seeing it. approvals.agent_daily_hours and
approvals.agent_daily_usd bound the agent's work of the last 24 hours that went on without a
person's yes; the start that would pass either is held, naming the day's totals and the limit.

As an agent does it: `gpu submit --json` (no terminal: an agent's submit) and `gpu_submit` over
MCP with the official client, first running, then held; `gpu cost --json` and the dashboard's
header show the day against its limits. A property over the one check every door calls
(core.engine.agentday.admit, on a real store with a clock that moves): for any sequence of an
agent's starts with any hours and prices, what went on without a person in any 24 hours never
passes either limit, and a start is held exactly when it would.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import user as userconfig
from core.config.user import Rules
from core.engine import agentday
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Store
from core.planning.policy import agent_day_hold
from core.planning.usage import DAY_S, AgentDay, agent_day
from tests.conftest import gpu_json, make_git_project, write_user_config
from tests.props import examples

QUICK = "print('ran', flush=True)\n"


# -- the rule alone: pure over the day, the start's estimate and the limits -------------------


def test_the_start_that_would_pass_a_limit_is_held_and_names_the_totals() -> None:
    rules = Rules(agent_daily_hours=2.0, agent_daily_usd=3.0)
    assert agent_day_hold(AgentDay(hours=1.25, usd=1.0, starts=2), 0.75, 1.0, rules) is None  # exactly at
    hold = agent_day_hold(AgentDay(hours=1.5, usd=1.0, starts=2), 0.75, 0.5, rules)
    assert hold is not None and hold.rule == "agent_day"
    assert "1.5 hours and $1.00 (2 starts)" in hold.reason and "0.75 hours" in hold.reason
    assert "2-hour daily limit (approvals.agent_daily_hours)" in hold.reason
    assert "agent_daily_usd" not in hold.reason
    money = agent_day_hold(AgentDay(hours=0.5, usd=2.5, starts=1), 0.5, 1.0, rules)
    assert money is not None and "$3.00 daily limit (approvals.agent_daily_usd)" in money.reason
    assert "hours)" not in money.reason.split("would pass")[1]


def test_the_user_config_sets_the_daily_limits_stricter_only(home: Path) -> None:
    defaults = userconfig.load().rules
    assert (defaults.agent_daily_hours, defaults.agent_daily_usd) == (12.0, 25.0)
    write_user_config("approvals:\n  agent_daily_hours: 3\n  agent_daily_usd: 7.5\n")
    rules = userconfig.load().rules
    assert (rules.agent_daily_hours, rules.agent_daily_usd) == (3.0, 7.5)
    for line, words in (("agent_daily_hours: 13", "the most allowed is 12 hours"),
                        ("agent_daily_usd: 26", "the most allowed is 25 dollars"),
                        ("agent_daily_usd: -1", "finite number of 0 or more"),
                        ("agent_daily_hours: .inf", "finite number")):
        write_user_config(f"approvals:\n  {line}\n")
        with pytest.raises(UserError) as exc:
            userconfig.load()
        assert words in exc.value.message(), (line, exc.value.message())


# -- the property: over the one check, on a real store, with a moving clock -----------------


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _job(store: Store, n: int) -> str:
    jid = f"{n:08x}" + "d" * 24
    store.insert_job({"id": jid, "short_id": jid[:8], "name": f"small {n}", "provider": "local",
                      "project_dir": "/p", "outputs_dir": "/p/runs", "fingerprint": f"f{n}",
                      "request": {}, "plan": {}}, reason="submitted", actor="test")
    return jid


STARTS = st.lists(st.tuples(st.floats(0, 30 * 3600),                  # seconds since the last start
                            st.floats(0.01, 3.0),                      # its hours
                            st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0]),  # its target's $/hour
                            st.booleans()),                            # a smoke run with no hours
                  min_size=1, max_size=40)


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(starts=STARTS, limit_h=st.floats(0.5, 12.0), limit_usd=st.floats(0.0, 25.0))
def test_what_runs_unasked_in_any_24_hours_stays_within_both_limits(
        home: Path, monkeypatch: pytest.MonkeyPatch, starts: list, limit_h: float,
        limit_usd: float) -> None:
    rules = Rules(agent_daily_hours=limit_h, agent_daily_usd=limit_usd)
    clock = Clock(1_800_000_000.0)
    monkeypatch.setattr(time, "time", clock)
    path = home / f"prop-{time.perf_counter_ns()}.db"
    store = Store(path)
    went_on: list[tuple[float, float, float]] = []  # the model: (when, hours, dollars)
    try:
        for n, (gap, hours, price, smoke) in enumerate(starts):
            clock.now += gap
            plan = {"submitted_by": "agent", "hours": None if smoke else hours, "smoke": smoke,
                    "estimated_price": round((rules.smoke_max_minutes / 60 if smoke else hours) * price, 4),
                    "holds": []}
            jid = _job(store, n)
            with store.write() as db:
                holds = agentday.admit(store, db, jid, plan, rules, actor="agent")
            h, usd = agentday.estimate(plan, rules)
            day = [(t, a, b) for t, a, b in went_on if t > clock.now - DAY_S]
            day_h, day_usd = sum(a for _, a, _ in day), sum(b for _, _, b in day)
            would_pass = day_h + h > limit_h + 1e-9 or day_usd + usd > limit_usd + 1e-9
            near = min(abs(day_h + h - limit_h), abs(day_usd + usd - limit_usd)) < 1e-6
            if not near:  # (a start at a hair's width of a limit may go either way)
                assert bool(holds) == would_pass, (day_h, day_usd, h, usd, holds)
            if holds:
                assert [x["rule"] for x in holds] == ["agent_day"]
            else:
                went_on.append((clock.now, h, usd))
            counted = agent_day(store)
            assert counted.starts == len([t for t, _, _ in went_on if t > clock.now - DAY_S])
        for t, _, _ in went_on:  # every 24 hours that ends at a start: within both limits
            window = [(a, b) for s, a, b in went_on if t - DAY_S < s <= t]
            assert sum(a for a, _ in window) <= limit_h + 1e-6
            assert sum(b for _, b in window) <= limit_usd + 1e-6
    finally:
        store.close()


def test_a_held_or_a_persons_job_counts_nothing(home: Path) -> None:
    store = Store()
    rules = Rules()
    with store.write() as db:
        assert agentday.admit(store, db, _job(store, 1), {"submitted_by": "person", "hours": 0.5,
                                                          "holds": []}, rules, actor="cli") == []
        held = {"submitted_by": "agent", "hours": 0.5, "holds": [{"rule": "secrets", "reason": "x"}]}
        assert agentday.admit(store, db, _job(store, 2), held, rules, actor="agent") == []
    assert agent_day(store).starts == 0
    with store.write() as db:
        agentday.admit(store, db, _job(store, 3), {"submitted_by": "agent", "hours": 0.5,
                                                   "estimated_price": 1.25, "holds": []}, rules, actor="agent")
    day = agent_day(store)
    assert (day.starts, day.hours, day.usd) == (1, 0.5, 1.25)
    # the word in a job's own text (its purpose) is not a mark
    store.add_event(_job(store, 4), "purpose", actor="agent",
                    data={"purpose": '{"agent_start": {"hours": 99, "usd": 99}}'})
    assert agent_day(store).starts == 1


def test_agents_submitting_at_the_same_moment_cannot_both_slip_under_the_limit(home: Path) -> None:
    """Eight agents (each its own connection, as each `gpu` process has) let a 0.75 h job go at
    the same moment against a 2-hour day: the check and the count are one transaction, so two
    go on and six are held, whatever the order."""
    import threading

    rules = Rules(agent_daily_hours=2.0)
    path = Store().path
    ids = [_job(Store(path), n) for n in range(8)]
    gate = threading.Barrier(len(ids))
    results: dict[str, list] = {}

    def agent(jid: str) -> None:
        store = Store(path)
        gate.wait()
        with store.write() as db:
            results[jid] = agentday.admit(store, db, jid, {"submitted_by": "agent", "hours": 0.75,
                                                           "holds": []}, rules, actor="agent")
        store.close()

    threads = [threading.Thread(target=agent, args=(jid,)) for jid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == len(ids)
    assert sorted(bool(h) for h in results.values()) == [False] * 2 + [True] * 6, results
    assert agent_day(Store(path)).hours == 1.5


# -- as an agent does it: the CLI with --json ----------------------------------------------


def _cli_config(extra: str) -> None:
    write_user_config("targets:\n  metered: {kind: local, price_per_hour: 2.0}\n"
                      "  local: {kind: local, enabled: false}\n" + extra)


@pytest.mark.slow
def test_an_agents_small_jobs_run_until_the_day_is_spent_then_wait(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _cli_config("approvals:\n  agent_daily_hours: 2\n")

    def submit(n: int) -> dict:
        return gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.75", "--request-id", f"small-{n}",
                        cwd=project)

    first, second = submit(1), submit(2)
    for doc in (first, second):
        assert doc["guidance"]["needs_approval"] is False, doc["guidance"]
        assert doc["job"]["state"] != "awaiting_approval"
    third = submit(3)
    assert third["job"]["state"] == "awaiting_approval", third
    tell = third["guidance"]["tell_user"]
    assert "started without you in the last 24 hours comes to 1.5 hours and $3.00 (2 starts)" in tell, tell
    assert "this one's 0.75 hours and $1.50 would pass the 2-hour daily limit" in tell, tell
    assert f"gpu approve {third['job']['short_id']}" in tell
    status = gpu_json("status", third["job"]["short_id"], "--verbose")
    assert [h["rule"] for h in status["plan"]["holds"]] == ["agent_day"], status.keys()
    assert gpu_json("plan", "a.py", "--hours", "0.5", cwd=project)["needs_approval"] is False  # fits
    plan = gpu_json("plan", "a.py", "--hours", "0.75", cwd=project)  # the preview says so too
    assert plan["needs_approval"] is True and [h["rule"] for h in plan["plan"]["holds"]] == ["agent_day"]
    cost = gpu_json("cost")
    assert cost["agent_day"]["hours"] == 1.5 and cost["agent_day"]["usd"] == 3.0, cost["agent_day"]
    assert cost["agent_day"]["starts"] == 2 and cost["agent_day"]["hours_limit"] == 2.0
    assert cost["agent_day"]["usd_limit"] == 25.0 and cost["agent_day"]["hours_left"] == 0.5


@pytest.mark.slow
def test_an_agents_day_of_dollars_holds_the_job_that_would_pass_it(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _cli_config("approvals:\n  agent_daily_usd: 1.5\n")
    ok = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.5", "--request-id", "one", cwd=project)
    assert ok["guidance"]["needs_approval"] is False
    held = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.5", "--request-id", "two", cwd=project)
    assert held["job"]["state"] == "awaiting_approval"
    tell = held["guidance"]["tell_user"]
    assert "comes to 0.5 hours and $1.00 (1 start)" in tell and "$1.50 daily limit" in tell, tell
    assert "hour daily limit" not in tell  # the hours are far from theirs
    # a sweep's points are judged together: each of $0.20 fits in the $0.50 left, three do not
    sweep = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.1", "--sweep", "lr=1,2,3",
                     "--request-id", "grid", cwd=project)
    assert all(j["state"] == "awaiting_approval" for j in sweep["jobs"]), sweep["jobs"]
    assert "the sweep's 3 points together" in sweep["guidance"]["tell_user"]
    assert "$1.50 daily limit" in sweep["guidance"]["tell_user"]
    assert gpu_json("cost")["agent_day"]["starts"] == 1  # nothing held was counted


# -- as an agent does it: MCP over stdio ----------------------------------------------------


@pytest.mark.slow
async def test_over_mcp_the_agents_day_holds_its_third_small_job(home: Path, tmp_path: Path) -> None:
    from tests.tui.mcp.test_mcp import call, session

    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    _cli_config("approvals:\n  agent_daily_hours: 1\n")
    async with session() as s:
        docs = [await call(s, "gpu_submit", project_dir=str(project), script="a.py", hours=0.4,
                           request_id=f"mcp-{n}", wait_s=0) for n in range(3)]
    assert [d["guidance"]["needs_approval"] for d in docs] == [False, False, True], [d["guidance"] for d in docs]
    tell = docs[2]["guidance"]["tell_user"]
    assert "comes to 0.8 hours and $1.60 (2 starts)" in tell and "1-hour daily limit" in tell, tell


# -- where a person sees it: the dashboard's header, `gpu cost` ----------------------------


async def test_the_dashboard_header_shows_the_agents_day_against_its_limits(home: Path) -> None:
    from tui.dash.app import DashApp

    write_user_config("approvals:\n  agent_daily_hours: 4\n  agent_daily_usd: 10\n")
    store = Store()
    app = DashApp(store=store, live=False, bell=False)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause(0.2)
        assert "agent" not in app.sub_title  # no agent work today: nothing to say
    for n in (1, 2):
        with store.write() as db:
            agentday.count(store, db, _job(store, n), 0.75, 1.5, actor="agent")
    app = DashApp(store=store, live=False, bell=False)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause(0.2)
        assert "agent's day 1.5 of 4 h, $3.00 of $10.00" in app.sub_title, app.sub_title
    with store.write() as db:
        agentday.count(store, db, _job(store, 3), 2.5, 1.0, actor="agent")
    app = DashApp(store=store, live=False, bell=False)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause(0.2)
        assert "agent's day 4 of 4 h, $4.00 of $10.00 (limit reached)" in app.sub_title, \
            app.sub_title


def test_gpu_cost_says_the_agents_day_in_words(home: Path) -> None:
    from tests.conftest import run_gpu

    write_user_config("approvals:\n  agent_daily_hours: 4\n")
    store = Store()
    jid = _job(store, 1)
    with store.write() as db:
        agentday.count(store, db, jid, 0.75, 1.5, actor="agent")
    # ended, as a started job of the day may be: a queued row would have `gpu cost`, which reads
    # the store, start a supervisor for it (daemon.supervise_live), and this test runs none
    store.transition(jid, State.CANCELLED, "cancelled", actor="test")
    out = run_gpu("cost").stdout
    assert "agent's day: 0.75 of 4 h and $1.50 of $25.00 started by agents without you in the " \
           "last 24 hours (1 start;" in " ".join(out.split()), out


@pytest.mark.slow
def test_an_agents_resume_is_a_start_of_its_day(home: Path, tmp_path: Path) -> None:
    from tests.conftest import wait_state

    project = make_git_project(tmp_path / "p", {"a.py": "raise SystemExit(3)\n",
                                                "gpu.yaml": "restart: allow\n"})
    _cli_config("approvals:\n  agent_daily_hours: 1\n")
    first = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.4", cwd=project)
    short = first["job"]["short_id"]
    assert wait_state(short, {"failed", "done", "cancelled"}, timeout=120)["state"] == "failed"
    again = gpu_json("resume", short, cwd=project)  # 0.8 h: fits
    again = again.get("job", again)
    assert again["state"] != "awaiting_approval", again
    assert wait_state(short, {"failed", "done", "cancelled"}, timeout=120)["state"] == "failed"
    third = gpu_json("resume", short, cwd=project)  # 1.2 h: would pass the 1-hour day
    third = third.get("job", third)
    assert third["state"] == "awaiting_approval", third
    assert gpu_json("cost")["agent_day"]["starts"] == 2
    status = gpu_json("status", short, "--verbose")
    assert "comes to 0.8 hours and $1.60 (2 starts)" in status["plan"]["tell_user"], status["plan"]


@pytest.mark.slow
def test_an_agents_retry_is_a_start_of_its_day(home: Path, tmp_path: Path) -> None:
    from tests.conftest import wait_state

    project = make_git_project(tmp_path / "p", {"a.py": "raise SystemExit(3)\n",
                                                "gpu.yaml": "retry_on_exit_codes: [3]\nmax_retries: 1\n"})
    _cli_config("approvals:\n  agent_daily_hours: 1.5\n")
    fits = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.5", "--request-id", "r1", cwd=project)
    assert wait_state(fits["job"]["short_id"], {"failed", "done", "cancelled"}, timeout=120)["state"] == "failed"
    assert gpu_json("cost")["agent_day"]["starts"] == 2  # its submit and its retry: 1 h
    held = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.5", "--request-id", "r2", cwd=project)
    short = held["job"]["short_id"]  # 1.5 h with its submit: it runs, and its retry would pass
    doc = wait_state(short, {"awaiting_approval", "failed", "done", "cancelled"}, timeout=120)
    assert doc["state"] == "awaiting_approval", doc
    status = gpu_json("status", short, "--verbose")
    assert [h["rule"] for h in status["plan"]["holds"]] == ["agent_day"], status["plan"]["holds"]
    assert "comes to 1.5 hours and $3.00 (3 starts)" in status["plan"]["tell_user"]
    assert gpu_json("cost")["agent_day"]["starts"] == 3


@pytest.mark.slow
def test_a_day_hold_is_judged_afresh_when_a_cancelled_job_is_resumed(home: Path, tmp_path: Path) -> None:
    """A hold for a full day is the day's, not the job's: cancelled while held and resumed once
    the day has room (here: the person raised the limit), it goes on; while the day is still
    full it is held again (core/engine/doors.py judges `agent_day` afresh, as an overrun)."""
    project = make_git_project(tmp_path / "p", {"a.py": QUICK, "gpu.yaml": "restart: allow\n"})
    _cli_config("approvals:\n  agent_daily_hours: 1\n")
    first = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.75", "--request-id", "d1", cwd=project)
    assert first["job"]["state"] != "awaiting_approval", first
    held = gpu_json("submit", "a.py", "--wait-s", "0", "--hours", "0.75", "--request-id", "d2", cwd=project)
    short = held["job"]["short_id"]
    assert held["job"]["state"] == "awaiting_approval", held
    assert gpu_json("cancel", short)["job"]["state"] == "cancelled"
    still = gpu_json("resume", short, cwd=project)
    assert still.get("job", still)["state"] == "awaiting_approval", still  # the day is still full
    gpu_json("cancel", short)
    _cli_config("approvals:\n  agent_daily_hours: 2\n")  # the person's own config: room now
    back = gpu_json("resume", short, cwd=project)
    back = back.get("job", back)
    assert back["state"] != "awaiting_approval", back
    assert [h["rule"] for h in gpu_json("status", short, "--verbose")["plan"].get("holds") or []] == []
