"""The job log and the one filter every byte written to it takes (`JobLog`, `Masker`), and
the pump that copies a child's output into it.

Why a module of its own: the launcher writes many things into a job's log (its own lines, pip's
and uv's output, the job's output, the GPU sampler's notes), and a secret must be masked in all
of them, in any spelling, however the output is cut into reads; a terminal code must never
reach a reader's terminal. One filter, one place: the launcher (launch.py) and every process it
starts (jobspawn.py) write through it, and the tests and the masking bench drive it alone.

Standard library only: this file runs with the target's Python, beside the launcher.
"""

from __future__ import annotations

import os
import re
import select
import threading

if __package__:  # imported as core.runtime.joblog (the engine, tests)
    from . import redact, textsafe
else:  # run on the target, beside its sibling files
    import redact
    import textsafe

MASK = redact.MASK.decode()
IDLE_FLUSH_S = 0.5  # a partial line (a prompt, a progress dot) shows after this long a pause
LINE_CAP = 1 << 16  # a line longer than this is written in pieces
_PLAIN = bytes([0x09, 0x0A, 0x0D, *range(0x20, 0x7F)])  # printable ASCII, tab, newline, CR
_WRAPPED_LINE = re.compile(rb"[A-Za-z0-9+/_-]{%d,}" % redact.WRAPPED_MIN_LINE)  # MIME, PEM


def secret_variants(value: str) -> list[str]:
    """The fixed spellings of a secret that are masked (raw, base64, hex, escapes), longest
    first; URL-encoded spellings are matched by a pattern on top of these."""
    return sorted((f.decode("utf-8", "replace") for f in redact.fixed_forms(value)),
                  key=len, reverse=True) if len(value) >= redact.MIN_SECRET_LEN else []


def terminal_safe(data: bytes) -> bytes:
    """`textsafe.printable` applied to every line that holds anything but printable ASCII, tab,
    newline and carriage return; the other lines, which it would return unchanged, are copied
    as they are (most of a log: this is what keeps the filter fast). Carriage returns stay
    (`keep_returns`): job.log keeps every step of a progress bar, and its readers show the
    last (core/display/logtail.py's `fold_returns`)."""
    if not data.translate(None, _PLAIN):
        return data
    out: list[bytes] = []
    run: list[bytes] = []  # consecutive lines that need the filter: one call for all of them
    for line in data.splitlines(keepends=True):
        if line.translate(None, _PLAIN):
            run.append(line)
            continue
        if run:
            out.append(textsafe.printable(b"".join(run), keep_returns=True).encode("utf-8", "replace"))
            run = []
        out.append(line)
    if run:
        out.append(textsafe.printable(b"".join(run), keep_returns=True).encode("utf-8", "replace"))
    return b"".join(out)


def _char_start(data: bytes, at: int) -> int:
    """`at`, moved back to the start of a UTF-8 character so a cut never splits one."""
    if at >= len(data):
        return len(data)
    at = max(0, at)
    for back in range(4):
        if at - back <= 0 or not 0x80 <= data[at - back] < 0xC0:
            return max(0, at - back)
    return at


