"""Errors a user can cause, each saying what was wrong, where, and what to do.

The CLI turns a `UserError` into its message and exit status 2; anything else is a bug, which
the CLI reports in one line and records with its traceback in a log file.

Messages quote what the user gave them, and what they gave can be a 34 MB YAML expansion or a
300-byte path: `shorten` is the one place a value becomes text for a message, and `UserError`
clips each of its parts again, so no message grows with its input.

What they gave can also be a token pasted into the wrong key (`hours: hf_...`): `shorten`
hides every part of a value that looks like a secret (`core.runtime.tokenshapes.mask`: the
shapes `env` values are refused by, and the token table once core.secrets.scan is loaded),
and `UserError` hides the shapes again in whatever text it is given, so an error message
never repeats a token.
"""

from __future__ import annotations

import os
import reprlib
from contextlib import contextmanager
from typing import Callable, Iterator

from core.runtime.diskspace import disk_full_text, is_enospc, is_low
from core.runtime.textsafe import printable

VALUE_CHARS = 80  # a quoted value shows at most this many characters, then "… (N chars)"
FIELD_CHARS = 1000  # what, where and fix each stay below this, whatever a caller passes

MASK_WINDOW = 400  # characters past what is shown that are masked with it: a token starting in view is hidden whole


def _masked(text: str, *, table: bool = True, window: int = VALUE_CHARS + MASK_WINDOW) -> str:
    """`text` with its token-shaped parts hidden (core.runtime.tokenshapes.mask). Of a long text only
    its two ends are masked and kept, `window` characters each: what a message shows of it."""
    from core.runtime.tokenshapes import mask  # on the error path only: its regexes cost an import

    if len(text) <= 2 * window:
        return mask(text, table=table)
    return mask(text[:window], table=table) + "…" + mask(text[-window:], table=table)


class _MaskingRepr(reprlib.Repr):
    """reprlib's short repr, each string masked before it is cut (a cut token is still one)."""

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(_masked(x, window=self.maxstring + MASK_WINDOW), level)


_REPR = _MaskingRepr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = 6
_REPR.maxdict = 4
_REPR.maxstring = _REPR.maxother = VALUE_CHARS
_REPR.maxlong = 40


def shorten(value: object, limit: int = VALUE_CHARS) -> str:
    """`repr(value)` for an error message, cut to about `limit` characters with its full size.

    A string longer than `limit` shows its start and its length ('aaa…' (300 chars)); a list or
    mapping shows its first items and how many there are. Building the text never walks more than
    a few levels or items, so a value that expands to gigabytes costs nothing to quote.

    A part that looks like a secret (a token pasted into the wrong key) shows as
    "[hidden: a Hugging Face token]", in a string or anywhere in a list or mapping.
    """
    if isinstance(value, str):
        # escape sequences go whole, payload included (repr would show `\x1b]0;PWNED` as text)
        # masked before escape sequences go (a token that starts in view goes whole, however
        # long) and after (one dropped between two halves of a token must not join them)
        shown = _masked(printable(_masked(value[:limit + MASK_WINDOW])))
        value = printable(value)
        text = repr(shown[:limit + 1])
        if len(value) <= limit and len(shown) <= limit and len(text) <= limit + 2:
            return text
        return f"{text[:limit]}… ({len(value)} chars)"
    try:
        text = _masked(_REPR.repr(value))
    except Exception:  # an int too long for str(), a repr that raises: name the type instead
        text = f"<{type(value).__name__}>"
    try:
        count = len(value) if isinstance(value, (list, tuple, dict, set, frozenset)) else None
        size = "" if count is None else f" ({count} item{'' if count == 1 else 's'})"
    except TypeError:
        size = ""
    if len(text) > limit or (size and "..." in text):
        return f"{text[:limit]}…{size}"
    return text


def clip(text: str, limit: int = FIELD_CHARS, hide: Callable[[str], str] | None = None) -> str:
    """`text` at most about `limit` characters, keeping its start and its end (a path's line).
    `hide` masks what is kept, each end with MASK_WINDOW characters past the cut (a token
    across it is hidden whole)."""
    if len(text) <= limit:
        if hide is None:
            return text
        hidden = hide(text)
        return hidden if len(hidden) <= limit else clip(hidden, limit)
    head = limit * 2 // 3
    tail = limit - head
    front, back = text[:head], text[-tail:]
    if hide is not None:
        front, back = hide(text[:head + MASK_WINDOW])[:head], hide(text[-tail - MASK_WINDOW:])[-tail:]
    return f"{front}…[{len(text) - head - tail} chars cut]…{back}"


def _hide_formats(text: str) -> str:
    """The token shapes hidden, the built-in ones only (no file read: a
    DiskFull is a UserError too, and so is a home that cannot be read)."""
    from core.runtime.tokenshapes import mask

    return mask(text, table=False)


def _field(text: object) -> str:
    """One part of a UserError: clipped, what is kept with its tokens hidden."""
    return clip(str(text), hide=_hide_formats)


class UserError(Exception):
    """A mistake in the user's input or setup; `fix` says what to do about it."""

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.what = _field(what)
        self.where = None if where is None else _field(where)
        self.fix = None if fix is None else _field(fix)
        super().__init__(self.message())

    def message(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text

    def to_json(self) -> dict:
        return {"error": self.what, "where": self.where, "fix": self.fix}


class NotFound(UserError):
    """A job reference that names no job."""


class IllegalTransition(RuntimeError):
    """A state change the transition table forbids: always a bug in gpu-router, never the user's."""


class DiskFull(UserError):
    """A write failed for want of space: "disk full at PATH (N MB free)", and how to go on."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        super().__init__(disk_full_text(self.path),
                         fix="free space on that disk (or point GPU_ROUTER_HOME at a bigger one), "
                             "then run the command again")


_SQLITE_FULL = 13  # "database or disk is full"
_SQLITE_IOERR = 10
_SQLITE_CANTOPEN = 14


def is_disk_full(exc: BaseException, path: str | os.PathLike | None = None) -> bool:
    """ENOSPC/EDQUOT, SQLite's "disk is full", or an SQLite I/O error on a disk with no room
    left (SQLite reports a failed write to its shared-memory file as an I/O error)."""
    if is_enospc(exc):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    if code & 0xFF == _SQLITE_FULL:
        return True
    return code & 0xFF in (_SQLITE_IOERR, _SQLITE_CANTOPEN) and path is not None and is_low(path)


@contextmanager
def disk_full_guard(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write that failed for want of space under `path` into DiskFull (a UserError:
    exit 2 in the CLI, the job's reason in the supervisor), the one way a full disk is said."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as exc:
        if is_disk_full(exc, path):
            raise DiskFull(_where(exc, path)) from exc
        raise


def _where(exc: BaseException, path: str | os.PathLike) -> str | os.PathLike:
    """The guarded folder, unless the failed write names a file on another disk's folder."""
    name = getattr(exc, "filename", None)
    if not name:
        return path
    folder = os.path.dirname(os.path.abspath(os.fsdecode(name)))
    root = os.path.abspath(os.fspath(path))
    inside = folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)
    return path if inside else folder
