"""The PIN lockout, one test per part of its rule (issue 40; docs/security/approvals.md):

- the count lives in `pin-tries.sqlite3` in the account's own config folder, found from the
  password database: never from GPU_ROUTER_HOME, GPU_ROUTER_CONFIG, HOME or XDG_*;
- after 5 wrong tries in a row the PIN locks for 15 minutes, each further lockout twice as long,
  the doubling capped at 2**16; while locked even the right PIN is refused, with the time it
  opens; the lock opens at its end exactly;
- a right PIN resets the count and the doubling; time alone does not (a lock's end resets the
  count of tries, not the doubling), except that rows whose lock ended 90 days ago are dropped;
- each refusal says exactly why (tries left, the lock, the missing PIN) and never the PIN.

Quick: a real config and a real tries file, scrypt at its cheapest allowed parameters (n=2^10,
r=1), time through an injected clock.
"""

from __future__ import annotations

import os
import pwd
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.config import edit
from core.engine import pin as pinmod
from core.errors import UserError
from core.jobs.store import Job, Store

PIN = "4821357900"
WRONG = "4821357911"
T0 = 1_800_000_000.0
CHEAP = {"n": 2 ** 10, "r": 1, "p": 1}  # the config's lowest scrypt parameters: a try in ~1 ms


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pinned(home: Path) -> tuple[Store, Job, dict]:
    """A PIN set in this test's user config (a fresh salt: a row of its own in the tries file)
    and a held job to carry the events."""
    record = pinmod.make(PIN, **CHEAP)
    edit.save_section_key("approvals", "pin", record)
    store = Store()
    jid = os.urandom(16).hex()
    job = store.insert_job({
        "id": jid, "short_id": jid[:8], "name": "t", "provider": "local", "project_dir": str(home),
        "outputs_dir": str(home / "runs" / jid[:8]), "fingerprint": "fp", "request": {},
        "plan": {}, "bundle": {}, "handle": {}}, reason="test", actor="test")
    yield store, job, record
    store.close()


def attempt(store: Store, job: Job | None, entered: str | None, clock: Clock,
            waits: list[float] | None = None) -> str:
    """'passed', or what the refusal says (its `what`; its `where` is the front's)."""
    try:
        checked = pinmod.require(entered, where="gpu approve", store=store, job=job,
                                 actor="tester (terminal)", clock=clock,
                                 sleep=(waits.append if waits is not None else lambda s: None))
    except UserError as exc:
        assert exc.where == "gpu approve"
        return exc.what
    assert checked is True
    return "passed"


def row(record: dict) -> tuple | None:
    """The count as the tries file holds it, read with sqlite itself."""
    path = pinmod.tries_file()
    with sqlite3.connect(path) as db:
        return db.execute("SELECT wrong, locked_until, lockouts FROM pin_tries WHERE pin = ?",
                          (record["salt"],)).fetchone()


def at(ts: float) -> str:
    return pinmod.local_time(ts, ts)


# -- where the count lives ------------------------------------------------------------------