class Masker:
    """The job log's one filter: mask(printable(mask(raw))).

    Secret values are masked in the bytes as written; the text is then reduced to what a
    terminal may show (`textsafe.printable`); and masked again as displayed, because control
    bytes or a bidi override inside a value vanish in that step and would join it again.
    Output is filtered by whole lines, so an escape sequence or a value split over two reads
    is seen whole; a line longer than LINE_CAP, or one left unfinished while the job pauses,
    goes out in pieces that each hold back enough of their end (raw and displayed) for a
    value cut in two to be found when the rest arrives."""

    def __init__(self, values: list[str]) -> None:
        self.secrets = redact.SecretPattern(values)
        self.keep = max(self.secrets.longest - 1, 0)
        self.cap = max(LINE_CAP, 4 * self.keep)
        self.line = b""  # raw bytes of the unfinished line
        self.shown = b""  # filtered text held back from the end of a piece of a line

    def feed(self, data: bytes) -> bytes:
        buf = self.line + data
        cut = self._line_end(buf, len(self.line))
        cut = self._before_continued(buf, cut)
        if cut:
            self.line = buf[cut:]
            return self._emit(buf[:cut], whole=True)
        self.line = buf
        return self._piece() if len(buf) > self.cap else b""

    def idle(self) -> bytes:
        """The job paused mid-line: show what can be shown of that line."""
        return self._piece() if self.line else b""

    def flush(self) -> bytes:
        head, self.line = self.line, b""
        return self._emit(head, whole=True)

    def text(self, text: str) -> str:
        """One finished message (an error for exit.json), through the same filter."""
        return self._clean(text.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")

    @staticmethod
    def _line_end(buf: bytes, seen: int) -> int:
        """Just past the last newline in `buf`, or 0. Only a newline ends a line: a reader shows
        a line's text after its last CR (or, filtering without folding, the CR as a space), so
        the text on both sides of a CR is masked as one line: what is shown is part of it."""
        return buf.rfind(b"\n", max(0, seen - 1)) + 1

    def _before_continued(self, buf: bytes, cut: int) -> int:
        """`cut`, moved back before the last lines when they may go on in the next read: a line
        that ends in a quoted-printable soft break (`=`), or a full line of base64 (what MIME
        and PEM writers wrap at 64 or 76 characters). A value split over those lines is then
        masked with both of its halves at hand; no more than `keep` bytes are held."""
        end = cut
        while cut:
            start = buf.rfind(b"\n", 0, cut - 1) + 1
            line = buf[start:cut].rstrip(b"\r\n")
            if end - start > self.keep or not (line.endswith(b"=") or _WRAPPED_LINE.fullmatch(line)):
                return cut
            cut = start
        return cut

    def _piece(self) -> bytes:
        """The unfinished line up to where a value could still be cut off; keep the rest as
        written, so that what the next read adds can still complete a form begun in it (a
        tail kept masked could not: a value read twice over, the second reading starting
        inside the first, lost its end). Only a line whose masked stretches run on past the
        cap is masked where it stands, to keep what is held bounded."""
        raw = self.line
        wanted = _char_start(raw, len(raw) - self.keep)
        cut = self.secrets.safe_cut(raw, wanted)
        if cut < wanted - self.cap:  # overlapping forms over the whole cap: mask in place
            raw = self.secrets.mask(raw)
            cut = _char_start(raw, len(raw) - self.keep)
        self.line = raw[cut:]
        return self._emit(raw[:cut], whole=False)

    def _clean(self, data: bytes) -> bytes:
        masked = self.secrets.mask(data)
        shown = terminal_safe(masked)
        return shown if shown == masked else self.secrets.mask(shown)

    def _emit(self, head: bytes, whole: bool) -> bytes:
        text = self._clean(head)
        if self.shown:
            text = self.secrets.mask(self.shown + text)
            self.shown = b""
        if whole or not self.keep:
            return text
        cut = _char_start(text, len(text) - self.keep)
        self.shown = text[cut:]
        return text[:cut]


class JobLog:
    """The job log, opened for appending: every byte the launcher writes there (setup lines,
    pip's output, the job's output, gpu-router's own lines) goes through `write`. One lock
    serialises them: the GPU sampler's thread (gpuutil) writes a line while the job's output
    is pumped, and the filter's state (a line held back) is one."""

    def __init__(self, path: str, masker: Masker) -> None:
        self.fd = _open_log(path)
        self.masker = masker
        self.mid_line = False  # the last byte written was not a newline
        self.lock = threading.RLock()

    def write(self, data: bytes) -> None:
        with self.lock:
            self._put(self.masker.feed(data))

    def line(self, text: str) -> None:
        """One of gpu-router's own lines, on a line of its own. One that cannot be written (a
        full disk) must not stop the launcher from recording how the attempt ended."""
        with self.lock:
            pending = self.mid_line or self.masker.line or self.masker.shown
            start = "\n" if pending else ""
            try:
                self.write(f"{start}[gpu-router] {text}\n".encode("utf-8", "surrogateescape"))
            except OSError:
                pass

    def idle(self) -> None:
        with self.lock:
            self._put(self.masker.idle())

    def close(self) -> None:
        with self.lock:
            try:
                self._put(self.masker.flush())
            except OSError:
                pass
            os.close(self.fd)

    def _put(self, data: bytes) -> None:
        if data:
            self.mid_line = not data.endswith(b"\n")
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


TAIL_KEPT = 64 * 1024  # bytes of an install step's output kept to say why it failed


def pump(pipe: int, log: JobLog, tail: bytearray | None = None) -> None:
    """Copy a child's output into the log until every writer has closed it (its last
    TAIL_KEPT bytes into `tail` too, where given: what an installer said last). Progress bars
    that move the cursor (tqdm's nested bars) are folded as a terminal leaves them first
    (textsafe.CursorFold): their escapes are dropped by the filter, and each step would
    otherwise be a line of its own."""
    fold = textsafe.CursorFold()
    while True:
        ready, _, _ = select.select([pipe], [], [], IDLE_FLUSH_S)
        if not ready:
            log.write(fold.idle())
            log.idle()
            continue
        block = os.read(pipe, 65536)
        if not block:
            log.write(fold.flush())
            return
        log.write(fold.feed(block))
        if tail is not None:
            tail += block
            del tail[:-TAIL_KEPT]



def _open_log(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:  # a full disk: the job still runs to an exit status, unlogged
        return os.open(os.devnull, os.O_WRONLY)
