"""A person's yes stays a person's: an agent in a pseudo-terminal is still an agent, and with
an approval PIN set, only someone who knows it approves.

The CLI runs as the installed `gpu` on a real pty (tests.conftest.pty_session); the dashboard
through Textual's pilot; the rule and the PIN's hash as plain functions, with hypothesis.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.engine.actor import FORCE_VAR, MARKERS, agent_marker, decide
from core.errors import UserError
from core.engine import pin as pinmod
from tests.tui.dash.test_dash import _settle  # the dashboard tests' own settling
from tests.conftest import (gpu_exe, gpu_json, make_git_project, pty_session, run_gpu, wait_state,
                            write_user_config)

QUICK = "print('ran', flush=True)\n"
PIN = "7391582046"  # ten digits: by chance in no file gpu-router writes (one in ten billion a place)
WRONG = "7391000000"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "TERM": "xterm", "COLUMNS": "120", **extra}


def _typing(answers: list[tuple[bytes, str]]):
    """A pty `react` that types each answer once, after its prompt appears, in order."""
    state = {"at": 0, "seen": 0}

    def react(out: bytes) -> bytes | None:
        if state["at"] < len(answers):
            prompt, answer = answers[state["at"]]
            found = out.find(prompt, state["seen"])
            if found >= 0:
                state["at"] += 1
                state["seen"] = found + len(prompt)
                return answer.encode() + b"\r"
        return None

    return react


def _in_pty(args: list[str], answers: list[tuple[bytes, str]] = (), cwd: Path | None = None,
            **env: str) -> tuple[int, str]:
    status, out = pty_session([gpu_exe(), *args], _typing(list(answers)), cwd=cwd, env=_env(**env),
                              timeout=90)
    return status, out.decode(errors="replace")


def _held_job(project: Path, name: str = "held") -> dict:
    """A job held for approval, submitted as an agent would (no terminal, no hours)."""
    job = gpu_json("submit", "a.py", "--wait-s", "0", "--name", name, cwd=project)["job"]
    assert job["state"] == "awaiting_approval"
    return job


def _set_pin_in_pty(value: str = PIN) -> tuple[int, str]:
    return _in_pty(["approvals", "pin", "set"], [(b"new approval PIN (hidden): ", value),
                                                 (b"the same PIN again (hidden): ", value)])


# -- the actor rule ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("marker", [{"CLAUDECODE": "1"}, {FORCE_VAR: "agent"}])
def test_a_submit_in_a_pty_with_an_agent_marker_is_held_and_asks_nothing(
        home: Path, tmp_path: Path, marker: dict) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    status, out = _in_pty(["submit", "a.py", "--wait-s", "0"], [(b"Approve job", "y")], cwd=project,
                          **marker)
    assert status == 0, out
    assert "needs your approval" not in out and "Approve job" not in out  # never prompted
    job = gpu_json("jobs")["jobs"][0]
    doc = gpu_json("status", job["short_id"], "--verbose")
    assert doc["state"] == "awaiting_approval"
    assert doc["plan"]["submitted_by"] == "agent"
    assert [h["rule"] for h in doc["plan"]["holds"]] == ["agent_hours"]
    assert "submitted by an agent" in doc["guidance"]["tell_user"]
    name = next(iter(marker))
    assert name in doc["events"][0]["actor"] and "agent" in doc["events"][0]["actor"]


@pytest.mark.slow
def test_the_same_submit_in_a_pty_without_a_marker_is_a_persons(home: Path, tmp_path: Path) -> None:
    """The twin: no marker, a pty, and `GPU_ROUTER_ACTOR=person` (which forces nothing)."""
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    status, out = _in_pty(["submit", "a.py", "--wait-s", "0", "--hours", "2"], cwd=project,
                          **{FORCE_VAR: "person"})
    assert status == 0, out
    job = gpu_json("jobs")["jobs"][0]
    doc = gpu_json("status", job["short_id"], "--verbose")
    assert doc["plan"]["submitted_by"] == "person" and doc["plan"]["holds"] == []
    assert doc["state"] != "awaiting_approval"


@pytest.mark.slow
def test_gpu_approve_in_a_pty_with_a_marker_is_refused_before_anything_is_asked(
        home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    held = _held_job(project)
    short = held["short_id"]
    status, out = _in_pty(["approve", short], [(b"to approve it: ", short)], CLAUDECODE="1")
    assert status == 2, out
    assert "to approve it" not in out  # no prompt for the agent to answer
    flat = " ".join(out.split())
    assert "this run is an agent's: CLAUDECODE is set: Claude Code" in flat
    assert f"gpu approve {short}" in flat and "presses `a`" in flat
    # a marker-free pty with --json is machine output: refused too, as JSON
    status, out = _in_pty(["approve", short, "--json"], [(b"to approve it: ", short)])
    assert status == 2 and "--json asks for machine output" in out and "to approve it" not in out
    # GPU_ROUTER_ACTOR=person does not override a marker
    status, out = _in_pty(["approve", short], [(b"to approve it: ", short)],
                          GEMINI_CLI="1", **{FORCE_VAR: "person"})
    assert status == 2 and "GEMINI_CLI is set" in out
    assert gpu_json("status", short)["state"] == "awaiting_approval"


# -- the PIN ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_with_a_pin_set_approving_needs_it(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    status, out = _in_pty(["approvals", "pin", "set"], [(b"new approval PIN", PIN)], CLAUDECODE="1")
    assert status == 2 and "agent's" in out and "new approval PIN" not in out
    assert gpu_json("approvals", "pin", "status")["pin"] == {"set": False}

    status, out = _set_pin_in_pty()
    assert status == 0, out
    assert PIN not in out  # typed without echo
    cfg = Path(os.environ["GPU_ROUTER_CONFIG"])
    record = __import__("yaml").safe_load(cfg.read_text())["approvals"]["pin"]
    assert record["scheme"] == "scrypt" and len(bytes.fromhex(record["salt"])) == 16
    assert (record["n"], record["r"], record["p"]) == (2 ** 14, 8, 1)
    assert gpu_json("approvals", "pin", "status")["pin"] == {"set": True, "scheme": "scrypt",
                                                             "n": 2 ** 14, "r": 8, "p": 1}

    held = _held_job(project)
    short = held["short_id"]
    status, out = _in_pty(["approve", short], [(b"approval PIN for job", WRONG)])
    assert status == 2, out
    assert "wrong approval PIN: nothing was approved" in out and WRONG not in out
    assert gpu_json("status", short)["state"] == "awaiting_approval"

    status, out = _in_pty(["approve", short], [(b"approval PIN for job", PIN)])
    assert status == 0 and "approved plan" in out, out
    events = gpu_json("status", short, "--verbose")["events"]
    decision = [e for e in events if e.get("data", {}).get("decision") == "approve"]
    assert len(decision) == 1 and decision[0]["data"]["pin"] is True

    # clearing needs the PIN too; then approving is back to the typed job id
    status, out = _in_pty(["approvals", "pin", "clear"], [(b"current approval PIN", WRONG)])
    assert status == 2 and "wrong approval PIN: nothing was changed" in out
    assert gpu_json("approvals", "pin", "status")["pin"]["set"] is True
    status, out = _in_pty(["approvals", "pin", "clear"], [(b"current approval PIN", PIN)])
    assert status == 0 and "cleared" in out, out
    assert gpu_json("approvals", "pin", "status")["pin"] == {"set": False}

    # the PIN is nowhere: not in the config, the store, the logs or any file gpu-router wrote
    for path in [cfg, *home.rglob("*")]:
        if path.is_file():
            assert PIN.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_the_yes_at_submit_asks_for_the_pin_too(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"a.py": QUICK})
    write_user_config("rules:\n  approve_everything: true\n")
    assert _set_pin_in_pty()[0] == 0
    args = ["submit", "a.py", "--hours", "0.1", "--wait-s", "0"]
    status, out = _in_pty(args, [(b"Approve job", "y"), (b"approval PIN for job", WRONG)], cwd=project)
    assert status == 2 and "wrong approval PIN" in out, out
    first = gpu_json("jobs")["jobs"][0]
    assert gpu_json("status", first["short_id"])["state"] == "awaiting_approval"
    status, out = _in_pty([*args, "--name", "second"], [(b"Approve job", "y"),
                                                        (b"approval PIN for job", PIN)], cwd=project)
    assert status == 0 and "approved: job" in out, out
    # the approved job runs to its end: its supervisor, started by the submit, holds its lock by
    # then, so the teardown finds and stops it (returning here, it took the lock after the look)
    second = next(j for j in gpu_json("jobs")["jobs"] if j["name"] == "second")
    assert wait_state(second["short_id"], {"done", "failed", "cancelled"}, timeout=120)["state"] == "done"


@pytest.mark.slow
def test_pin_set_refuses_a_pipe_and_a_short_pin(home: Path) -> None:
    proc = run_gpu("approvals", "pin", "set", input=f"{PIN}\n{PIN}\n")
    assert proc.returncode == 2 and "no terminal" in proc.stderr
    status, out = _set_pin_in_pty("12345")
    assert status == 2 and "too short" in out and "12345" not in out.split("too short")[1]
    status, out = _set_pin_in_pty("kiwi-7391")
    assert status == 2 and "digits only" in out and "kiwi" not in out.split("digits only")[1]
    assert gpu_json("approvals", "pin", "status")["pin"] == {"set": False}
    status, out = _in_pty(["approvals", "pin", "set"], [(b"new approval PIN (hidden): ", PIN),
                                                        (b"the same PIN again (hidden): ", WRONG)])
    assert status == 2 and "the two PINs differ" in out
    assert gpu_json("approvals", "pin", "status")["pin"] == {"set": False}


# -- the config's validator -------------------------------------------------------------------


def _record(**change) -> dict:
    rec = {"scheme": "scrypt", "salt": "ab" * 16, "n": 2 ** 14, "r": 8, "p": 1, "hash": "cd" * 32}
    rec.update(change)
    return {k: v for k, v in rec.items() if v is not None}


@pytest.mark.parametrize("record, words", [
    (_record(scheme="bcrypt"), "the record `gpu approvals pin set` writes"),
    (_record(hash=None), "the record"),
    (_record(extra=1), "the record"),
    (_record(salt="xyz" * 12), "approvals.pin.salt must be hex"),
    (_record(salt="abc"), "approvals.pin.salt must be hex"),
    (_record(hash="ab" * 15 + "a"), "approvals.pin.hash must be hex"),
    (_record(n=3 * 2 ** 12), "out of range"),
    (_record(n=2 ** 20), "out of range"),
    (_record(r=True), "out of range"),
    (_record(p=0), "out of range"),
])
def test_the_user_config_refuses_a_malformed_pin(home: Path, record: dict, words: str) -> None:
    from core.config import user as userconfig

    write_user_config(json.dumps({"approvals": {"pin": record}}))
    with pytest.raises(UserError, match=re.escape(words)):
        userconfig.load()
    with pytest.raises(UserError):  # an approval fails closed on a broken config
        pinmod.require(PIN, where="test")


def test_the_user_config_takes_a_good_pin_and_extra_markers(home: Path) -> None:
    from core.config import user as userconfig
    from core.engine.actor import current

    write_user_config(json.dumps({"approvals": {"pin": _record(), "agent_markers": ["MY_AGENT"]}}))
    cfg = userconfig.load()
    assert cfg.approval_pin == _record() and cfg.agent_markers == ["MY_AGENT"]
    write_user_config(json.dumps({"approvals": {"agent_markers": ["NOT A NAME"]}}))
    with pytest.raises(UserError, match="agent_markers"):
        userconfig.load()
    write_user_config(json.dumps({"approvals": {"pins": {}}}))
    with pytest.raises(UserError, match="approvals takes pin, agent_markers, agent_max_usd, agent_daily_hours, agent_daily_usd"):
        userconfig.load()
    write_user_config("approvals:\n  agent_markers: [MY_AGENT]\n")
    os.environ["MY_AGENT"] = "yes"
    try:
        actor = current(terminal=True)
    finally:
        del os.environ["MY_AGENT"]
    assert not actor.is_person and actor.marker == "MY_AGENT"
    assert current(terminal=True).is_person


# -- properties -------------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True)
KNOWN = {FORCE_VAR, *(m.var for m in MARKERS), *(k for m in MARKERS for k, _ in m.also)}


def _marker_env(marker) -> dict[str, str]:
    return {marker.var: marker.value or "1", **dict(marker.also)}


@settings(max_examples=examples(150), deadline=None)
@given(other=st.dictionaries(NAMES.filter(lambda n: n not in KNOWN), st.text(max_size=8), max_size=6),
       marker=st.sampled_from(MARKERS),
       force=st.one_of(st.none(), st.just("person"), st.just("agent"), st.text(max_size=8)),
       stdin_tty=st.booleans(), ctty=st.booleans(), json_=st.booleans())
def test_any_marker_makes_an_agent_whatever_else_is_said(other, marker, force, stdin_tty, ctty,
                                                          json_) -> None:
    env = {**other, **_marker_env(marker)}
    if force is not None:
        env[FORCE_VAR] = force
    actor = decide(stdin_tty=stdin_tty, ctty=ctty, json=json_, env=env)
    assert actor.kind == "agent"
    forced = bool(force) and force.strip().lower() != "person"
    assert actor.marker == (FORCE_VAR if forced else marker.var)


@settings(max_examples=examples(150), deadline=None)
@given(other=st.dictionaries(NAMES.filter(lambda n: n not in KNOWN), st.text(max_size=8), max_size=6),
       force=st.one_of(st.none(), st.just(""), st.just("person"), st.just(" Person ")),
       stdin_tty=st.booleans(), ctty=st.booleans(), json_=st.booleans())
def test_without_a_marker_only_a_terminal_without_json_is_a_person(other, force, stdin_tty,
                                                                     ctty, json_) -> None:
    env = dict(other)
    if force is not None:
        env[FORCE_VAR] = force
    assert agent_marker(env) is None
    actor = decide(stdin_tty=stdin_tty, ctty=ctty, json=json_, env=env)
    assert actor.is_person == (stdin_tty and ctty and not json_)  # stdout is never asked
    forced = decide(stdin_tty=True, ctty=True, env={**env, FORCE_VAR: "agent"})
    assert forced.kind == "agent" and forced.marker == FORCE_VAR


def test_a_marker_needs_its_value_and_its_companions() -> None:
    assert agent_marker({"CURSOR_TRACE_ID": "abc"}) is None  # a person's Cursor terminal
    assert agent_marker({"CURSOR_TRACE_ID": "abc", "PAGER": "head -n 10000 | cat"}).tool == "Cursor agent"
    assert agent_marker({"CLAUDECODE": ""}) is None  # set but empty: not set
    actor = decide(stdin_tty=True, ctty=True, env={"CODEX_THREAD_ID": "019a-secret-id"})
    assert "019a-secret-id" not in actor.label("cli")  # a marker's value is never recorded


PINS = st.text(st.sampled_from("0123456789"), min_size=6, max_size=10)


@settings(max_examples=examples(20), deadline=None)  # scrypt is slow on purpose
@given(p=PINS, q=PINS)
def test_a_pin_matches_only_itself(p: str, q: str) -> None:
    record = pinmod.make(p)
    assert pinmod.matches(record, p)
    assert pinmod.matches(record, q) == (p == q)


def test_a_short_or_untypable_pin_is_refused_without_repeating_it() -> None:
    for bad in ("12345", "abcdef", " 123456", "123 456", "123456\x1b", "1" * 129,
                "\u0661\u0662\u0663\u0664\u0665\u0666", "12345\uff16"):  # other scripts' digits too
        with pytest.raises(UserError) as info:
            pinmod.make(bad)
        assert bad not in info.value.message()
    a, b = pinmod.make(PIN), pinmod.make(PIN)
    assert a["salt"] != b["salt"] and a["hash"] != b["hash"]  # a fresh salt each time


# -- the dashboard ----------------------------------------------------------------------------


@pytest.fixture
def demo(home: Path, monkeypatch: pytest.MonkeyPatch):
    from tui.dash.demo import seed

    monkeypatch.setenv("GPU_ROUTER_IDLE_EXIT_S", "5")
    return seed()



def _app():
    from tui.dash.app import DashApp
    from tui.dash.demo import NOW

    return DashApp(clock=lambda: NOW, live=False, bell=False)


async def test_the_dashboard_refuses_an_agent_before_opening_the_approval(
        demo, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.jobs.states import State
    from core.jobs.store import Store
    from tui.dash.demo import _id
    from tui.dash.screens import ApprovalScreen

    monkeypatch.setenv("CLINE_ACTIVE", "true")
    app = _app()
    async with app.run_test(size=(120, 36)) as pilot:
        await _settle(pilot)
        await pilot.press("a")
        await _settle(pilot)
        assert not isinstance(app.screen, ApprovalScreen)
        assert any("CLINE_ACTIVE is set: Cline" in n.message for n in app._notifications)
        app.open_approval(_id(3))  # the command palette's way in meets the same gate
        await _settle(pilot)
        assert not isinstance(app.screen, ApprovalScreen)
    assert Store().get(_id(3)).state == State.AWAITING_APPROVAL


@pytest.mark.slow  # runs the supervisor: end to end
async def test_the_dashboard_asks_for_the_pin_and_checks_it(demo) -> None:
    from core.jobs.states import State
    from core.jobs.store import Store
    from textual.widgets import Input
    from tui.dash.demo import _id
    from tui.dash.screens import ApprovalScreen

    pinmod.save(PIN)
    pending = _id(3)
    app = _app()
    async with app.run_test(size=(120, 36)) as pilot:
        await _settle(pilot)
        await pilot.press("a")
        await _settle(pilot)
        assert isinstance(app.screen, ApprovalScreen)
        box = app.screen.query_one("#pin", Input)
        assert box.password and not box.display
        await pilot.press("y")
        assert box.display and box.has_focus
        await pilot.press("n", "escape")  # in the PIN field `n` is a character; esc goes back
        assert not isinstance(app.screen, ApprovalScreen)
        assert Store().get(pending).state == State.AWAITING_APPROVAL
        await pilot.press("a", "y")
        box = app.screen.query_one("#pin", Input)
        assert box.has_focus and box.value == ""
        await pilot.press(*WRONG, "enter")
        await _settle(pilot)
        await _settle(pilot, 1.5)  # the wrong PIN's wait, in the worker
        assert not isinstance(app.screen, ApprovalScreen)
        assert any("wrong approval PIN" in n.message for n in app._notifications)
        assert not any(WRONG in n.message for n in app._notifications)
        assert Store().get(pending).state == State.AWAITING_APPROVAL
        await pilot.press("a", "y", *PIN, "enter")
        await _settle(pilot)
        await _settle(pilot)
    job = Store().get(pending)
    assert job.state != State.AWAITING_APPROVAL
    decision = [e for e in Store().events(pending) if e.data.get("decision") == "approve"]
    assert len(decision) == 1 and decision[0].data["pin"] is True and "dashboard" in decision[0].actor
