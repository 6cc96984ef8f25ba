"""Who is at the keyboard: a person, or an agent. The one rule every front asks.

Why it is more than `isatty()`: an agent can run `gpu` inside a pseudo-terminal (an agent's
tool shell often is one), and then stdin and stdout look like a person's. So a run is an
agent's when any of these holds, checked in this order:

0. the process runs inside a gpu-router job (core.engine.jobguard: its ancestors, cgroup or
   namespaces, never its environment): a job is not the person, whatever its terminal says;
1. `GPU_ROUTER_ACTOR` is set to anything but `person` (`agent` is the documented value; a
   typo fails closed). `GPU_ROUTER_ACTOR=person` does nothing: an agent could set it, so no
   variable can make a run a person's;
2. the environment carries a known agent marker (`MARKERS`, below; a user config can add
   more under `approvals: {agent_markers: [NAME, ...]}`), which coding agents set in the
   shells they run commands in and which their child processes inherit;
3. the command was asked for machine output (`--json`), or came in through MCP;
4. stdin is not a terminal, or the process has no controlling terminal (`/dev/tty` does not
   open: a detached process, a cron job, an agent's plain subprocess).

stdout is not asked: a person who pipes or redirects what `gpu` prints (`gpu submit run.py |
tee log`) still sits at the keyboard, and was wrongly held as an agent when it counted.

Otherwise it is a person's. A marker is a name in the environment, not proof: a person who
starts `gpu` from an agent's shell is treated as that agent and is told to use a terminal of
their own; an agent that strips every marker still meets the approval PIN, if one is set.
"""

from __future__ import annotations

import getpass
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping

FORCE_VAR = "GPU_ROUTER_ACTOR"


@dataclass(frozen=True)
class Marker:
    """An environment variable an agent tool sets for the commands it runs."""

    var: str
    tool: str
    value: str | None = None  # None: any non-empty value counts
    also: tuple[tuple[str, str], ...] = ()  # other variables that must hold these values too

    def found(self, env: Mapping[str, str]) -> bool:
        got = env.get(self.var)
        if not got or (self.value is not None and got != self.value):
            return False
        return all(env.get(k) == v for k, v in self.also)

    def describe(self) -> str:
        what = f"{self.var}={self.value}" if self.value is not None else self.var
        return what + "".join(f", {k}={v}" for k, v in self.also)


# Each line: the variable, the tool that sets it in the shells it runs commands in, and where
# that is visible. Only variables a tool sets for its own command runs are listed; ones that a
# person's plain terminal also carries (Cursor's CURSOR_TRACE_ID alone, Replit's REPL_ID, VS
# Code's TERM_PROGRAM) are not, so a person in those editors' terminals is not refused.
MARKERS: tuple[Marker, ...] = (
    # Claude Code sets CLAUDECODE=1 in its Bash tool's environment.
    Marker("CLAUDECODE", "Claude Code"),
    # OpenAI Codex CLI: CODEX_THREAD_ID on every shell command (codex-rs/protocol/src/
    # shell_environment.rs); CODEX_SANDBOX=seatbelt|landlock and CODEX_SANDBOX_NETWORK_DISABLED=1
    # under its sandbox (codex-rs/core/src/spawn.rs).
    Marker("CODEX_THREAD_ID", "OpenAI Codex CLI"),
    Marker("CODEX_SANDBOX", "OpenAI Codex CLI"),
    Marker("CODEX_SANDBOX_NETWORK_DISABLED", "OpenAI Codex CLI"),
    # Gemini CLI sets GEMINI_CLI=1 for every shell command it runs (shellExecutionService.ts);
    # Qwen Code, its fork, sets QWEN_CODE=1.
    Marker("GEMINI_CLI", "Gemini CLI"),
    Marker("QWEN_CODE", "Qwen Code"),
    # Cursor: the cursor-agent CLI and the editor's agent set CURSOR_AGENT=1; the editor's
    # agent terminals also carry CURSOR_TRACE_ID with its pager forced to a non-interactive one.
    Marker("CURSOR_AGENT", "Cursor agent"),
    Marker("CURSOR_TRACE_ID", "Cursor agent", also=(("PAGER", "head -n 10000 | cat"),)),
    # Cline sets CLINE_ACTIVE=true in the terminals it opens to run commands (its docs).
    Marker("CLINE_ACTIVE", "Cline"),
    # Goose's developer shell tool sets GOOSE_TERMINAL=1 (and AGENT=goose).
    Marker("GOOSE_TERMINAL", "Goose"),
    # Sourcegraph Amp sets AMP_CURRENT_THREAD_ID (and AGENT=amp) for its shell tool.
    Marker("AMP_CURRENT_THREAD_ID", "Amp"),
    # Augment's Auggie CLI sets AUGMENT_AGENT=1 for its shell tool.
    Marker("AUGMENT_AGENT", "Augment Auggie"),
    # OpenCode sets OPENCODE=1 in its own process, which its bash tool's commands inherit.
    Marker("OPENCODE", "OpenCode"),
    # Charm's Crush sets CRUSH=1 (and AGENT=crush, AI_AGENT=crush) on every shell exec.
    Marker("CRUSH", "Crush"),
    # Pi's coding agent sets PI_CODING_AGENT=true at startup; its bash tool passes it on.
    Marker("PI_CODING_AGENT", "Pi coding agent"),
    # Warp's agent sets OZ_RUN_ID for the commands it runs.
    Marker("OZ_RUN_ID", "Warp agent"),
    # The cross-tool conventions: AGENT=<name> (agents.md issue 136; Goose, Amp, Crush, Pi set
    # it) and AI_AGENT=<name> (Vercel's @vercel/detect-agent; Crush sets it).
    Marker("AGENT", "an agent (AGENT=<name> convention)"),
    Marker("AI_AGENT", "an agent (AI_AGENT=<name> convention)"),
)


