"""The installed `gpu dash` in a real terminal: tmux for the approval flow, a pty for escapes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_exe, gpu_json, make_git_project, pty_session, wait_state
from tests.services import require

pytestmark = pytest.mark.slow

HOSTILE = (
    "import sys, time\n"
    "print('before-marker', flush=True)\n"
    "sys.stdout.write('clip\\x1b]52;c;UFdORUQ=\\x07 title\\x1b]0;PWNED-TITLE\\x07 t2\\x1b]2;PWNED2\\x1b\\\\ '"
    " 'clear\\x1b[2J home\\x1b[H c1\\x9b2J osc8\\x1b]8;;file:///etc/passwd\\x1b\\\\click\\x1b]8;;\\x1b\\\\\\n')\n"
    "print('[link=file:///etc]inert[/link]', flush=True)\n"
    "sys.stdout.write('never-ends\\x1b]0;SWALLOWED\\n')\n"
    "sys.stdout.buffer.write(b'c1-never-ends\\x9d8;;SWALLOWED2\\n')\n"
    "sys.stdout.buffer.write(b'raw8bit \\x9b31m red\\n')\n"
    "print('after-marker', flush=True)\n"
    "time.sleep(30)\n"
)


class Tmux:
    def __init__(self, env: dict) -> None:
        self.exe = require("tmux")["tmux"]
        self.sock = f"gpu-test-{os.getpid()}-{time.monotonic_ns()}"
        self.env = env

    def run(self, *args: str) -> str:
        return subprocess.run([self.exe, "-L", self.sock, "-f", "/dev/null", *args], capture_output=True,
                              text=True, timeout=30, env=self.env).stdout

    def start(self, command: str) -> None:
        # a dash that ends leaves its last screen (a traceback) in the pane, for the failure to show
        self.run("start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                 "new-session", "-d", "-x", "120", "-y", "36", "-s", "dash", command)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "dash")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "dash", *keys)

    def wait_for(self, predicate, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        from core import paths

        log = paths.error_log_file()
        errors = log.read_text(errors="replace")[-4000:] if log.exists() else "(no error log)"
        raise AssertionError(f"the screen never showed what was expected; last screen:\n{text}\n"
                             f"error log:\n{errors}")

    def close(self) -> None:
        self.run("kill-server")


def _row(screen: str, short: str) -> str:
    return next((line for line in screen.splitlines() if short in line and "log" not in line), "")


def test_tmux_sees_a_submitted_job_approves_it_and_watches_it_finish(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"work.py": (
        "import time, gpu\n"
        "for i in range(6):\n"
        "    gpu.log(step=i, loss=1.0 / (i + 1))\n"
        "    print('working', i, flush=True)\n"
        "    time.sleep(0.5)\n")})
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "36"}
    tmux = Tmux(env)
    try:
        tmux.start(f"{gpu_exe()} dash")
        tmux.wait_for(lambda s: "gpu-router" in s and "TARGET" in s)
        sub = gpu_json("submit", "work.py", "--wait-s", "0", cwd=project)["job"]  # an agent: held
        short = sub["short_id"]
        screen = tmux.wait_for(lambda s: short in s and "needs approval" in _row(s, short))
        assert "1 awaiting approval" in screen
        tmux.keys("g")
        tmux.keys("a")
        tmux.wait_for(lambda s: f"Approve job {short}" in s and "y approve" in s)
        tmux.keys("y")
        tmux.wait_for(lambda s: "running" in _row(s, short) or "done" in _row(s, short), timeout=60)
        screen = tmux.wait_for(lambda s: "done" in _row(s, short), timeout=90)
        assert "working 5" in screen  # the log pane followed the job to its end
        assert wait_state(short, {"done"})["state"] == "done"
    finally:
        tmux.close()


def test_tmux_finds_the_oldest_of_10_000_jobs(home: Path) -> None:
    """10,000 jobs in the real store, the installed `gpu dash` in a real tmux pane: End brings
    the oldest job's row onto the screen, and so does typing its name into the filter."""
    from tests.tui.dash.test_dash import _seed_many

    ids = _seed_many(10_000)  # job 0 the newest, job 9999 (id 0000270f...) the oldest
    oldest, newest = ids[-1][:8], ids[0][:8]
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "36"}
    tmux = Tmux(env)
    try:
        tmux.start(f"{gpu_exe()} dash")
        screen = tmux.wait_for(lambda s: "10,000 jobs" in s and "job-0 " in _row(s, newest), timeout=90)
        assert oldest not in screen  # the newest first: the oldest is 10,000 rows down
        tmux.keys("End")
        screen = tmux.wait_for(lambda s: "job-9999" in _row(s, oldest))
        assert _row(screen, newest) == ""  # the table scrolled (the log pane's title may lag)
        tmux.keys("Home")
        tmux.wait_for(lambda s: "job-0 " in _row(s, newest) and _row(s, oldest) == "")
        tmux.keys("/")
        tmux.keys("-l", "job-9999")  # typed as literal text, key by key
        tmux.keys("Enter")
        screen = tmux.wait_for(lambda s: "1 of 10,000 jobs match" in s and "job-9999" in _row(s, oldest))
        assert _row(screen, newest) == ""
    finally:
        tmux.close()


