"""How gpu-router runs commands and moves files on a target: the local shell, or SSH.

Providers that drive a machine (`ssh`, `slurm`, `pbs`) speak only this small interface, so the
same code runs a Slurm login node reached over SSH or the login node we are sitting on:

    await t.run(script, input=b"...")        # a POSIX sh script; Result(code, stdout, stderr)
    await t.put_file(local, remote)          # bytes sent
    await t.put_bytes(data, remote)
    await t.get_file(remote, local, max_bytes)
    await t.read_from(remote, offset, limit) # (bytes, file size or -1): tails logs and metrics
    await t.stream_to(script, local, max_bytes=N)  # a command's stdout into a local file as it
                                             # arrives (a checkpoint's tar): (Result, bytes)

Rules that hold for every command built anywhere in gpu-router:

- A script is built with `quote()` around every value that did not come from this module
  (paths, names, arguments): nothing a user or a project wrote reaches a shell unquoted.
  Over SSH the whole script travels as `exec /bin/sh -c <quoted script>`, so the remote user's
  login shell (bash, zsh, fish) only ever sees one single-quoted word.
- SSH checks the host key against known_hosts, always (asyncssh's `known_hosts=None` turns
  checking off; it is never used). An unknown or changed key is refused with the key's
  fingerprint and the deliberate way to accept it: `gpu targets trust NAME`.
- Agent forwarding stays off; keepalives are on (a dead link is noticed in about a minute);
  one connection per host and event loop is shared by every provider object; a failed connect
  is retried with exponential backoff, and meanwhile callers get `Unreachable` at once, so a
  supervisor tick never blocks on a host that is down.
"""

from __future__ import annotations

import re
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

JOB_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
STREAM_CHUNK = 1 << 20  # what stream_to reads and writes at once
STREAM_ERR_BYTES = 64 << 10  # the end of a streamed command's stderr that is kept (its report)


def quote(value: Any) -> str:
    """One shell word, whatever `value` holds (POSIX single quoting)."""
    return shlex.quote(str(value))


def join(argv: list[Any]) -> str:
    return " ".join(quote(a) for a in argv)


def safe_name(text: str, limit: int = 64) -> str:
    """A scheduler job name: only [A-Za-z0-9._-], never empty."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:limit] or "job"


def check_name(text: str) -> str:
    if not JOB_NAME_RE.match(text):
        raise ValueError(f"job names allow only letters, digits, '.', '_' and '-' (got {text!r})")
    return text


def remote_path_expr(path: str) -> str:
    """A shell expression for a remote path that may start with `~` (expanded by the remote)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + quote(path[2:])
    return quote(path)


@dataclass
class Result:
    code: int | None
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")


class TransportError(Exception):
    """A command or transfer could not be carried out (not: it ran and said no)."""


class Unreachable(TransportError):
    """The host cannot be reached now. Not the job's fault: callers wait and try again."""


class HostKeyError(Unreachable):
    """The host's key is unknown or changed: nothing was sent. `fix` says how to accept it."""

    def __init__(self, what: str, fix: str, fingerprint: str | None = None,
                 changed: bool = False) -> None:
        self.what = what
        self.fix = fix
        self.fingerprint = fingerprint
        self.changed = changed
        super().__init__(f"{what}\n  fix: {fix}")


class OverCap(TransportError):
    """A streamed copy passed its byte cap: the command was stopped and the partial file removed."""


class CommandFailed(TransportError):
    def __init__(self, what: str, result: Result) -> None:
        self.result = result
        tail = (result.err.strip() or result.out.strip())[-800:]
        super().__init__(f"{what} failed (status {result.code})" + (f": {tail}" if tail else ""))


