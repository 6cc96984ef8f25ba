"""The approval PIN locks after five wrong tries, for 15 minutes and then twice as long each
time, across processes and across gpu-router homes and config copies: the count lives with the
PIN (core/engine/pin.py `tries_file`), each try an event and a supervisor.log line.

Time moves through an injected clock (no sleeps); two real processes share the count.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.errors import UserError
from core.engine import pin as pinmod

PIN = "48213579"
WRONG = "48210000"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def held(home: Path, monkeypatch: pytest.MonkeyPatch):
    """A PIN set, a store with a held job (the dashboard's demo state)."""
    from core.jobs.store import Store
    from tui.dash.demo import _id, seed

    monkeypatch.setenv("GPU_ROUTER_IDLE_EXIT_S", "5")
    seed()
    pinmod.save(PIN)
    store = Store()
    return store, store.get(_id(3))


def _try(store, job, entered: str, clock, waits: list | None = None) -> str | None:
    """None when the PIN passed, else the refusal's message."""
    try:
        assert pinmod.require(entered, where="test", store=store, job=job, actor="tester (terminal)",
                              clock=clock, sleep=(waits.append if waits is not None else lambda s: None))
        return None
    except UserError as exc:
        return exc.message()


def _pin_events(store, job) -> list:
    return [e for e in store.events(job.id) if "pin" in e.data]


def test_five_wrong_tries_lock_even_the_right_pin_then_time_opens_it(held) -> None:
    store, job = held
    clock, waits = Clock(), []
    for n in range(1, 5):
        said = _try(store, job, WRONG, clock, waits)
        assert "wrong approval PIN: nothing was approved" in said and f"{5 - n} tries left" in said
        clock.now += 10
    said = _try(store, job, WRONG, clock, waits)
    assert "5 times in a row" in said and "locked until" in said
    assert waits == [pinmod.WRONG_DELAY_S] * 5  # each wrong try waited (here: recorded, not slept)
    until = pinmod.local_time(clock.now + 15 * 60, clock.now)
    clock.now += 60
    said = _try(store, job, PIN, clock, waits)  # the right PIN, while locked
    assert said is not None and f"locked until {until} (local time)" in said
    assert "even the right PIN is refused" in said and "5 wrong tries" in said
    assert len(waits) == 5  # a locked try runs no scrypt and waits for nothing
    clock.now += 15 * 60 - 61
    assert "locked until" in _try(store, job, PIN, clock)  # one second before it opens
    clock.now += 2
    assert _try(store, job, PIN, clock) is None  # open again; and the right PIN resets the count
    for _ in range(4):
        assert "tries left" in _try(store, job, WRONG, clock)
    assert _try(store, job, PIN, clock) is None  # four wrong, then right: no lock
    assert "4 tries left" in _try(store, job, WRONG, clock)

    events = _pin_events(store, job)
    wrong = [e for e in events if e.data["pin"] == "wrong"]
    assert len(wrong) == 5 + 4 + 1
    assert [e.data["try"] for e in wrong[:5]] == [1, 2, 3, 4, 5]
    assert "the PIN is locked until" in wrong[4].reason and wrong[4].actor == "tester (terminal)"
    assert len([e for e in events if e.data["pin"] == "locked"]) == 2
    assert store.get(job.id).state.value == "awaiting_approval"


def test_each_lockout_lasts_twice_the_one_before_until_a_right_pin(held) -> None:
    store, job = held
    clock = Clock()
    lengths = []
    for _ in range(4):
        for _ in range(5):
            _try(store, job, WRONG, clock)
        row = pinmod.tries_row(pinmod.stored())[1:]
        lengths.append(row[0] - clock.now)
        clock.now = row[0]  # the moment it opens
    assert lengths == [900, 1800, 3600, 7200]
    assert _try(store, job, PIN, clock) is None
    assert pinmod.tries_row(pinmod.stored()) is None
    for _ in range(5):
        _try(store, job, WRONG, clock)
    row = pinmod.tries_row(pinmod.stored())[1:]
    assert row[0] - clock.now == 900  # the doubling starts over after a right PIN


def test_every_wrong_try_is_a_line_in_the_supervisors_log_without_the_pin(held) -> None:
    from core import paths

    store, job = held
    clock = Clock()
    for _ in range(6):
        _try(store, job, WRONG, clock)
    lines = paths.daemon_log_file().read_text().splitlines()
    wrong = [ln for ln in lines if "wrong approval PIN" in ln]
    assert len(wrong) == 5 and all(f"job {job.short_id}" in ln and "WARNING" in ln for ln in wrong)
    assert "tester (terminal)" in wrong[0] and "try 1 of 5" in wrong[0]
    assert any("refused while locked" in ln for ln in lines)
    assert WRONG not in paths.daemon_log_file().read_text()
    for path in paths.home().rglob("*"):
        if path.is_file():
            assert WRONG.encode() not in path.read_bytes() and PIN.encode() not in path.read_bytes(), path


TRIES = textwrap.dedent('''
    import sys
    from core.errors import UserError
    from core.engine import pin
    for _ in range(int(sys.argv[2])):
        try:
            pin.require(sys.argv[1], where="process", sleep=lambda s: None)
            print("passed")
        except UserError as exc:
            print("locked" if "locked until" in exc.message() and "5 times" not in exc.message()
                  else "wrong")
''')


def _process(entered: str, times: int, env: dict | None = None) -> subprocess.Popen:
    import os

    return subprocess.Popen([sys.executable, "-c", TRIES, entered, str(times)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def test_a_scratch_home_or_a_copied_config_meets_the_same_count(held, tmp_path: Path) -> None:
    """The issue's escape: locked in the person's home, the guesser points GPU_ROUTER_HOME at a
    scratch folder, with the config as it is and as a copy elsewhere (HOME and XDG moved too):
    every guess there is refused as locked, the right one too."""
    import os
    import shutil

    store, job = held
    first = _process(WRONG, 5)
    assert first.communicate(timeout=60)[0].split() == ["wrong"] * 5  # the fifth locks it
    assert "locked until" in _try(store, job, PIN, __import__("time").time)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = tmp_path / "copied" / "config.yaml"
    config.parent.mkdir()
    shutil.copy(os.environ["GPU_ROUTER_CONFIG"], config)
    for env in ({"GPU_ROUTER_HOME": str(scratch)},
                {"GPU_ROUTER_HOME": str(scratch / "h2"), "GPU_ROUTER_CONFIG": str(config),
                 "HOME": str(scratch), "XDG_CONFIG_HOME": str(scratch), "XDG_DATA_HOME": str(scratch)}):
        guesser = _process(PIN, 2, env)
        assert guesser.communicate(timeout=60)[0].split() == ["locked", "locked"], env


def test_two_processes_share_the_count(held) -> None:
    store, job = held
    first = _process(WRONG, 3)
    assert first.communicate(timeout=60)[0].split() == ["wrong"] * 3
    second = _process(WRONG, 3)
    assert second.communicate(timeout=60)[0].split() == ["wrong", "wrong", "locked"]
    import time

    assert "locked until" in _try(store, job, PIN, time.time)  # and so is this process, at once


def test_processes_racing_get_five_tries_between_them(held) -> None:
    """Each try is decided in one write transaction, so parallel guessers cannot share out
    more than five wrong tries before the lock."""
    procs = [_process(WRONG, 4) for _ in range(4)]
    said = [word for p in procs for word in p.communicate(timeout=120)[0].split()]
    assert said.count("wrong") == 5 and said.count("locked") == 11


# -- the rule as a property -------------------------------------------------------------------


def _model(steps: list[tuple[bool, int]]) -> list[str]:
    """The rule in a few lines: what each try should get."""
    now, wrong, lockouts, until, out = T0, 0, 0, None, []
    for right, advance in steps:
        now += advance
        if until is not None and now < until:
            out.append("locked")
        elif right:
            wrong, lockouts, until = 0, 0, None
            out.append("passed")
        else:
            wrong += 1
            if wrong >= 5:
                lockouts += 1
                until, wrong = now + 900 * 2 ** (lockouts - 1), 0
                out.append("locks")
            else:
                until = None
                out.append("wrong")
    return out


@settings(max_examples=examples(60), deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 1, 60, 899, 900, 1800, 4000, 9000])),
                      max_size=30))
def test_the_lock_follows_the_rule_for_any_sequence(tmp_path_factory, steps) -> None:
    """A fast stand-in for scrypt; the store, the transaction and the clock are the real code."""
    from core.jobs.store import Store

    home = tmp_path_factory.mktemp("h")
    store = Store(home / "db.sqlite")
    import os

    record = {"salt": os.urandom(16).hex()}  # the count is the account's: a fresh PIN per example
    real_stored, real_matches, real_log = pinmod.stored, pinmod.matches, pinmod._log
    pinmod.stored, pinmod.matches = (lambda: record), (lambda rec, entered: entered == PIN)
    pinmod._log = lambda *a, **k: None
    clock, got = Clock(), []
    try:
        for right, advance in steps:
            clock.now += advance
            said = _try(store, None, PIN if right else WRONG, clock)
            got.append("passed" if said is None else "locked" if "even the right PIN" in said
                       else "locks" if "5 times in a row" in said else "wrong")
    finally:
        pinmod.stored, pinmod.matches, pinmod._log = real_stored, real_matches, real_log
        store.close()
    assert got == _model(steps)
