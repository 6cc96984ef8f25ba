"""The approval PIN: a person's second proof, for an agent that hides its markers.

The agent markers (core.engine.actor) catch an agent that runs `gpu` in a pseudo-terminal;
one that strips them from its environment looks like a person. A PIN it was never told
closes that gap: with one set, `gpu approve` and the dashboard ask for it before approving.

Only a salted scrypt hash is kept, in the user's config (`approvals: {pin: {...}}`), never
the PIN: not in the store, a log, an error or argv. Compared in constant time; a wrong PIN
costs a short wait, so guessing at a terminal is slow.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

from core.errors import UserError

SCHEME = "scrypt"
N, R, P = 2 ** 14, 8, 1  # about 16 MiB and tens of milliseconds per try
SALT_BYTES = 16
HASH_BYTES = 32
MIN_LENGTH = 4
MAX_LENGTH = 128
WRONG_DELAY_S = 1.0


def _derive(pin: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(pin.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=length,
                          maxmem=128 * r * (n + p + 2) + (1 << 20))


def check_strength(pin: str) -> None:
    """A PIN worth having; the error never repeats it."""
    if len(pin) < MIN_LENGTH:
        raise UserError(f"the PIN is too short ({len(pin)} characters; at least {MIN_LENGTH})",
                        fix="choose a longer one; six or more characters slow guessing further")
    if len(pin) > MAX_LENGTH:
        raise UserError(f"the PIN is longer than {MAX_LENGTH} characters", fix="choose a shorter one")
    if not pin.isprintable() or pin.strip() != pin:
        raise UserError("the PIN has spaces at its ends or characters that cannot be typed",
                        fix="use letters, digits and punctuation")


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
    from core.config import user as userconfig

    return userconfig.load().approval_pin


def require(entered: str | None, *, where: str, undone: str = "nothing was approved") -> bool:
    """Pass if no PIN is set, or `entered` is it; True when a PIN was checked. A missing or
    wrong PIN is refused after a short wait; `where` names the front, for the fix."""
    record = stored()
    if record is None:
        return False
    if entered is None:
        raise UserError("approving needs your approval PIN, and none was given", where=where,
                        fix="a person runs `gpu approve ID` in their own terminal and types it")
    if not matches(record, entered):
        time.sleep(WRONG_DELAY_S)
        raise UserError(f"wrong approval PIN: {undone}", where=where,
                        fix="try again; a forgotten PIN is removed by deleting approvals.pin "
                            "from your user config by hand")
    return True


def save(pin: str) -> str:
    """Store a new PIN's hash; returns the config file's path."""
    from core.config import edit

    return str(edit.save_section_key("approvals", "pin", make(pin)))


def clear() -> str:
    from core.config import edit

    return str(edit.save_section_key("approvals", "pin", None))


def status() -> dict:
    """What may be shown about the PIN: whether one is set, and its parameters (never the
    salt or the hash)."""
    record = stored()
    if record is None:
        return {"set": False}
    return {"set": True, "scheme": record["scheme"], "n": record["n"], "r": record["r"], "p": record["p"]}
