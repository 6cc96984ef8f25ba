"""Who counts as a person: each fact alone makes a run an agent's, with its own reason (issue 40).

core/engine/actor.decide is the one judgment of who runs a command (approving needs a person).
A run is a person's exactly when it is no job's process, GPU_ROUTER_ACTOR says nothing but
`person`, no agent marker is set, no --json is asked, stdin is a terminal and the process has a
controlling terminal. Here each fact is set alone from a person's run and must give an agent's
run with the exact reason; a hypothesis property checks every combination against the rule
written out. The markers written out here must each still count (a marker removed fails).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.engine.actor import FORCE_VAR, MARKERS, decide

# The agent tools' variables that make a run an agent's (a variable removed from MARKERS fails)
MARKER_VARS = {
    "CLAUDECODE": "Claude Code", "CODEX_THREAD_ID": "OpenAI Codex CLI", "CODEX_SANDBOX": "OpenAI Codex CLI",
    "CODEX_SANDBOX_NETWORK_DISABLED": "OpenAI Codex CLI", "GEMINI_CLI": "Gemini CLI", "QWEN_CODE": "Qwen Code",
    "CURSOR_AGENT": "Cursor agent", "CLINE_ACTIVE": "Cline", "GOOSE_TERMINAL": "Goose",
    "AMP_CURRENT_THREAD_ID": "Amp", "AUGMENT_AGENT": "Augment Auggie", "OPENCODE": "OpenCode",
    "CRUSH": "Crush", "PI_CODING_AGENT": "Pi coding agent", "OZ_RUN_ID": "Warp agent",
    "AGENT": "an agent (AGENT=<name> convention)", "AI_AGENT": "an agent (AI_AGENT=<name> convention)",
}
PERSON = dict(stdin_tty=True, ctty=True, json=False, env={}, extra_markers=(), in_job=None)


def test_a_terminal_with_nothing_else_is_a_person() -> None:
    actor = decide(**PERSON)
    assert actor.kind == "person" and actor.why == "a terminal with no agent marker"
    assert decide(**{**PERSON, "env": {FORCE_VAR: "person"}}).kind == "person"


@pytest.mark.parametrize("change, why", [
    (dict(in_job="it is in a job's cgroup (gpu-router-ab12-1)"),
     "it runs inside a gpu-router job (it is in a job's cgroup (gpu-router-ab12-1))"),
    (dict(env={FORCE_VAR: "agent"}), f"{FORCE_VAR} is set to agent"),
    (dict(env={FORCE_VAR: "robot"}), f"{FORCE_VAR} is set to a value other than person"),
    (dict(json=True), "--json asks for machine output"),
    (dict(stdin_tty=False), "no terminal on stdin"),
    (dict(ctty=False), "no controlling terminal"),
    (dict(env={"MY_BOT": "1"}, extra_markers=("MY_BOT",)),
     "MY_BOT is set: an agent named in your config's approvals.agent_markers"),
    (dict(env={"CURSOR_TRACE_ID": "t", "PAGER": "head -n 10000 | cat"}), "CURSOR_TRACE_ID is set: Cursor agent"),
], ids=["in_job", "forced", "forced-other", "json", "no-stdin-tty", "no-ctty", "extra-marker", "cursor"])
def test_each_fact_alone_makes_an_agent_with_its_reason(change: dict, why: str) -> None:
    actor = decide(**{**PERSON, **change})
    assert actor.kind == "agent", actor
    assert actor.why == why


@pytest.mark.parametrize("var", sorted(MARKER_VARS))
def test_each_agent_tool_s_marker_alone_makes_an_agent(var: str) -> None:
    assert var in {m.var for m in MARKERS}, f"{var} is no longer an agent marker"
    actor = decide(**{**PERSON, "env": {var: "1"}})
    assert actor.kind == "agent" and actor.why == f"{var} is set: {MARKER_VARS[var]}", actor
    assert actor.marker == var
    assert decide(**{**PERSON, "env": {var: ""}}).kind == "person"  # empty is unset


def test_a_cursor_terminal_without_the_agent_s_pager_is_a_person() -> None:
    assert decide(**{**PERSON, "env": {"CURSOR_TRACE_ID": "t"}}).kind == "person"


@given(in_job=st.sampled_from([None, "", "it descends from the job launcher (pid 9)"]),
       forced=st.sampled_from([None, "person", " Person ", "agent", "yes", ""]),
       marker=st.one_of(st.none(), st.sampled_from(sorted(MARKER_VARS))),  # none: half the time
       json=st.booleans(), stdin_tty=st.booleans(), ctty=st.booleans())
def test_a_person_exactly_when_the_rule_says(in_job, forced, marker, json, stdin_tty, ctty) -> None:
    env = {}
    if forced is not None:
        env[FORCE_VAR] = forced
    if marker:
        env[marker] = "1"
    actor = decide(stdin_tty=stdin_tty, ctty=ctty, json=json, env=env, in_job=in_job)
    person = (not in_job and (not forced or forced.strip().lower() == "person") and not marker
              and not json and stdin_tty and ctty)
    assert actor.is_person is person, (actor, env)
    assert actor.why, actor
