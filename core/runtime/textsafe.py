"""Terminal safety: job output reduced to printable text, tab and newline.

Textual and rich pass OSC 52 (clipboard), OSC 0/2 (title), CSI sequences and the 8-bit CSI
0x9b through unchanged, so every byte a job printed goes through `printable` before it
reaches a widget or the CLI's own output. Escape sequences are removed whole (not just
their ESC) so no parameter text is left behind to confuse the reader.

Three promises hold for any input (tests/test_sanitize.py checks them with hypothesis):

- nothing that drives a terminal survives: no ESC, no C0 control but tab and newline, no C1
  control, no bidi override or mark, no lone surrogate (which a surrogateescape stream would
  write back as the raw byte it came from);
- nothing invisible that a reader (a person, or an agent reading `gpu logs`) could be told
  something by without seeing it: no format character (Unicode category Cf: tag characters
  U+E0000-E007F that spell hidden ASCII, zero-width U+200B-200D, U+2060-2064, the BOM
  U+FEFF, soft hyphen U+00AD, U+180E), no private-use (Co) or unassigned (Cn) code point, and
  no variation selector but one U+FE0E/U+FE0F after a visible character (emoji and text
  presentation, which is what they are printed for; runs of selectors, and VS1-14 and
  VS17-256, can carry a hidden byte string after an emoji). The line and paragraph
  separators go too;
- the lines stay the lines the job wrote: the output has exactly as many newlines as the
  input. A string sequence (OSC, DCS, SOS, PM, APC) that never ends drops its introducer and
  at most the rest of its own line, so one stray `ESC ]` cannot hide the lines after it,
  gpu-router's own exit line among them. Carriage returns never add or remove a line;
- text that is not part of a sequence is kept.

Standard library only: the job-side launcher ships this file to every target.
"""

from __future__ import annotations

import re
import unicodedata

# A string sequence ends at BEL or ST (ESC \ or 0x9c); it is cut short by a newline (which it
# never swallows) or by any other ESC (which starts a sequence of its own).
_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\n\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
_CSI = r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
_OTHER_ESCAPE = r"\x1b[ -/]*[0-~]?"
_SEQUENCES = re.compile(f"{_STRING}|{_CSI}|{_OTHER_ESCAPE}")

# C0 but tab and newline, DEL, C1, the line/paragraph separators, and every bidi control:
# marks (LRM, RLM, ALM), embeddings and overrides (U+202A-202E), isolates (U+2066-2069).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                      "\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_CR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                             "\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"}
# VS1-14 and VS17-256 always; VS15/16 (text/emoji presentation) when another selector precedes
_SELECTORS = re.compile("[\ufe00-\ufe0d\U000e0100-\U000e01ef]|(?<=[\ufe00-\ufe0f])[\ufe0e\ufe0f]+"
                        "|(?<=[\U000e0100-\U000e01ef])[\ufe0e\ufe0f]+|^[\ufe0e\ufe0f]+", re.M)
_CR_AT_LINE_END = re.compile(r"\r+(?=\n|\Z)")


def _from_surrogate(m: re.Match) -> str:
    """A byte that was not UTF-8 (0x80-0xff, escaped to U+DC80-U+DCFF): C1 bytes become C1
    characters, so the sequences they start are removed whole; any other becomes U+FFFD."""
    code = ord(m.group()) - 0xDC00
    return chr(code) if 0x80 <= code < 0xA0 else "\ufffd"


def _visible(text: str) -> str:
    """Without the invisible characters above. Categories are looked up once per distinct
    character (a set, built in C), so a long non-ASCII log costs a few passes, not a lookup
    per character."""
    gone = {ord(c): None for c in set(text)
            if not c.isascii() and unicodedata.category(c) in _INVISIBLE_CATEGORIES}
    if gone:
        text = text.translate(gone)
    return _SELECTORS.sub("", text)


def printable(text: str | bytes, *, single_line: bool = False, keep_returns: bool = False) -> str:
    """Only printable characters, tab and newline, with the input's lines kept as lines.

    A carriage return at the end of a line goes (CRLF output); one inside a line becomes a
    space, so a progress bar's steps stay on their line and nothing the job wrote before the
    return is hidden. `single_line` also turns tabs and newlines into spaces: for a value
    embedded in a sentence (an argument in the approval paragraph) that must not start a
    line of its own that looks like gpu-router's.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if not text.isascii():
        text = _SURROGATE.sub(_from_surrogate, text)
    if "\r" in text and not keep_returns:
        text = _CR_AT_LINE_END.sub("", text).replace("\r", " ")
    text = _SEQUENCES.sub("", text)
    text = (_CONTROL_BUT_CR if keep_returns else _CONTROL).sub("", text)
    if not text.isascii():
        text = _visible(text)
    if single_line:
        text = text.replace("\n", " ").replace("\t", " ")
    return text
