"""Following a log file that grows, gets truncated or is replaced, without reading it all.

The last screenfuls are found by reading backwards from the end in blocks (a 1 GB log opens
as fast as a small one); after that only appended bytes are read. Every line is reduced to
printable text before anyone sees it.

A progress bar (tqdm and its kind) rewrites its line with carriage returns: job.log keeps
every step, and a reader sees the line's last state, as a terminal shows it (`fold_returns`,
the one place that does it: `gpu logs`, `gpu grep`, the dashboard and MCP `gpu_logs` all read
through it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.display.sanitize import printable

BLOCK = 64 * 1024
MAX_READ = 8 * 1024 * 1024  # per call: a flood is taken in bites, never all at once


def fold_returns(data: bytes) -> bytes:
    """Each line as a terminal leaves it after a progress bar: the text after its last carriage
    return. Carriage returns that end a line (CRLF, or a bar's last step before its newline)
    are dropped first, so they never blank the line. No line is added or removed, so line
    numbers stay those of job.log; the result holds no carriage return.

    Why not overwrite in place, as a terminal does ("abcdef\rXY" shows "XYcdef")? A bar
    redraws its whole width each step, and the last state alone is what the reader asked for.
    """
    if b"\r" not in data:
        return data
    return b"\n".join(line.rstrip(b"\r").rpartition(b"\r")[2] for line in data.split(b"\n"))


def tail_lines(path: Path, count: int) -> tuple[list[str], int]:
    """The last `count` complete lines and the offset just after them (the end of the last)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], 0
    try:
        size = os.fstat(fd).st_size
        pos = size
        chunks: list[bytes] = []
        newlines = 0
        while pos > 0 and newlines <= count:
            step = min(BLOCK, pos)
            pos -= step
            block = os.pread(fd, step, pos)
            chunks.append(block)
            newlines += block.count(b"\n")
        data = b"".join(reversed(chunks))
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1  # a last line without its newline is still being written
    body = data[:end]
    lines = body.split(b"\n")[:-1] if body else []
    if pos > 0:
        lines = lines[1:]  # the first one read may be a partial line
    lines = lines[-count:]
    return [printable(fold_returns(l)) for l in lines], pos + end


@dataclass
class Follower:
    """Reads what was appended since the last call; notices truncation and rotation."""

    path: Path
    offset: int = 0
    inode: int | None = None
    pending: bytes = b""

    def start(self, count: int) -> list[str]:
        lines, self.offset = tail_lines(self.path, count)
        self.inode = self._inode()
        self.pending = b""
        return lines

    def _inode(self) -> int | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino

    def read(self) -> tuple[list[str], bool]:
        """(new complete lines, reset): reset means the file was truncated or replaced."""
        reset = False
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return [], False
        if self.inode is not None and st.st_ino != self.inode or st.st_size < self.offset:
            self.offset, self.pending, reset = 0, b"", True
        self.inode = st.st_ino
        if st.st_size == self.offset:
            return [], reset
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(st.st_size - self.offset, MAX_READ))
        self.offset += len(data)
        data = self.pending + data
        cut = data.rfind(b"\n") + 1
        self.pending = data[cut:]
        if len(self.pending) > MAX_READ:  # a single endless line: show it in pieces
            data, self.pending, cut = data + b"\n", b"", len(data) + 1
        return [printable(fold_returns(l)) for l in data[:cut].split(b"\n")[:-1]], reset
