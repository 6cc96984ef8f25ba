"""Who is at the keyboard, past decide()'s rule: the parts mutmut found no test for (issue 40).

tests/engine/test_choke_actor.py pins decide(): each fact alone, and every combination as a property.
The mutation run of core/engine/actor.py (bench/mutation.py --module actor) found the rest of
the module unasked: how a marker with a value or companion variables is matched and described,
the label the store records for a person and for an agent, the login name's fallback, which
marker wins when several are set, how GPU_ROUTER_ACTOR's value is said, `current()` (the
terminal override, --json, the user config's extra markers, the job check), whether the
process has a controlling terminal (a real pty and a real new session), MCP's reason, and a
closed or absent stdin. Each test names the exact value a person or the store would see.
"""

from __future__ import annotations

import getpass
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.engine import actor
from core.engine.actor import FORCE_VAR, MARKERS, Actor, Marker, agent_marker, decide

PERSON = dict(stdin_tty=True, ctty=True, json=False, env={}, extra_markers=(), in_job=None)
REPO = Path(__file__).resolve().parents[2]


# --- Marker ----------------------------------------------------------------------------------

def test_a_marker_with_a_value_counts_only_at_that_value() -> None:
    m = Marker("SHELL_OF", "a tool", value="agent")
    assert m.found({"SHELL_OF": "agent"}) is True
    assert m.found({"SHELL_OF": "person"}) is False
    assert m.found({"SHELL_OF": ""}) is False
    assert m.found({}) is False


def test_a_marker_with_companions_needs_each_at_its_value() -> None:
    m = Marker("TRACE", "a tool", also=(("PAGER", "cat"), ("MODE", "auto")))
    assert m.found({"TRACE": "t", "PAGER": "cat", "MODE": "auto"}) is True
    assert m.found({"TRACE": "t", "PAGER": "cat"}) is False
    assert m.found({"TRACE": "t", "PAGER": "less", "MODE": "auto"}) is False
    assert m.found({"PAGER": "cat", "MODE": "auto"}) is False


def test_a_marker_describes_its_variable_value_and_companions() -> None:
    assert Marker("CLAUDECODE", "Claude Code").describe() == "CLAUDECODE"
    assert Marker("SHELL_OF", "t", value="agent").describe() == "SHELL_OF=agent"
    cursor = next(m for m in MARKERS if m.var == "CURSOR_TRACE_ID")
    assert cursor.describe() == "CURSOR_TRACE_ID, PAGER=head -n 10000 | cat"
    two = Marker("A", "t", value="1", also=(("B", "2"), ("C", "3")))
    assert two.describe() == "A=1, B=2, C=3"


# --- agent_marker ----------------------------------------------------------------------------

def test_the_first_listed_marker_wins_when_several_are_set() -> None:
    env = {"AI_AGENT": "x", "AGENT": "goose", "GOOSE_TERMINAL": "1", "CLAUDECODE": "1"}
    assert agent_marker(env).var == "CLAUDECODE"
    assert agent_marker({"AI_AGENT": "x", "AGENT": "goose"}).var == "AGENT"
    # a known marker is found before the user's own names
    assert agent_marker({"MY_BOT": "1", "AI_AGENT": "x"}, ["MY_BOT"]).var == "AI_AGENT"


def test_a_user_marker_counts_only_when_set_and_says_where_it_came_from() -> None:
    found = agent_marker({"MY_BOT": "1", "OTHER": "1"}, ["NOPE", "MY_BOT", "OTHER"])
    assert found == Marker("MY_BOT", "an agent named in your config's approvals.agent_markers")
    assert agent_marker({"MY_BOT": ""}, ["MY_BOT"]) is None
    assert agent_marker({}, ["MY_BOT"]) is None
    assert agent_marker({"UNLISTED": "1"}) is None


# --- decide: the forced value and the marker recorded ----------------------------------------