class Transport(ABC):
    """The interface; `stats` counts what crossed the link (benchmarks and handles read it)."""

    name: str = "transport"
    kind: str = "?"

    def __init__(self) -> None:
        self.stats = {"commands": 0, "bytes_sent": 0, "bytes_received": 0, "files_sent": 0}

    def describe(self) -> str:
        return self.name

    @abstractmethod
    async def run(self, script: str, *, input: bytes | None = None, timeout: float = 120.0,
                  check: str | None = None, retry: bool = True) -> Result:
        """Run a POSIX sh script. `check`: raise CommandFailed naming it on a non-zero status.
        `retry`: after a dropped connection, reconnect and run it once more (only for scripts
        that are safe to run twice)."""

    @abstractmethod
    async def put_bytes(self, data: bytes, remote: str) -> int:
        """Write `data` to the file `remote`; the number of bytes sent."""

    @abstractmethod
    async def put_file(self, local: Path, remote: str) -> int:
        """Copy the local file to `remote`; the number of bytes sent."""

    @abstractmethod
    async def get_file(self, remote: str, local: Path, max_bytes: int | None = None) -> int:
        """Copy `remote` to the local file, refusing more than `max_bytes`; bytes received."""

    @abstractmethod
    async def read_from(self, remote: str, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to `limit` bytes of `remote` from `offset`, and the file's size (-1: no file)."""

    @abstractmethod
    async def stream_to(self, script: str, local: Path, *, max_bytes: int, idle_s: float = 60.0,
                        what: str = "a copy", on_bytes: Callable[[int], None] | None = None) -> tuple[Result, int]:
        """Run a POSIX sh script and write its stdout to the file `local` as it arrives, never
        holding it in memory (a checkpoint's tar can be many GB). Returns the Result (its
        stdout empty, its stderr kept, at most STREAM_ERR_BYTES of it) and the bytes written.
        Bounded end to end like every other call: on SSH a silent host ends it by the
        keepalives (Unreachable); any link that stays live but sends no byte for `idle_s`
        ends it too (TransportError). Over `max_bytes` the command is stopped and OverCap
        raised. On any error `local` is removed: a partial copy is never left to be read.
        `on_bytes(n)` hears the bytes written so far after each chunk (a copy's progress)."""

    async def close(self) -> None:
        return None

    @staticmethod
    def over_cap(what: str, where: str, got: int, cap: int) -> OverCap:
        return OverCap(f"{what} from {where} stopped at {got} bytes: over its {cap} byte cap "
                       f"(the target's max_output_bytes); nothing of it was kept")

    def _checked(self, result: Result, check: str | None) -> Result:
        self.stats["commands"] += 1
        if check and result.code != 0:
            raise CommandFailed(check, result)
        return result


async def pump(read: Callable[[int], Awaitable[bytes]], local: Path, *, max_bytes: int, idle_s: float,
               what: str, where: str, on_bytes: Callable[[int], None] | None = None) -> int:
    """stream_to's loop for both transports: chunks from `read` into `local` as they arrive,
    at most `max_bytes` (OverCap past it), each chunk within `idle_s` (TransportError when
    none comes). Returns the bytes written. A full disk here raises its OSError as it is."""
    import asyncio

    n = 0
    with open(local, "wb") as f:
        while True:
            try:
                chunk = await asyncio.wait_for(read(STREAM_CHUNK), idle_s)
            except (asyncio.TimeoutError, TimeoutError):
                raise TransportError(f"{what} from {where} sent nothing for {idle_s:g}s; it was "
                                     "stopped") from None
            if not chunk:
                return n
            n += len(chunk)
            if n > max_bytes:
                raise Transport.over_cap(what, where, n, max_bytes)
            f.write(chunk)
            f.flush()  # in the file as it arrives (a watcher, a crash), not held in a buffer
            if on_bytes is not None:
                on_bytes(n)


async def tail_of(read: Callable[[int], Awaitable[bytes]]) -> bytes:
    """All of a stream read, its last STREAM_ERR_BYTES kept (a streamed command's stderr:
    read alongside its stdout, so a chatty command never stalls on a full pipe)."""
    kept = b""
    while True:
        chunk = await read(1 << 16)
        if not chunk:
            return kept
        kept = (kept + chunk)[-STREAM_ERR_BYTES:]
