"""Errors a user can cause, each saying what was wrong, where, and what to do.

The CLI turns a `UserError` into its message and exit status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input or setup; `fix` says what to do about it."""

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.where = where
        self.fix = fix
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