@pytest.mark.parametrize("value, said", [
    ("agent", "agent"), ("Agent", "a value other than person"), (" agent", "a value other than person"),
    ("1", "a value other than person"), ("persons", "a value other than person"),
])
def test_the_forced_value_is_said_as_written_only_when_exactly_agent(value: str, said: str) -> None:
    got = decide(**{**PERSON, "env": {FORCE_VAR: value}})
    assert got == Actor("agent", f"{FORCE_VAR} is set to {said}", FORCE_VAR)


@pytest.mark.parametrize("value", ["person", "PERSON", " Person ", "person\n"])
def test_forced_person_in_any_case_or_blanks_changes_nothing(value: str) -> None:
    assert decide(**{**PERSON, "env": {FORCE_VAR: value}}) == Actor("person", "a terminal with no agent marker")
    assert decide(**{**PERSON, "env": {FORCE_VAR: value}, "json": True}) == Actor(
        "agent", "--json asks for machine output")


def test_the_actor_records_which_variable_decided_and_none_for_the_channel() -> None:
    assert decide(**{**PERSON, "env": {"CLAUDECODE": "1"}}).marker == "CLAUDECODE"
    assert decide(**{**PERSON, "env": {"MY_BOT": "1"}, "extra_markers": ["MY_BOT"]}).marker == "MY_BOT"
    for change in (dict(json=True), dict(stdin_tty=False), dict(ctty=False), dict(in_job="x")):
        assert decide(**{**PERSON, **change}).marker is None, change
    assert decide(**PERSON).marker is None


def test_a_job_s_process_is_an_agent_before_anything_else() -> None:
    got = decide(**{**PERSON, "env": {FORCE_VAR: "agent", "CLAUDECODE": "1"}, "json": True,
                    "in_job": "it descends from the job launcher (pid 9)"})
    assert got == Actor("agent", "it runs inside a gpu-router job (it descends from the job launcher (pid 9))")


def test_without_env_decide_reads_this_process_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [FORCE_VAR, *{m.var for m in MARKERS}]:
        monkeypatch.delenv(name, raising=False)
    assert decide(stdin_tty=True, ctty=True).kind == "person"
    monkeypatch.setenv("GEMINI_CLI", "1")
    assert decide(stdin_tty=True, ctty=True) == Actor("agent", "GEMINI_CLI is set: Gemini CLI", "GEMINI_CLI")


def test_the_order_of_the_channel_facts_decides_the_reason() -> None:
    assert decide(**{**PERSON, "json": True, "stdin_tty": False, "ctty": False}).why == "--json asks for machine output"
    assert decide(**{**PERSON, "stdin_tty": False, "ctty": False}).why == "no terminal on stdin"
    assert decide(**{**PERSON, "env": {"CLAUDECODE": "1"}, "json": True}).why == "CLAUDECODE is set: Claude Code"


# --- Actor.label, user_name, mcp -------------------------------------------------------------

def test_the_label_is_the_login_name_for_a_person_and_the_reason_for_an_agent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: "ada")
    assert Actor("person", "a terminal with no agent marker").label("cli") == "ada (cli)"
    assert Actor("person", "x").is_person is True
    agent = Actor("agent", "CLAUDECODE is set: Claude Code", "CLAUDECODE")
    assert agent.is_person is False
    assert agent.label("mcp") == "agent (CLAUDECODE is set: Claude Code; mcp)"


