"""The warm server's socket protocol (tui/launcher.py, tui/warmserver.py): never the terminal.

A request is a 4-byte length and a JSON object, sent with the client's stdin, stdout and stderr
as descriptors (SCM_RIGHTS) on its first bytes; each answer is one JSON object on a line:
{"fallback": why} (declined: the client runs the command itself), {"pid": N} (the child that
will run it, which starts only after the client's `go` line), then {"rc": N}.
"""

from __future__ import annotations

import json
import socket
import struct

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
    import os

    try:
        os.close(fd)
    except OSError:
        pass