def test_the_count_lives_in_the_accounts_config_folder_whatever_the_environment_says(
        pinned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, job, record = pinned
    for var in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    folder = "Library/Application Support/gpu-router" if sys.platform == "darwin" else ".config/gpu-router"
    expected = Path(pwd.getpwuid(os.getuid()).pw_dir) / folder / "pin-tries.sqlite3"
    assert pinmod.tries_file() == expected
    assert attempt(store, job, WRONG, Clock()).startswith("wrong approval PIN: nothing was approved (4 tries")
    assert row(record) == (1, None, 0)
    # nothing of the count under the home, the config's folder or the variables' folders
    planted = [p for p in tmp_path.rglob("*") if "tries" in p.name]
    assert planted == []


def test_a_scratch_home_and_config_copy_meet_the_same_count(pinned, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Four wrong tries under one home, the fifth under a fresh GPU_ROUTER_HOME and a copy of the
    config: it locks."""
    store, job, record = pinned
    clock = Clock()
    for _ in range(4):
        attempt(store, job, WRONG, clock)
    copy = tmp_path / "copied-config.yaml"
    copy.write_text(Path(os.environ["GPU_ROUTER_CONFIG"]).read_text())
    (tmp_path / "scratch").mkdir()
    monkeypatch.setenv("GPU_ROUTER_HOME", str(tmp_path / "scratch"))
    monkeypatch.setenv("GPU_ROUTER_CONFIG", str(copy))
    scratch = Store()
    try:
        said = attempt(scratch, None, WRONG, clock)
    finally:
        scratch.close()
    assert said.startswith("wrong approval PIN, 5 times in a row: nothing was approved; the PIN is "
                           f"now locked until {at(T0 + 900)} (local time)")


# -- tries, the lock and its end --------------------------------------------------------------

def test_each_wrong_try_says_how_many_are_left_then_the_fifth_locks_for_15_minutes(pinned) -> None:
    store, job, record = pinned
    clock, waits = Clock(), []
    for n in range(1, 5):
        said = attempt(store, job, WRONG, clock, waits)
        assert said.startswith(f"wrong approval PIN: nothing was approved ({5 - n} tries left "
                               "before it locks for a while)"), said
        assert row(record) == (n, None, 0)
    said = attempt(store, job, WRONG, clock, waits)
    assert said.startswith(f"wrong approval PIN, 5 times in a row: nothing was approved; the PIN "
                           f"is now locked until {at(T0 + 900)} (local time)"), said
    assert row(record) == (0, T0 + 900, 1)
    assert waits == [1.0] * 5  # every wrong try waits a second, the locking one too
    tries = [e.data for e in store.events(job.id) if e.data.get("pin") == "wrong"]
    assert [d["try"] for d in tries] == [1, 2, 3, 4, 5]
    assert [d["locked_until"] for d in tries] == [None] * 4 + [T0 + 900]
    assert [d["lockouts"] for d in tries] == [0] * 4 + [1]
    assert all(PIN not in e.reason and WRONG not in e.reason for e in store.events(job.id))


def test_while_locked_even_the_right_pin_is_refused_until_the_lock_ends_exactly(pinned) -> None:
    store, job, record = pinned
    clock, waits = Clock(), []
    for _ in range(5):
        attempt(store, job, WRONG, clock)
    for dt in (0, 1, 899, 899.999):
        clock.now = T0 + dt
        said = attempt(store, job, PIN, clock, waits)
        assert said.startswith(f"the approval PIN is locked until {at(T0 + 900)} (local time), after "
                               "5 wrong tries in a row; even the right PIN is refused until then: "
                               "nothing was approved"), (dt, said)
    assert waits == []  # a refusal while locked does not wait
    assert row(record) == (0, T0 + 900, 1)  # refusals while locked do not count
    locked = [e for e in store.events(job.id) if e.data.get("pin") == "locked"]
    assert len(locked) == 4 and locked[0].data["locked_until"] == T0 + 900
    clock.now = T0 + 900
    assert attempt(store, job, PIN, clock, waits) == "passed"
    assert row(record) is None  # the right PIN removed the count


def test_a_wrong_try_while_locked_does_not_extend_the_lock(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        attempt(store, job, WRONG, clock)
    clock.now = T0 + 600
    assert "even the right PIN is refused" in attempt(store, job, WRONG, clock)
    assert row(record) == (0, T0 + 900, 1)


def test_after_a_lock_the_next_five_wrong_tries_lock_twice_as_long(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    start, expected_until = T0, []
    for lockout in range(1, 5):
        for _ in range(4):
            assert "tries left" in attempt(store, job, WRONG, clock)
        said = attempt(store, job, WRONG, clock)
        until = clock.now + 900 * 2 ** (lockout - 1)
        assert f"now locked until {at(until)}" in said, said
        assert row(record) == (0, until, lockout)
        expected_until.append(until)
        clock.now = until  # the lock ends: the count of tries starts again, the doubling does not
    assert [u - start for u in expected_until] == [900 * 1, 900 * 3, 900 * 7, 900 * 15]
    event = [e for e in store.events(job.id) if e.data.get("lockouts") == 4][0]
    assert event.reason.endswith("(lockout 4, 120 minutes)")


def test_a_right_pin_resets_the_count_and_the_doubling(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        attempt(store, job, WRONG, clock)
    clock.now = T0 + 900
    for _ in range(3):
        attempt(store, job, WRONG, clock)
    assert row(record) == (3, None, 1)
    assert attempt(store, job, PIN, clock) == "passed"
    assert row(record) is None
    for _ in range(4):
        attempt(store, job, WRONG, clock)
    said = attempt(store, job, WRONG, clock)
    assert f"now locked until {at(clock.now + 900)}" in said  # 15 minutes again, not 30
    assert row(record) == (0, clock.now + 900, 1)


def test_time_alone_does_not_reset_the_count_within_90_days(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    for _ in range(4):
        attempt(store, job, WRONG, clock)
    clock.now = T0 + 90 * 86400  # exactly 90 days after the last wrong try: still counted
    assert attempt(store, job, WRONG, clock).startswith("wrong approval PIN, 5 times in a row")


def test_a_count_untouched_for_more_than_90_days_is_dropped(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    for _ in range(4):
        attempt(store, job, WRONG, clock)
    clock.now = T0 + 90 * 86400 + 1
    said = attempt(store, job, WRONG, clock)
    assert said.startswith("wrong approval PIN: nothing was approved (4 tries left"), said
    assert row(record) == (1, None, 0)


def test_a_lock_is_remembered_until_90_days_after_it_ended(pinned) -> None:
    """The row of a lockout stays (its doubling with it) until its lock ended 90 days ago."""
    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        attempt(store, job, WRONG, clock)
    ended = T0 + 900
    clock.now = ended + 90 * 86400  # not yet dropped: the next lockout doubles
    for _ in range(5):
        said = attempt(store, job, WRONG, clock)
    assert row(record) == (0, clock.now + 1800, 2), said
    clock.now += 1800 + 90 * 86400 + 1  # dropped: the next lockout is the first again
    for _ in range(5):
        attempt(store, job, WRONG, clock)
    assert row(record) == (0, clock.now + 900, 1)


def test_dropping_old_counts_leaves_a_recent_one_of_another_pin(pinned) -> None:
    store, job, record = pinned
    other = {"salt": os.urandom(16).hex()}
    clock = Clock()
    with pinmod.tries() as db:
        db.execute("INSERT INTO pin_tries (pin, wrong, locked_until, lockouts, last_wrong) VALUES "
                   "(?, 3, NULL, 0, ?)", (other["salt"], T0 - 86400))
    attempt(store, job, WRONG, clock)
    assert row(other) == (3, None, 0)
    with pinmod.tries() as db:
        db.execute("DELETE FROM pin_tries WHERE pin = ?", (other["salt"],))


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(min_value=0, max_value=40))
def test_each_lockout_lasts_15_minutes_doubled_and_the_doubling_stops_at_2_to_the_16(k: int) -> None:
    assert pinmod.lock_seconds(k) == 900.0 * 2 ** min(max(k - 1, 0), 16)


def test_lock_lengths_at_their_edges() -> None:
    assert [pinmod.lock_seconds(k) for k in (0, 1, 2, 3, 17, 18)] == \
        [900.0, 900.0, 1800.0, 3600.0, 900.0 * 65536, 900.0 * 65536]


# -- the other refusals ----------------------------------------------------------------------

def test_no_pin_set_passes_without_counting(home: Path) -> None:
    store = Store()
    try:
        assert pinmod.require(None, where="gpu approve", store=store, clock=Clock()) is False
        assert pinmod.require(WRONG, where="gpu approve", store=store, clock=Clock()) is False
    finally:
        store.close()


def test_a_missing_pin_is_refused_and_not_counted(pinned) -> None:
    store, job, record = pinned
    said = attempt(store, job, None, Clock())
    assert said.startswith("approving needs your approval PIN, and none was given")
    assert row(record) is None


def test_the_lock_message_names_the_date_when_the_lock_ends_on_another_day() -> None:
    now = time.mktime((2027, 3, 10, 23, 55, 0, 0, 0, -1))
    assert pinmod.local_time(now + 600, now) == time.strftime("%Y-%m-%d %H:%M:%S %Z",
                                                              time.localtime(now + 600))
    assert pinmod.local_time(now + 60, now) == time.strftime("%H:%M:%S %Z", time.localtime(now + 60))


@settings(max_examples=examples(60), deadline=None)
@given(st.text(alphabet="0123456789a -", max_size=140))
def test_a_pin_is_6_to_128_ascii_digits(text: str) -> None:
    ok = text.isascii() and text.isdigit() and 6 <= len(text) <= 128
    try:
        pinmod.check_strength(text)
        said = "ok"
    except UserError as exc:
        said = exc.what
    if ok:
        assert said == "ok"
    elif not (text.isascii() and text.isdigit()):
        assert said == "an approval PIN is digits only (0-9)"
    elif len(text) < 6:
        assert said == f"the PIN is too short ({len(text)} digits; at least 6)"
    else:
        assert said == "the PIN is longer than 128 digits"


def test_the_record_keeps_a_fresh_salt_and_only_the_hash() -> None:
    a, b = pinmod.make(PIN, **CHEAP), pinmod.make(PIN, **CHEAP)
    assert set(a) == {"scheme", "salt", "n", "r", "p", "hash"}
    assert a["salt"] != b["salt"] and a["hash"] != b["hash"]
    assert len(bytes.fromhex(a["salt"])) == 16 and len(bytes.fromhex(a["hash"])) == 32
    assert (a["scheme"], a["n"], a["r"], a["p"]) == ("scrypt", 2 ** 10, 1, 1)
    assert PIN not in repr(a)
    assert pinmod.matches(a, PIN) is True and pinmod.matches(b, PIN) is True
    assert pinmod.matches(a, WRONG) is False and pinmod.matches(a, PIN + "0") is False
    defaults = pinmod.make(PIN)
    assert (defaults["n"], defaults["r"], defaults["p"]) == (2 ** 14, 8, 1)


def test_status_shows_the_parameters_never_the_salt_or_hash(pinned) -> None:
    assert pinmod.status() == {"set": True, "scheme": "scrypt", "n": 2 ** 10, "r": 1, "p": 1}


def test_status_without_a_pin(home: Path) -> None:
    assert pinmod.status() == {"set": False}


# -- what each refusal tells the person to do, and what the log and events say ---------------------

def refusal(store: Store, job: Job | None, entered: str | None, clock: Clock, actor: str = "tester (terminal)"):
    with pytest.raises(UserError) as err:
        pinmod.require(entered, where="gpu approve", store=store, job=job, actor=actor, clock=clock,
                       sleep=lambda s: None)
    return err.value


def test_each_refusal_says_what_to_do(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    assert refusal(store, job, None, clock).fix == \
        "a person runs `gpu approve ID` in their own terminal and types it"
    assert refusal(store, job, WRONG, clock).fix == \
        "try again; a forgotten PIN is removed by deleting approvals.pin from your user config by hand"
    for _ in range(3):
        refusal(store, job, WRONG, clock)
    assert refusal(store, job, WRONG, clock).fix == "wait until then; each further lockout lasts twice as long"
    assert refusal(store, job, PIN, clock).fix == (
        "wait until then and try at a terminal of your own; if the wrong tries were not yours, "
        "something is guessing your PIN: see the job's events and the supervisor's log")


def test_the_undone_words_are_the_callers(pinned) -> None:
    store, job, record = pinned
    with pytest.raises(UserError) as err:
        pinmod.require(WRONG, where="gpu approvals pin clear", undone="the PIN was not cleared",
                       store=store, clock=Clock(), sleep=lambda s: None)
    assert err.value.what == ("wrong approval PIN: the PIN was not cleared (4 tries left before it "
                              "locks for a while)")
    assert err.value.where == "gpu approvals pin clear"


def test_every_wrong_or_locked_try_is_one_log_line_naming_job_and_actor(pinned) -> None:
    from core import paths

    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        refusal(store, job, WRONG, clock)
    refusal(store, job, PIN, clock)
    refusal(store, None, PIN, clock, actor="")
    lines = [ln.split(" ", 3)[2:] for ln in paths.daemon_log_file().read_text().splitlines()]
    who = f"job {job.short_id}: "
    assert lines == [
        *[["WARNING", f"{who}wrong approval PIN (try {n} of 5; gpu approve) by tester (terminal)"]
          for n in range(1, 5)],
        ["WARNING", f"{who}wrong approval PIN (try 5 of 5; gpu approve): the PIN is locked until "
                    f"{at(T0 + 900)} (lockout 1, 15 minutes) by tester (terminal)"],
        ["WARNING", f"{who}approval PIN refused while locked (gpu approve) by tester (terminal)"],
        ["WARNING", "approval PIN refused while locked (gpu approve)"],
    ]


def test_the_events_name_the_actor_or_someone_at_a_terminal(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    refusal(store, job, WRONG, clock, actor="")
    refusal(store, job, WRONG, clock, actor="ann (terminal)")
    events = [e for e in store.events(job.id) if e.data.get("pin")]
    assert [(e.actor, e.reason, e.data) for e in events] == [
        ("someone at a terminal", "wrong approval PIN (try 1 of 5; gpu approve)",
         {"pin": "wrong", "try": 1, "locked_until": None, "lockouts": 0}),
        ("ann (terminal)", "wrong approval PIN (try 2 of 5; gpu approve)",
         {"pin": "wrong", "try": 2, "locked_until": None, "lockouts": 0}),
    ]


def test_a_locked_try_is_an_event_with_the_locks_end(pinned) -> None:
    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        refusal(store, job, WRONG, clock)
    clock.now = T0 + 10
    refusal(store, job, PIN, clock)
    last = [e for e in store.events(job.id) if e.data.get("pin")][-1]
    assert (last.reason, last.data) == (
        f"approval PIN refused: locked until {at(T0 + 900)} after 5 wrong tries (gpu approve)",
        {"pin": "locked", "locked_until": T0 + 900})


def test_the_strength_refusals_say_what_to_choose() -> None:
    for text, fix in (("12a456", "choose 6 or more digits"), ("12345", "choose 6 or more digits"),
                      ("1" * 129, "choose a shorter one")):
        with pytest.raises(UserError) as err:
            pinmod.check_strength(text)
        assert err.value.fix == fix
    pinmod.check_strength("1" * 128)
    pinmod.check_strength("123456")


def test_the_tries_file_is_made_private_with_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "acct" / ".config" / "gpu-router" / "pin-tries.sqlite3"
    monkeypatch.setattr(pinmod, "tries_file", lambda: where)
    assert pinmod.tries_row({"salt": "ab" * 16}) is None
    assert where.parent.stat().st_mode & 0o777 == 0o700
    with sqlite3.connect(where) as db:
        cols = [r[1] for r in db.execute("PRAGMA table_info(pin_tries)")]
    assert cols == ["pin", "wrong", "locked_until", "lockouts", "last_wrong"]


def test_a_try_that_fails_midway_counts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "acct" / "pin-tries.sqlite3"
    monkeypatch.setattr(pinmod, "tries_file", lambda: where)
    with pytest.raises(RuntimeError):
        with pinmod.tries() as db:
            db.execute("INSERT INTO pin_tries (pin, wrong, lockouts, last_wrong) VALUES ('k', 4, 0, 1)")
            raise RuntimeError("the try broke off")
    with pinmod.tries() as db:
        assert db.execute("SELECT COUNT(*) FROM pin_tries").fetchone()[0] == 0


def test_setting_and_clearing_the_pin_write_the_user_config(home: Path) -> None:
    import yaml

    where = pinmod.save(PIN)
    assert where == os.environ["GPU_ROUTER_CONFIG"]
    record = yaml.safe_load(Path(where).read_text())["approvals"]["pin"]
    assert set(record) == {"scheme", "salt", "n", "r", "p", "hash"} and pinmod.matches(record, PIN)
    assert pinmod.stored() == record
    assert pinmod.clear() == where
    assert pinmod.stored() is None and pinmod.status() == {"set": False}


@pytest.mark.parametrize("act", ["save", "clear"])
def test_a_jobs_process_may_neither_set_nor_clear_the_pin(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                          act: str) -> None:
    from core.engine import jobguard

    monkeypatch.setattr(jobguard, "job_origin", lambda: "its parent is job 1234abcd's launcher")
    what = {"save": "setting the approval PIN", "clear": "clearing the approval PIN"}[act]
    with pytest.raises(UserError) as err:
        pinmod.save(PIN) if act == "save" else pinmod.clear()
    assert err.value.what == (f"{what} refused: this process runs inside a gpu-router job (its parent "
                              "is job 1234abcd's launcher); nothing was changed")
    assert err.value.fix == "a person sets or clears the approval PIN from a terminal of their own"
    assert not Path(os.environ["GPU_ROUTER_CONFIG"]).exists()


def test_the_log_line_is_stamped_with_the_tries_time_and_a_try_without_actor_says_none(pinned) -> None:
    from core import paths

    store, job, record = pinned
    with pytest.raises(UserError):
        pinmod.require(WRONG, where="gpu approve", store=store, job=job, clock=Clock(), sleep=lambda s: None)
    line = paths.daemon_log_file().read_text().splitlines()[-1]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0)) + ",000"
    assert line == f"{stamp} WARNING job {job.short_id}: wrong approval PIN (try 1 of 5; gpu approve)"
    assert [e.actor for e in store.events(job.id) if e.data.get("pin")] == ["someone at a terminal"]


def test_a_locked_try_is_logged_at_its_time_and_its_event_names_the_actor(pinned) -> None:
    from core import paths

    store, job, record = pinned
    clock = Clock()
    for _ in range(5):
        refusal(store, job, WRONG, clock)
    clock.now = T0 + 61
    refusal(store, job, PIN, clock)
    line = paths.daemon_log_file().read_text().splitlines()[-1]
    assert line.startswith(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T0 + 61)) + ",000 WARNING ")
    locked = [e for e in store.events(job.id) if e.data.get("pin") == "locked"]
    assert [e.actor for e in locked] == ["tester (terminal)"]


def test_a_pin_longer_than_128_digits_is_refused_saying_so() -> None:
    with pytest.raises(UserError) as err:
        pinmod.check_strength("1" * 129)
    assert err.value.what == "the PIN is longer than 128 digits"


def test_the_count_lives_in_the_home_folder_when_the_password_database_has_no_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(uid: int):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", missing)
    assert pinmod.tries_file() == Path.home() / ".config/gpu-router/pin-tries.sqlite3"


def test_on_macos_the_count_lives_in_application_support(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    where = pinmod.tries_file()
    monkeypatch.undo()
    assert where == Path(pwd.getpwuid(os.getuid()).pw_dir) / "Library/Application Support/gpu-router/pin-tries.sqlite3"
