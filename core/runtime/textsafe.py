"""Terminal safety: job output reduced to printable text, tab and newline.

Textual and rich pass OSC 52 (clipboard), OSC 0/2 (title), CSI sequences and the 8-bit CSI
0x9b through unchanged, so every byte a job printed goes through `printable` before it
reaches a widget or the CLI's own output. Escape sequences are removed whole (not just
their ESC) so no parameter text is left behind to confuse the reader.
"""

from __future__ import annotations

import re

# ESC-introduced sequences: OSC/DCS/SOS/PM/APC strings to their terminator, CSI, and
# two-byte escapes; then the same with 8-bit C1 introducers.
_SEQUENCES = re.compile(
    r"""
    \x1b[\]PX^_] .*? (?:\x07|\x1b\\|\x9c|$)   # OSC, DCS, SOS, PM, APC strings
  | [\x90\x98\x9d\x9e\x9f] .*? (?:\x07|\x1b\\|\x9c|$)
  | \x1b\[ [0-?]* [ -/]* [@-~]?              # CSI
  | \x9b [0-?]* [ -/]* [@-~]?
  | \x1b [ -/]* [0-~]?                        # other escapes
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_LONE = re.compile("[\udc80-\udcff]")


def _c1_or_replacement(m: re.Match) -> str:
    code = ord(m.group()) - 0xDC00
    return chr(code) if code < 0xA0 else "\ufffd"


def printable(text: str | bytes) -> str:
    """Only printable characters, tab and newline; carriage returns end a line."""
    if isinstance(text, bytes):
        # raw C1 bytes (0x80-0x9f) are not UTF-8: keep them as C1 characters so the
        # sequences they start are removed whole, and show other bad bytes as U+FFFD
        text = _LONE.sub(_c1_or_replacement, text.decode("utf-8", "surrogateescape"))
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _SEQUENCES.sub("", text)
    return _CONTROL.sub("", text)