@dataclass(frozen=True)
class Actor:
    """Who runs this command, and the one fact that decided it (said in refusals and events)."""

    kind: Literal["person", "agent"]
    why: str
    marker: str | None = None  # the variable that made it an agent's, if one did

    @property
    def is_person(self) -> bool:
        return self.kind == "person"

    def label(self, channel: str) -> str:
        """What the store records as the actor: the user's name for a person, the reason for
        an agent (never a variable's value: markers can carry session ids)."""
        if self.is_person:
            return f"{user_name()} ({channel})"
        return f"agent ({self.why}; {channel})"


def user_name() -> str:
    """The login name a person's decisions are recorded under."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def agent_marker(env: Mapping[str, str], extra: Iterable[str] = ()) -> Marker | None:
    """The first known marker (then the user's own `extra` names) present in `env`."""
    for marker in MARKERS:
        if marker.found(env):
            return marker
    for name in extra:
        if env.get(name):
            return Marker(name, "an agent named in your config's approvals.agent_markers")
    return None


def decide(*, stdin_tty: bool, ctty: bool, json: bool = False,
           env: Mapping[str, str] | None = None, extra_markers: Iterable[str] = (),
           in_job: str | None = None) -> Actor:
    """Person or agent, from the channel's facts, the environment and `in_job` (why this
    process is a job's, from core.engine.jobguard; see the module doc). `stdin_tty`: stdin
    is a terminal; `ctty`: the process has a controlling terminal (`/dev/tty` opens)."""
    if in_job:
        return Actor("agent", f"it runs inside a gpu-router job ({in_job})")
    env = os.environ if env is None else env
    forced = env.get(FORCE_VAR, "")
    if forced and forced.strip().lower() != "person":
        said = "agent" if forced == "agent" else "a value other than person"
        return Actor("agent", f"{FORCE_VAR} is set to {said}", FORCE_VAR)
    marker = agent_marker(env, extra_markers)
    if marker is not None:
        return Actor("agent", f"{marker.var} is set: {marker.tool}", marker.var)
    if json:
        return Actor("agent", "--json asks for machine output")
    if not stdin_tty:
        return Actor("agent", "no terminal on stdin")
    if not ctty:
        return Actor("agent", "no controlling terminal")
    return Actor("person", "a terminal with no agent marker")


def current(*, json: bool = False, terminal: bool | None = None) -> Actor:
    """The actor of this process. `terminal` overrides the tty facts for a front that has
    checked them itself (the dashboard refuses to start without a terminal; under a test
    pilot it has none); the environment and the user's extra markers are always read."""
    if terminal is None:
        stdin_tty, ctty = _isatty(sys.stdin), has_controlling_terminal()
    else:
        stdin_tty = ctty = terminal
    from core.engine.jobguard import job_origin

    return decide(stdin_tty=stdin_tty, ctty=ctty, json=json, extra_markers=_extra(),
                  in_job=job_origin())


def has_controlling_terminal() -> bool:
    """Whether this process has a controlling terminal: `/dev/tty` opens (Linux and macOS
    alike). A terminal on stdin alone could be a pty an agent handed over without a session."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return False
    os.close(fd)
    return True


def mcp() -> Actor:
    """Anything that arrives through MCP is an agent's, whatever its environment says."""
    return Actor("agent", "it came through MCP")


def _isatty(stream) -> bool:
    try:
        return bool(stream) and stream.isatty()
    except (ValueError, OSError):  # a closed stream
        return False


def _extra() -> tuple[str, ...]:
    """The user's own markers; a config that does not load adds none here (the command that
    needs it, such as submit, says what is wrong with it)."""
    from core.config import user as userconfig
    from core.errors import UserError

    try:
        return tuple(userconfig.load().agent_markers)
    except UserError:
        return ()
