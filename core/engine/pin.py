"""The approval PIN: a person's second proof, for an agent that hides its markers.

The agent markers (core.engine.actor) catch an agent that runs `gpu` in a pseudo-terminal;
one that strips them from its environment looks like a person. A PIN it was never told
closes that gap: with one set, `gpu approve` and the dashboard ask for it before approving.

Only a salted scrypt hash is kept, in the user's config (`approvals: {pin: {...}}`), never
the PIN: not in the store, a log, an error or argv. Compared in constant time.

A PIN is 6 to 128 digits (ASCII 0-9; the issue asks for at least six digits). Guessing is
bounded, across processes: after MAX_WRONG (5) wrong tries in a row the PIN locks for
LOCK_S (15 minutes), each further lockout twice as long as the one before (30, 60, ...);
while locked even the right PIN is refused, with the local time it opens again; a right PIN
resets the count and the doubling. The count lives with the PIN, not with a store: in
`pin-tries.sqlite3` in the account's own config folder, found from the password database (never
from GPU_ROUTER_HOME, GPU_ROUTER_CONFIG, HOME or XDG_*, which any process may set), one row per
PIN keyed by its salt. A guesser that points GPU_ROUTER_HOME at a scratch folder, or copies the
config elsewhere, meets the same count. Each try is decided inside one write transaction (BEGIN
IMMEDIATE: the check of the lock, scrypt, and the new count), so parallel processes cannot share
out more tries than five. Every wrong try is an event on the job being approved and a
line in the supervisor's log (core.engine.daemon.log_line), without the PIN. Setting and
clearing a PIN are refused to a job's process (core.engine.jobguard), here at the bottom.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from core.config import edit
from core.config import user as userconfig
from core.engine import daemon, jobguard
from core.errors import UserError
from core.jobs.store import Job, Store

SCHEME = "scrypt"
N, R, P = 2 ** 14, 8, 1  # about 16 MiB and tens of milliseconds per try
SALT_BYTES = 16
HASH_BYTES = 32
MIN_LENGTH = 6
MAX_LENGTH = 128
WRONG_DELAY_S = 1.0
MAX_WRONG = 5  # wrong tries in a row before the PIN locks
LOCK_S = 15 * 60.0  # the first lockout; each further one doubles
MAX_DOUBLINGS = 16  # 15 minutes * 2**16 is over a year: the doubling stops there
_DIGITS = re.compile(r"[0-9]+")


def _derive(pin: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(pin.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=length,
                          maxmem=128 * r * (n + p + 2) + (1 << 20))


def check_strength(pin: str) -> None:
    """A PIN worth having: MIN_LENGTH to MAX_LENGTH ASCII digits. The error never repeats it."""
    if not _DIGITS.fullmatch(pin):
        raise UserError("an approval PIN is digits only (0-9)",
                        fix=f"choose {MIN_LENGTH} or more digits")
    if len(pin) < MIN_LENGTH:
        raise UserError(f"the PIN is too short ({len(pin)} digits; at least {MIN_LENGTH})",
                        fix=f"choose {MIN_LENGTH} or more digits")
    if len(pin) > MAX_LENGTH:
        raise UserError(f"the PIN is longer than {MAX_LENGTH} digits", fix="choose a shorter one")


def make(pin: str, *, n: int = N, r: int = R, p: int = P) -> dict:
    """The record stored in the user config for `pin` (a fresh salt every time)."""
    check_strength(pin)
    salt = os.urandom(SALT_BYTES)
    return {"scheme": SCHEME, "salt": salt.hex(), "n": n, "r": r, "p": p,
            "hash": _derive(pin, salt, n, r, p, HASH_BYTES).hex()}


def matches(record: dict, pin: str) -> bool:
    """Whether `pin` is the one `record` was made from (constant-time over the hash)."""
    want = bytes.fromhex(record["hash"])
    got = _derive(pin, bytes.fromhex(record["salt"]), record["n"], record["r"], record["p"], len(want))
    return hmac.compare_digest(got, want)


def stored() -> dict | None:
    """The PIN record in the user's config, or None when no PIN is set. A config that does not
    load raises its error: an approval then fails closed."""
    return userconfig.load().approval_pin


TRIES_FILE = "pin-tries.sqlite3"
FORGET_AFTER_S = 90 * 86400.0  # a row whose lock ended this long ago is dropped (no growth)


def tries_file() -> Path:
    """Where wrong tries are counted: the account's own config folder, from its entry in the
    password database, so no variable a process sets moves it (a count that a fresh
    GPU_ROUTER_HOME started over was a lockout any guesser could escape)."""
    try:
        import pwd

        base = Path(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):
        base = Path.home()
    folder = ("Library/Application Support/gpu-router" if sys.platform == "darwin"
              else ".config/gpu-router")
    return base / folder / TRIES_FILE


@contextmanager
def tries() -> Iterator[sqlite3.Connection]:
    """One write transaction on the tries file (BEGIN IMMEDIATE: a try is decided whole)."""
    path = tries_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("CREATE TABLE IF NOT EXISTS pin_tries (pin TEXT PRIMARY KEY, wrong INTEGER "
                     "NOT NULL DEFAULT 0, locked_until REAL, lockouts INTEGER NOT NULL DEFAULT 0, "
                     "last_wrong REAL)")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def tries_row(record: dict) -> tuple | None:
    """(wrong, locked_until, lockouts) counted for the PIN `record`, or None (for `gpu` and tests)."""
    with tries() as db:
        return db.execute("SELECT wrong, locked_until, lockouts FROM pin_tries WHERE pin = ?",
                          (record["salt"],)).fetchone()


def lock_seconds(lockouts: int) -> float:
    """How long the `lockouts`-th lockout lasts (1: LOCK_S, then doubling)."""
    return LOCK_S * 2 ** min(max(lockouts - 1, 0), MAX_DOUBLINGS)


def local_time(ts: float, now: float) -> str:
    """A lock's end as a person reads it: local time, with the date when it is not today."""
    when = time.localtime(ts)
    fmt = "%H:%M:%S %Z" if time.localtime(now)[:3] == when[:3] else "%Y-%m-%d %H:%M:%S %Z"
    return time.strftime(fmt, when)