@pytest.mark.parametrize("error", [KeyError("uid"), OSError("no passwd")])
def test_a_login_name_that_cannot_be_read_is_unknown(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def fail() -> str:
        raise error

    monkeypatch.setattr(getpass, "getuser", fail)
    assert actor.user_name() == "unknown"
    assert Actor("person", "x").label("dashboard") == "unknown (dashboard)"


def test_what_arrives_through_mcp_is_an_agent_s() -> None:
    assert actor.mcp() == Actor("agent", "it came through MCP")


# --- _isatty ---------------------------------------------------------------------------------

class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Broken(io.StringIO):
    def isatty(self) -> bool:
        raise OSError("gone")


def test_stdin_counts_as_a_terminal_only_when_it_is_one_and_open() -> None:
    leader, follower = os.openpty()
    with open(follower, "r", closefd=True) as tty:
        assert actor._isatty(tty) is True
    os.close(leader)
    assert actor._isatty(tty) is False  # closed: isatty raises ValueError
    with open(os.devnull) as null:
        assert actor._isatty(null) is False
    assert actor._isatty(None) is False
    assert actor._isatty(_Broken()) is False


# --- current() -------------------------------------------------------------------------------

def _no_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [FORCE_VAR, *{m.var for m in MARKERS}]:
        monkeypatch.delenv(name, raising=False)


def test_current_takes_the_front_s_terminal_fact_over_the_tty_checks(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_markers(monkeypatch)
    monkeypatch.setattr("core.engine.jobguard.job_origin", lambda: None)
    monkeypatch.setattr(actor, "_isatty", lambda stream: False)
    monkeypatch.setattr(actor, "has_controlling_terminal", lambda: False)
    assert actor.current(terminal=True) == Actor("person", "a terminal with no agent marker")
    assert actor.current(terminal=False) == Actor("agent", "no terminal on stdin")
    assert actor.current() == Actor("agent", "no terminal on stdin")
    assert actor.current(json=True, terminal=True) == Actor("agent", "--json asks for machine output")


def test_current_asks_stdin_then_the_controlling_terminal(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_markers(monkeypatch)
    monkeypatch.setattr("core.engine.jobguard.job_origin", lambda: None)
    monkeypatch.setattr(sys, "stdin", _Tty())
    monkeypatch.setattr(actor, "has_controlling_terminal", lambda: False)
    assert actor.current() == Actor("agent", "no controlling terminal")
    monkeypatch.setattr(actor, "has_controlling_terminal", lambda: True)
    assert actor.current() == Actor("person", "a terminal with no agent marker")


def test_current_counts_the_user_config_s_markers_and_the_job_check(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_markers(monkeypatch)
    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text("approvals:\n  agent_markers: [MY_BOT]\n")
    monkeypatch.setenv("MY_BOT", "1")
    monkeypatch.setattr("core.engine.jobguard.job_origin", lambda: None)
    assert actor._extra() == ("MY_BOT",)
    assert actor.current(terminal=True) == Actor(
        "agent", "MY_BOT is set: an agent named in your config's approvals.agent_markers", "MY_BOT")
    monkeypatch.setattr("core.engine.jobguard.job_origin", lambda: "it is in a job's cgroup (gpu-router-x-1)")
    assert actor.current(terminal=True) == Actor(
        "agent", "it runs inside a gpu-router job (it is in a job's cgroup (gpu-router-x-1))")


def test_a_config_that_does_not_load_adds_no_markers(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_markers(monkeypatch)
    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text("approvals:\n  agent_markers: 7\n")
    monkeypatch.setenv("MY_BOT", "1")
    monkeypatch.setattr("core.engine.jobguard.job_origin", lambda: None)
    assert actor._extra() == ()
    assert actor.current(terminal=True) == Actor("person", "a terminal with no agent marker")


# --- has_controlling_terminal: a real pty, a real new session ---------------------------------

_CHECK = "from core.engine.actor import has_controlling_terminal as h; print(h())"


def _tty_opens() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


def test_a_process_in_a_new_session_has_no_controlling_terminal() -> None:
    # asked here too, so that the mutation run's map of who calls it counts this test
    assert actor.has_controlling_terminal() is _tty_opens()
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60,
                         start_new_session=True, stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "False", out.stderr


def test_a_process_on_a_pty_of_its_own_has_a_controlling_terminal() -> None:
    assert actor.has_controlling_terminal() is _tty_opens()
    # pty.fork: the child leads a new session whose controlling terminal is the pty
    script = ("import os, pty, sys\n"
              "pid, fd = pty.fork()\n"
              "if pid == 0:\n"
              "    from core.engine.actor import has_controlling_terminal as h\n"
              "    os._exit(10 if h() else 11)\n"
              "out = b''\n"
              "while True:\n"
              "    try:\n"
              "        chunk = os.read(fd, 1024)\n"
              "    except OSError:\n"
              "        break\n"
              "    if not chunk:\n"
              "        break\n"
              "    out += chunk\n"
              "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), out)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.split(" ", 1)[0] == "10", (out.stdout, out.stderr)