def _record_dash(env: dict, until: list[bytes], seconds: float = 90, settle: float = 2) -> bytes:
    """Every byte `gpu dash` writes to a 36x140 terminal until each of `until` was drawn (and
    `settle` seconds more, for whatever a hostile line would draw after it) or `seconds` passed,
    then `q`. Waiting for what is asserted, not a fixed time: a loaded machine draws late."""
    give_up = time.monotonic() + seconds
    state: dict = {"quit": False, "seen": None}

    def react(out: bytes) -> bytes | None:
        now = time.monotonic()
        if state["seen"] is None and all(u in out for u in until):
            state["seen"] = now
        due = now > give_up or (state["seen"] is not None and now > state["seen"] + settle)
        if not state["quit"] and due:
            state["quit"] = True
            return b"q"
        return None

    _, out = pty_session([gpu_exe(), "dash"], react, env=env, size=(36, 140), timeout=seconds + 15)
    return out


def test_job_output_cannot_drive_the_terminal(home: Path, tmp_path: Path) -> None:
    project = make_git_project(tmp_path / "p", {"hostile.py": HOSTILE})
    sub = gpu_json("submit", "hostile.py", "--hours", "0.1", "--wait-s", "10", cwd=project)["job"]
    log = home / "jobs" / sub["id"] / "job.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and b"after-marker" in log.read_bytes()):
        assert time.monotonic() < deadline, "the hostile job never printed"
        time.sleep(0.2)
    # the launcher stores the log already filtered (and masked) ...
    assert b"\x1b]52;" not in log.read_bytes() and b"\x1b" not in log.read_bytes()
    # ... and the display filters again: bytes that reach the log some other way (a scheduler's
    # own output file, an older gpu-router) are shown as text too
    with open(log, "ab") as f:
        f.write(b"raw-again \x1b]52;c;UFdORUQ=\x07 \x1b]0;PWNED2\x07 \x1b[2J \x9b2J\n"
                b"\x1b]8;;file:///etc/passwd\x1b\\click\x1b]8;;\x1b\\ after-marker-2\n")
    out = _record_dash({**os.environ, "TERM": "xterm-256color"}, until=[b"after-marker-2"])
    text = out.decode("utf-8", "replace")
    assert "after-marker" in text and "after-marker-2" in text, "the dashboard did not show the job's log"
    for bad in ("\x1b]52", "PWNED-TITLE", "PWNED2", "\x1b]0;", "\x1b]2;", "\x1b]8;", "\x1b[2J", "\u009b",
                "file:///etc/passwd", "SWALLOWED"):
        assert bad not in text, f"{bad!r} reached the terminal"
    assert "[link=file:///etc]inert[/link]" in text  # markup look-alikes are shown, not obeyed
    gpu_json("cancel", sub["short_id"])


def test_approval_modal_detail_and_palette_show_hostile_args_as_text(home: Path, tmp_path: Path) -> None:
    """A held job whose args carry escapes, bidi and markup: the table, the approval modal and
    the detail screen show them as text, and the terminal receives none of them."""
    project = make_git_project(tmp_path / "p", {"a.py": "print('ran')\n"})
    link = "[link=file:///etc/passwd]click[/link]"
    escaped_link = "\\[link=file:///etc/passwd]bs\\[/link]"  # a backslash: Rich's own escape
    args = ["\x1b]52;c;UFdORUQ=\x07", link, escaped_link, "\u202eevil\u2066", "\u009b2J", "\x1b]0;T\x07"]
    sub = gpu_json("submit", "a.py", "--wait-s", "0", "--", *args, cwd=project)["job"]
    assert sub["state"] == "awaiting_approval"
    # the table -> a: the approval modal (its key hints drawn last) -> esc: back to the table ->
    # enter: the detail screen -> esc -> q
    steps = [(b"needs approval", b"a"), (b"approve this plan", b"\x1b"), (b"needs approval", b"\r"),
             (b"request", b"\x1b"), (None, b"q")]
    seen = {"step": 0, "at": 0, "since": time.monotonic()}

    def react(out: bytes) -> bytes | None:
        if seen["step"] >= len(steps):
            return None
        wait_for, key = steps[seen["step"]]
        fresh = out[seen["at"]:]
        if (wait_for is None or wait_for in fresh) and time.monotonic() - seen["since"] > 1.0:
            seen.update(step=seen["step"] + 1, at=len(out), since=time.monotonic())
            return key
        return None

    _, out = pty_session([gpu_exe(), "dash"], react, env={**os.environ, "TERM": "xterm-256color"},
                         size=(40, 160), timeout=90)
    assert seen["step"] == len(steps), f"the dashboard stopped at step {seen['step']}: {out[-2000:]!r}"
    text = out.decode("utf-8", "replace")
    # (the detail screen shows the args list with repr: "\\x1b]52..." as inert text)
    for bad in ("\x1b]52", "\x1b]0;", "\x1b]8;", "\x1b[2J", "\u009b", "\u202e", "\u2066"):
        assert bad not in text, f"{bad!r} reached the terminal"
    assert link in text and escaped_link in text and "evil" in text  # shown, not obeyed