def require(entered: str | None, *, where: str, undone: str = "nothing was approved",
            store: Store | None = None, job: Job | None = None, actor: str = "",
            clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> bool:
    """Pass if no PIN is set, or `entered` is it and the PIN is not locked; True when a PIN
    was checked. A missing, wrong or locked-out try is refused (a wrong one after a short
    wait); `where` names the front, `job` (the held job, if any) gets an event for each
    wrong try, `actor` says who typed it. `clock` and `sleep` are for tests."""
    record = stored()
    if record is None:
        return False
    if entered is None:
        raise UserError("approving needs your approval PIN, and none was given", where=where,
                        fix="a person runs `gpu approve ID` in their own terminal and types it")
    store = store or Store()
    key = record["salt"]
    with tries() as counted, store.write() as db:
        now = clock()
        counted.execute("DELETE FROM pin_tries WHERE last_wrong < ? AND (locked_until IS NULL "
                        "OR locked_until < ?)", (now - FORGET_AFTER_S, now - FORGET_AFTER_S))
        row = counted.execute("SELECT wrong, locked_until, lockouts FROM pin_tries WHERE pin = ?",
                              (key,)).fetchone()
        wrong, locked_until, lockouts = (row[0], row[1], row[2]) if row else (0, None, 0)
        if locked_until is not None and now < locked_until:
            _note(store, db, job, f"approval PIN refused: locked until {local_time(locked_until, now)} "
                                  f"after {MAX_WRONG} wrong tries ({where})", actor,
                  {"pin": "locked", "locked_until": locked_until})
            verdict: str | None = "locked"
        elif matches(record, entered):
            counted.execute("DELETE FROM pin_tries WHERE pin = ?", (key,))
            return True
        else:
            wrong += 1
            verdict = "wrong"
            locked_until = None
            if wrong >= MAX_WRONG:
                lockouts += 1
                locked_until = now + lock_seconds(lockouts)
                verdict = "locks"
            counted.execute("INSERT INTO pin_tries (pin, wrong, locked_until, lockouts, last_wrong) "
                       "VALUES (?, ?, ?, ?, ?) ON CONFLICT(pin) DO UPDATE SET wrong = excluded.wrong, "
                       "locked_until = excluded.locked_until, lockouts = excluded.lockouts, "
                       "last_wrong = excluded.last_wrong",
                       (key, 0 if locked_until else wrong, locked_until, lockouts, now))
            text = f"wrong approval PIN (try {wrong} of {MAX_WRONG}; {where})"
            if locked_until:
                text += (f": the PIN is locked until {local_time(locked_until, now)} "
                         f"(lockout {lockouts}, {lock_seconds(lockouts) / 60:.0f} minutes)")
            _note(store, db, job, text, actor, {"pin": "wrong", "try": wrong,
                                                "locked_until": locked_until, "lockouts": lockouts})
    _log(job, text if verdict != "locked" else f"approval PIN refused while locked ({where})",
         actor, now)
    if verdict == "locked":
        raise UserError(f"the approval PIN is locked until {local_time(locked_until, now)} (local "
                        f"time), after {MAX_WRONG} wrong tries in a row; even the right PIN is "
                        f"refused until then: {undone}", where=where,
                        fix="wait until then and try at a terminal of your own; if the wrong tries "
                            "were not yours, something is guessing your PIN: see the job's "
                            "events and the supervisor's log")
    sleep(WRONG_DELAY_S)
    if verdict == "locks":
        raise UserError(f"wrong approval PIN, {MAX_WRONG} times in a row: {undone}; the PIN is "
                        f"now locked until {local_time(locked_until, now)} (local time)", where=where,
                        fix="wait until then; each further lockout lasts twice as long")
    raise UserError(f"wrong approval PIN: {undone} ({MAX_WRONG - wrong} tries left before it "
                    f"locks for a while)", where=where,
                    fix="try again; a forgotten PIN is removed by deleting approvals.pin "
                        "from your user config by hand")


def _note(store: Store, db, job: Job | None, text: str, actor: str, data: dict) -> None:
    """An event on the held job, inside the try's transaction."""
    if job is not None:
        store.note_in(db, job.id, text, actor=actor or "someone at a terminal", data=data)


def _log(job: Job | None, text: str, actor: str, now: float) -> None:
    on = f"job {job.short_id}: " if job is not None else ""
    daemon.log_line("WARNING", f"{on}{text}" + (f" by {actor}" if actor else ""), now)


def refuse_in_job(what: str) -> None:
    """Setting or clearing the PIN from a job's process is refused (core.engine.jobguard)."""
    why = jobguard.job_origin()
    if why:
        raise UserError(f"{what} refused: this process runs inside a gpu-router job ({why}); "
                        "nothing was changed",
                        fix="a person sets or clears the approval PIN from a terminal of their own")


def save(pin: str) -> str:
    """Store a new PIN's hash; returns the config file's path."""
    refuse_in_job("setting the approval PIN")

    return str(edit.save_section_key("approvals", "pin", make(pin)))


def clear() -> str:
    """Remove the PIN from the user config; returns the config file's path."""
    refuse_in_job("clearing the approval PIN")

    return str(edit.save_section_key("approvals", "pin", None))


def status() -> dict:
    """What may be shown about the PIN: whether one is set, and its parameters (never the
    salt or the hash)."""
    record = stored()
    if record is None:
        return {"set": False}
    return {"set": True, "scheme": record["scheme"], "n": record["n"], "r": record["r"], "p": record["p"]}
