"""The warm server's whereabouts and socket protocol (tui/launcher.py, tui/warmserver.py, and
`gpu daemon`, which shows and stops it): never the terminal. Standard library only: the
console script imports this on every start.

A request is a 4-byte length and a JSON object, sent with the client's stdin, stdout and stderr
as descriptors (SCM_RIGHTS) on its first bytes; each answer is one JSON object on a line:
{"fallback": why} (declined: the client runs the command itself), {"pid": N} (the child that
will run it, which starts only after the client's `go` line), then {"rc": N}.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

SOCKET_NAME = "warm.sock"
LOG_NAME = "warm.log"
LOCK_NAME = "warm.lock"
OFF_VAR = "GPU_ROUTER_WARM"
HANDSHAKE_S = 3.0  # the server's child says its pid within this, or the command runs here
MAX_REQUEST = 16 << 20
FIRST_CHUNK = 65536


def line(doc: dict) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def send_request(sock: socket.socket, doc: dict, fds: list[int]) -> None:
    body = json.dumps(doc).encode()
    data = struct.pack(">I", len(body)) + body
    sent = socket.send_fds(sock, [data[:FIRST_CHUNK]], fds)
    if sent < len(data):  # (sendall of nothing still writes, and fails once the server closed)
        sock.sendall(data[sent:])


class Probe(Exception):
    """A connection that sent nothing: a check that the server is up."""


def receive_request(conn: socket.socket, max_fds: int) -> tuple[dict, list[int]]:
    """The request and its descriptors (closed here if the request is unreadable)."""
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


def read_line(reader) -> dict:
    """The next answer; {} when the connection ended."""
    raw = reader.readline()
    if not raw:
        return {}
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
    """core.paths.home(), without importing pathlib on the fast path (tests/test_warm.py checks
    that both agree)."""
    got = env.get("GPU_ROUTER_HOME")
    if got:
        return os.path.expanduser(got)
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support/gpu-router")
    return os.path.join(env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "gpu-router")


def connect(home: str) -> socket.socket | None:
    """A connection to the warm server of `home`, or None. The socket is reached through the
    folder's descriptor, so a long home path (beyond sockaddr_un's 107 bytes) works too."""
    try:
        dirfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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


def is_our_server(sock: socket.socket, home: str) -> bool:
    """Whether the process at the other end is this user's and holds the server's lock: the
    client sends its environment and its terminal only to gpu-router's own warm server, never
    to whatever else listens at that path."""
    if not sys.platform.startswith("linux"):
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid() and pid > 0 and pid == running_pid_in(home)


def running_pid_in(home: str) -> int | None:
    """The pid holding `home`'s warm-server lock, or None when none holds it."""
    import fcntl

    try:
        fd = os.open(os.path.join(home, LOCK_NAME), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.read(fd, 32).strip()
            return int(raw) if raw.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
