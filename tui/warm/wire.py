"""The warm server's whereabouts and socket protocol (tui/warm/launcher.py, tui/warm/server.py, and
`gpu daemon`, which shows and stops it): never the terminal. The console script imports this on
every start, so the client's side uses only C modules: `_socket` (socket.py's enum conversions
were ~5 ms of each start), `_json`'s string quoting and `_signal`; the server's side imports
`json` and `socket`, which it has loaded anyway.

A request is a 4-byte length and a JSON object, sent with the client's stdin, stdout and stderr
as descriptors (SCM_RIGHTS) on its first bytes; each answer is one JSON object on a line:
{"fallback": why} (declined: the client runs the command itself), {"pid": N} (the child that
will run it, which starts only after the client's `go` line), then {"rc": N}.
"""

from __future__ import annotations

import _socket
import os
import struct
import sys

try:
    from _json import encode_basestring_ascii as _quote
except ImportError:  # an interpreter without the C accelerator
    from json.encoder import py_encode_basestring_ascii as _quote

SOCKET_NAME = "warm.sock"
LOG_NAME = "warm.log"
LOCK_NAME = "warm.lock"
OFF_VAR = "GPU_ROUTER_WARM"
HANDSHAKE_S = 3.0  # the server's child says its pid within this, or the command runs here
MAX_REQUEST = 16 << 20
FIRST_CHUNK = 65536


def dumps(value) -> str:
    """JSON text of plain values (dicts with string keys, lists, strings, ints, bools, None),
    as `json.dumps(value, separators=(",", ":"))` writes it: strings ASCII-escaped, so a name
    that is not UTF-8 (surrogate escapes) travels exactly."""
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_quote(k)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"not a plain JSON value: {type(value).__name__}")


def line(doc: dict) -> bytes:
    return dumps(doc).encode() + b"\n"


def send_request(sock, doc: dict, fds: list[int]) -> None:
    body = dumps(doc).encode()
    data = struct.pack(">I", len(body)) + body
    rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    sent = sock.sendmsg([data[:FIRST_CHUNK]], rights)
    if sent < len(data):  # (sendall of nothing still writes, and fails once the server closed)
        sock.sendall(data[sent:])


class Probe(Exception):
    """A connection that sent nothing: a check that the server is up."""


def receive_request(conn, max_fds: int) -> tuple[dict, list[int]]:
    """The request and its descriptors (closed here if the request is unreadable)."""
    import json
    import socket

    data, fds, _, _ = socket.recv_fds(conn, FIRST_CHUNK, max_fds)
    try:
        if not data and not fds:
            raise Probe
        if len(data) < 4:
            raise ValueError("short header")
        (size,) = struct.unpack(">I", data[:4])
        if size > MAX_REQUEST:
            raise ValueError("request too large")
        body = bytearray(data[4:])
        while len(body) < size:
            got = conn.recv(min(1 << 20, size - len(body)))
            if not got:
                raise ValueError("request cut short")
            body += got
        doc = json.loads(bytes(body))
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return doc, list(fds)
    except BaseException:
        for fd in fds:
            os_close(fd)
        raise


class Lines:
    """The answers on a connection, a line at a time (what `makefile("rb")` gave, without
    socket.py)."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.buf = b""

    def readline(self) -> bytes:
        while b"\n" not in self.buf:
            got = self.sock.recv(4096)
            if not got:
                rest, self.buf = self.buf, b""
                return rest
            self.buf += got
        head, _, self.buf = self.buf.partition(b"\n")
        return head + b"\n"


def read_line(reader) -> dict:
    """The next answer; {} when the connection ended. The server's {"pid": N} and {"rc": N}
    are read as they are written (`line`); anything else by the json module."""
    raw = reader.readline()
    if not raw:
        return {}
    text = raw.strip()
    for key in (b"pid", b"rc"):
        head = b'{"' + key + b'":'
        if text.startswith(head) and text.endswith(b"}"):
            number = text[len(head):-1].strip()
            if number.lstrip(b"-").isdigit():
                return {key.decode(): int(number)}
    import json

    doc = json.loads(raw)
    return doc if isinstance(doc, dict) else {}


def os_close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def wanted(argv: list[str], env) -> bool:
    """Whether to ask the warm server: an agent's submit (`--json`), help and version aside
    (the server re-checks all of it by parsing; this only spares a connection)."""
    if env.get(OFF_VAR, "1") == "0" or env.get("GPU_ROUTER_JOB"):
        return False
    head = argv[:argv.index("--")] if "--" in argv else argv
    words = [a for a in head if not a.startswith("-")]
    return (bool(words) and words[0] == "submit" and "--json" in head
            and not any(a in ("-h", "--help", "--version") for a in head))


def home_dir(env) -> str:
    """core.paths.home(), without importing pathlib on the fast path (tests/tui/warm/test_warm.py checks
    that both agree)."""
    got = env.get("GPU_ROUTER_HOME")
    if got:
        return os.path.expanduser(got)
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support/gpu-router")
    return os.path.join(env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "gpu-router")


def connect(home: str):
    """A connection to the warm server of `home`, or None. The socket is reached through the
    folder's descriptor, so a long home path (beyond sockaddr_un's 107 bytes) works too."""
    try:
        dirfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # no context manager: close it
    sock.settimeout(HANDSHAKE_S)  # a stopped server's full backlog must not hang the client
    try:
        sock.connect(f"/proc/self/fd/{dirfd}/{SOCKET_NAME}" if os.path.isdir("/proc/self/fd")
                     else os.path.join(home, SOCKET_NAME))
        return sock
    except OSError:
        sock.close()
        return None
    finally:
        os.close(dirfd)


def running_pid() -> int | None:
    """The warm server's pid, or None when none holds its lock (`gpu daemon --status`)."""
    return running_pid_in(home_dir(os.environ))


def stop(pid: int) -> None:
    """Ask the warm server to leave (`gpu daemon --stop`); it removes its socket on the way."""
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def is_our_server(sock, home: str) -> bool:
    """Whether the process at the other end is this user's and holds the server's lock: the
    client sends its environment and its terminal only to gpu-router's own warm server, never
    to whatever else listens at that path."""
    if not sys.platform.startswith("linux"):
        return False
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid() and pid > 0 and pid == running_pid_in(home)


def running_pid_in(home: str) -> int | None:
    """The pid holding `home`'s warm-server lock, or None when none holds it."""
    return lock_holder(os.path.join(home, LOCK_NAME))


def lock_holder(lock: str | os.PathLike) -> int | None:
    """The pid written in a lock file while a process holds the lock (flock), else None. A lock
    file outlives its process: the pid in it may by then be another program's."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.read(fd, 32).strip()
            return int(raw) if raw.isdigit() and int(raw) > 0 else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
