"""Terminal safety: job output reduced to printable text, tab and newline.

Textual and rich pass OSC 52 (clipboard), OSC 0/2 (title), CSI sequences and the 8-bit CSI
0x9b through unchanged, so every byte a job printed goes through `printable` before it
reaches a widget or the CLI's own output. Escape sequences are removed whole (not just
their ESC) so no parameter text is left behind to confuse the reader.

Three promises hold for any input (tests/tui/show/test_sanitize.py checks them with hypothesis):

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


# -- bars that move the cursor ------------------------------------------------------------------

_TOKEN = re.compile(rb"\n|\r|\x1b\[[0-9;?]*[ -/]*[@-~]|(?P<cut>\x1b(?:\[[0-9;?]*[ -/]*)?$)|[^\n\r\x1b]+|\x1b")
_CLEAR = re.compile(rb"\x1b\[[012]?K$")
_UP = re.compile(rb"\x1b\[([0-9]*)A$")
_DOWN = re.compile(rb"\x1b\[([0-9]*)[BE]$")


def _dec(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _enc(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _whole_chars(data: bytes) -> int:
    """Where `data` ends on a whole UTF-8 character: a character cut by the read waits."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if need > back else len(data)
    return len(data)


class CursorFold:
    """A job's output with nested progress bars folded as a terminal leaves them.

    A tqdm bar at position 1 (Lightning's validation bar under the training bar) draws itself
    on the line below the outer bar by a newline, then moves the cursor back up (ESC[A) and
    clears with ESC[K: each step is one more line once the escapes are removed, a hundred a
    validation run. Here the cursor's moves are played on the few lines they reach: while bars
    move the cursor, what they draw goes out as carriage-return steps of one line (a reader
    folds it to the last step drawn, core/display/logtail.fold_returns), and each line the
    cursor can no longer reach goes out once, as it was left (a bar closed with leave=False is
    left blank, and dropped). Output without cursor moves passes unchanged; a bar's line
    (one redrawn with carriage returns) has its newline held until the next bytes say whether
    the cursor comes back up (or the output pauses: `idle`).

    Standard library only; the launcher feeds it the job's raw output, before the filter."""

    def __init__(self) -> None:
        self.rows: list[str] | None = None  # the lines the cursor moves over (None: plain output)
        self.at = 0  # the cursor's row
        self.col = 0  # and its column (bytes), while rows are played
        self.reach = 1  # the farthest move up seen: rows further above are left as they are
        self.pending = False  # a bar's newline held: rows are [bar, after], not yet confirmed
        self.held: list[bytes] = []  # the raw bytes after a held newline (given back if no move up)
        self.bar = False  # the current plain line was redrawn with a carriage return
        self.cr = False  # the last thing on the current plain line was a carriage return
        self.line = b""  # the current plain line's last step (what a terminal shows)
        self.drawn = -1  # the row last written to, while rows are played
        self.shown = ""  # the last step given out for the rows
        self.rest = b""  # an escape sequence cut at the end of a read

    def feed(self, data: bytes) -> bytes:
        data, self.rest = self.rest + data, b""
        if self.rows is None and b"\x1b" not in data and (
                b"\n" not in data or (b"\r" not in data and not self.bar)):
            self._plain_state(data)  # the common case, unparsed: plain lines, or a bar's steps
            return data
        cut = _whole_chars(data)
        data, self.rest = data[:cut], data[cut:]
        out: list[bytes] = []
        for m in _TOKEN.finditer(data):
            tok = m.group()
            if m.group("cut") is not None and len(tok) < 16:
                self.rest = tok + self.rest  # an escape cut at the end of the read: completed by the next
                break
            self._token(tok, out)
        if self.rows is not None and not self.pending and self.drawn >= 0:
            step = self.rows[self.drawn]
            if step != self.shown:
                out.append(b"\r" + _enc(step))
                self.shown = step
        return b"".join(out)

    def idle(self) -> bytes:
        """The output paused: a held newline goes out (no move up came after it)."""
        out: list[bytes] = []
        if self.pending:
            self._give_back(out)
        return b"".join(out)

    def flush(self) -> bytes:
        """The end: every row as it was left."""
        out: list[bytes] = [self.rest] if self.rest else []
        self.rest = b""
        if self.pending:
            self._give_back(out)
        if self.rows is not None:
            self._commit(len(self.rows) - 1, out)
            self._to_plain(out)
        return b"".join(out)

    # -- the plain state -------------------------------------------------------------------

    def _plain_state(self, data: bytes) -> None:
        before, newline, seg = data.rpartition(b"\n")
        if newline:
            self.bar, self.line, self.cr = False, b"", False
        parts = seg.split(b"\r")
        if parts[0]:
            self.bar = self.bar or self.cr  # text after a carriage return: a bar's step
            self.line += parts[0]
        if len(parts) > 1:
            self.bar = self.bar or any(parts[1:])
            self.line = parts[-1]
            self.cr = not parts[-1]
        elif parts[0]:
            self.cr = False

    def _token(self, tok: bytes, out: list[bytes]) -> None:
        if self.rows is None:
            if tok == b"\n" and self.bar:
                self.rows, self.at, self.pending, self.held = [_dec(self.line), ""], 1, True, []
                self.col = 0
                return
            if tok == b"\n":
                self.bar, self.line, self.cr = False, b"", False
            elif tok == b"\r":
                self.line, self.cr = b"", True
            elif _CLEAR.match(tok):
                self.line = b""
            elif not tok.startswith(b"\x1b"):
                self.bar = self.bar or self.cr
                self.line += tok
                self.cr = False
            out.append(tok)
            return
        if self.pending:
            up = _UP.match(tok)
            if up:
                self.pending, self.held = False, []
                self.reach = max(self.reach, int(up.group(1) or 1))
                self.at = max(0, self.at - int(up.group(1) or 1))
                return
            if tok == b"\n" or _DOWN.match(tok):
                self._give_back(out)
                self._token(tok, out)
                return
            self.held.append(tok)
            self._draw(tok)
            return
        up, down = _UP.match(tok), _DOWN.match(tok)
        if up:
            self.reach = max(self.reach, int(up.group(1) or 1))
            self.at = max(0, self.at - int(up.group(1) or 1))
        elif tok == b"\n" or down:
            self.col = 0
            for _ in range(int(down.group(1) or 1) if down else 1):
                self.at += 1
                if self.at == len(self.rows):
                    self.rows.append("")
                    self._commit(self.at - self.reach, out)
            if len(self.rows) == 1:
                self._to_plain(out)
        else:
            self._draw(tok)

    def _draw(self, tok: bytes) -> None:
        """Text written over the row from the cursor's column, as a terminal does."""
        row = self.rows[self.at]
        if tok == b"\r":
            self.col = 0
            return
        if _CLEAR.match(tok):
            row = "" if tok in (b"\x1b[2K", b"\x1b[1K") else row[:self.col]
        elif not tok.startswith(b"\x1b"):
            text = _dec(tok)
            row = row[:self.col].ljust(self.col) + text + row[self.col + len(text):]
            self.col += len(text)
        self.rows[self.at] = row
        self.drawn = self.at

    def _give_back(self, out: list[bytes]) -> None:
        """No move up after the held newline: it was a plain one."""
        held, self.rows, self.pending, self.held = self.held, None, False, []
        self.bar, self.line, self.cr = False, b"", False
        out.append(b"\n")
        for tok in held:
            self._token(tok, out)

    def _commit(self, upto: int, out: list[bytes]) -> None:
        """The rows above `upto` go out, each once, as they were left (blank ones dropped)."""
        first = True
        while self.rows and upto > 0:
            row = _enc(self.rows.pop(0).rstrip(" "))  # a cleared bar's spaces, left behind
            upto -= 1
            self.at -= 1
            self.drawn = max(-1, self.drawn - 1)
            if first:
                out.append(b"\r" + row + b"\n")  # the line its steps went out on
                first = False
            elif row.strip():
                out.append(row + b"\n")
            self.shown = ""

    def _to_plain(self, out: list[bytes]) -> None:
        row = _enc(self.rows[0].rstrip(" ")) if self.rows else b""
        self.rows, self.at, self.drawn, self.reach = None, 0, -1, 1
        if row.strip():
            out.append(b"\r" + row)
            self.bar, self.line, self.cr = True, row, False
        else:  # a cleared bar's row: nothing was left on it
            self.bar, self.line, self.cr = False, b"", False
        self.shown = ""
