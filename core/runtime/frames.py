"""Files carried home inside a text stream: where standard output is the only way back (a
SkyPilot cluster, whose log gpu-router follows through SkyPilot's API and whose SSH access it
cannot use under its host-key rule), a checkpoint generation, the outputs and the exit record
travel as lines of that log, each framed and base64'd:

    @@gpu-router-frame@@ ckpt 0000000007 begin 1048576
    @@gpu-router-frame@@ ckpt 0000000007 data <base64 of up to CHUNK bytes>
    ...
    @@gpu-router-frame@@ ckpt 0000000007 end <sha256 of the whole>

The job's own log lines share the stream: one that begins with the frame's prefix (or with the
escape itself), or holds what the way home takes out of a line (ESC, CR), goes out behind
LOG_ESCAPE, so nothing a job prints is ever read as a frame, and home takes the escape off
again (`unescape`). A frame a job forged some other way (it can
write the log file the relay reads) could only carry bytes the job could have written as its
outputs anyway: home checks each file's size and hash, and unpacks it by the same rules as
every job's outputs.

The writer (`send_file`) runs on the target; the reader (`FrameReader`) at home. Standard
library only, both: the format lives in one place.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from typing import Callable

FRAME_MARK = "@@gpu-router-frame@@ "
LOG_ESCAPE = "@@gpu-router-log@@ "
_RESERVED = "@@gpu-router-"  # a job line that begins so is escaped: never a frame, never a metric row
CHUNK = 48 * 1024  # bytes a line carries (64 KiB of base64): well inside any log's line limit
KINDS = ("ckpt", "out", "exit", "live")
# what each kind's file may be named: a generation's ten digits, or the one name the runtime
# sends (core/runtime/skypilot_task.py); a frame is the job's to forge, so home takes no other
NAMES = {"ckpt": re.compile(r"^[0-9]{10}\Z"), "out": re.compile(r"^outputs\Z"),
         "exit": re.compile(r"^record\Z"), "live": re.compile(r"^ckpt\Z")}


def escape_log(line: str) -> str:
    """A job's log line as it goes into the stream: never mistaken for a frame or a row. One
    that holds an ESC or a CR is escaped too: SkyPilot's adapter takes colour codes and carriage
    returns out of each line, so `\\x1b[0m@@gpu-router-frame@@ ...` reached home as a frame."""
    return LOG_ESCAPE + line if line.startswith(_RESERVED) or "\x1b" in line or "\r" in line else line


def unescape(line: str) -> str:
    return line[len(LOG_ESCAPE):] if line.startswith(LOG_ESCAPE) else line


def send_file(emit: Callable[[str], None], kind: str, name: str, path: str) -> int:
    """`path` as frames through `emit` (one whole line a call); returns the bytes sent."""
    if kind not in KINDS or not NAMES[kind].match(name):
        raise ValueError(f"not a frame name: {kind} {name}")
    size = os.path.getsize(path)
    h = hashlib.sha256()
    emit(f"{FRAME_MARK}{kind} {name} begin {size}")
    sent = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
            sent += len(block)
            emit(f"{FRAME_MARK}{kind} {name} data {base64.b64encode(block).decode()}")
    emit(f"{FRAME_MARK}{kind} {name} end {h.hexdigest()}")
    return sent


class FrameError(ValueError):
    """A frame that does not fit its file (a size or hash that disagrees, a line out of order)."""


class FrameReader:
    """Splits a followed stream back into the job's log lines and whole files.

    `feed(line)` returns the job's line (unescaped), or None for a frame line. Each file is
    written under `folder` as it comes (`<kind>-<name>.part`), never past its announced size
    nor past `max_bytes`, and handed to `on_file(kind, name, path)` once its hash checks out;
    one that does not is dropped and reported to `on_error(kind, name, why)`. A stream read
    again from its beginning (a follower restarted) sends each file again: the caller decides
    whether it already has it (`have(kind, name)` true: its frames are read past, unwritten)."""

    def __init__(self, folder: str, max_bytes: int, on_file: Callable[[str, str, str], None],
                 on_error: Callable[[str, str, str], None] | None = None,
                 have: Callable[[str, str], bool] | None = None) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.on_file = on_file
        self.on_error = on_error or (lambda kind, name, why: None)
        self.have = have or (lambda kind, name: False)
        self.open: dict[tuple[str, str], dict] = {}

    def feed(self, line: str) -> str | None:
        if not line.startswith(FRAME_MARK):
            return unescape(line)
        parts = line[len(FRAME_MARK):].split(" ", 3)
        if len(parts) < 3 or parts[0] not in KINDS or not NAMES[parts[0]].match(parts[1]):
            return None  # not ours to show, not a file: dropped
        kind, name, what = parts[0], parts[1], parts[2]
        arg = parts[3] if len(parts) > 3 else ""
        try:
            self._frame(kind, name, what, arg)
        except (FrameError, OSError, ValueError) as exc:
            self._drop(kind, name)
            self.on_error(kind, name, str(exc))
        return None

    def _frame(self, kind: str, name: str, what: str, arg: str) -> None:
        key = (kind, name)
        if what == "begin":
            for other in [k for k in self.open if k[0] == kind]:
                self._drop(*other)  # one file of a kind at a time (the runtime sends them so)
            size = int(arg)
            if size < 0 or size > self.max_bytes:
                raise FrameError(f"{size} bytes, over the {self.max_bytes} byte cap")
            if self.have(kind, name):
                self.open[key] = {"skip": True}
                return
            os.makedirs(self.folder, exist_ok=True)
            path = os.path.join(self.folder, f"{kind}-{name}.part")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            self.open[key] = {"file": os.fdopen(fd, "wb"), "path": path, "size": size, "got": 0,
                              "hash": hashlib.sha256(), "skip": False}
            return
        state = self.open.get(key)
        if state is None:
            return  # the middle of a file whose beginning this follower never saw
        if state["skip"]:
            if what == "end":
                del self.open[key]
            return
        if what == "data":
            block = base64.b64decode(arg, validate=True)
            if state["got"] + len(block) > state["size"]:
                raise FrameError(f"more than the {state['size']} bytes announced")
            state["file"].write(block)
            state["hash"].update(block)
            state["got"] += len(block)
        elif what == "end":
            state["file"].close()
            del self.open[key]
            if state["got"] != state["size"] or state["hash"].hexdigest() != arg.strip():
                os.unlink(state["path"])
                raise FrameError(f"{state['got']} of {state['size']} bytes came, or their hash differs")
            self.on_file(kind, name, state["path"])
        else:
            raise FrameError(f"unknown frame {what!r}")

    def _drop(self, kind: str, name: str) -> None:
        state = self.open.pop((kind, name), None)
        if state and not state["skip"]:
            state["file"].close()
            try:
                os.unlink(state["path"])
            except OSError:
                pass

    def close(self) -> None:
        """The stream ended: files left half way are dropped."""
        for kind, name in list(self.open):
            self._drop(kind, name)
