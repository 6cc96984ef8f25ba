"""Patterns a person types, run over lines a job wrote: in time linear in the line, always.

Python's `re` backtracks: `loss.*nan.*step` over one 63 KB line of `loss nan ` took longer than
anyone waits, and a job chooses its lines. Every search of job text by a person's pattern
(`gpu grep`, the dashboard's log search) compiles here, with RE2 (google-re2), whose matching
never backtracks. What RE2 cannot run in linear time (backreferences, lookaround) is refused with
words a person can act on, never run some slower way.
"""

from __future__ import annotations

from typing import NamedTuple

import re2

# RE2's own bound on the compiled program: a pattern like `(a{100}){100}` is refused, not built.
MAX_PROGRAM_BYTES = 8 << 20
SYNTAX = ("RE2 syntax, which runs in linear time: no backreferences (\\1) or lookaround "
          "((?=...), (?<=...)); escape special characters with a backslash, e.g. 'loss\\(val\\)'")


class BadPattern(ValueError):
    """The pattern cannot be searched with; str() says why in a person's words."""


class Span(NamedTuple):
    start: int
    end: int


class Pattern:
    """A compiled pattern: `search(text)` gives the first match's span in `text` or None."""

    def __init__(self, text: str, compiled: "re2._Regexp") -> None:
        self.text = text
        self._rx = compiled

    def search(self, line: str) -> Span | None:
        try:
            m = self._rx.search(line)
        except UnicodeEncodeError:  # a lone surrogate: searched as what it would print as
            m = self._rx.search(line.encode("utf-8", "replace").decode("utf-8"))
        return None if m is None else Span(m.start(), m.end())


def compile_search(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """`pattern` ready to search job text in linear time, or BadPattern saying what to change."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own copy of the error on stderr
    options.case_sensitive = not ignore_case
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        compiled = re2.compile(pattern, options=options)
    except UnicodeEncodeError:
        raise BadPattern("it holds characters that are not text (lone surrogates)") from None
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise BadPattern(f"{why}: patterns use {SYNTAX}") from None
    return Pattern(pattern, compiled)
