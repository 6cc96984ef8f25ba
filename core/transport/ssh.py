"""SSH behind the Transport interface: host keys always checked, one pooled connection per host."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.transport.base import (
    HostKeyError,
    Result,
    Transport,
    TransportError,
    Unreachable,
    pump,
    quote,
    tail_of,
)

# asyncssh logs every channel at INFO: the supervisor's log would be mostly that
if logging.getLogger("asyncssh").level == logging.NOTSET:
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

CONNECT_TIMEOUT_S = 10.0
# A host that answers nothing (frozen, cut off by a partition, its connections left open) is
# noticed by keepalives: one every SILENT_S / (KEEPALIVE_COUNT + 1) seconds of silence, the
# link given up after KEEPALIVE_COUNT unanswered ones, so after about SILENT_S in all. A
# target's silence follows its unreachable_grace_s (silence_for): the link must be declared
# dead well within the grace, or the grace means nothing.
SILENT_S = 60.0
SILENT_MIN_S = 4.0
KEEPALIVE_COUNT = 3
SMALL_OP_S = 60.0  # one small SFTP read or write (a log chunk, a marker file) on a live link
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


# -- SSH -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect. `known_hosts` None means ~/.ssh/known_hosts."""

    host: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_S
    silent_s: float = SILENT_S  # how long the host may answer nothing before the link is dead

    def keepalive(self) -> tuple[float, int]:
        """(interval, count): asyncssh gives up after count unanswered keepalives, one each
        interval of silence, so (count + 1) x interval after the last packet: silent_s."""
        return max(0.5, self.silent_s / (KEEPALIVE_COUNT + 1)), KEEPALIVE_COUNT

    def known_hosts_file(self) -> Path:
        return Path(os.path.expanduser(self.known_hosts or "~/.ssh/known_hosts"))

    def pattern(self) -> str:
        """How known_hosts names this host: `host`, or `[host]:port` off port 22."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


@dataclass
class _Conn:
    """One pooled connection: shared by every provider object on the same loop."""

    loop: Any
    lock: asyncio.Lock
    conn: Any = None
    sftp: Any = None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    connects: int = 0
    # when the host last stopped answering (wall clock: the start of the oldest call it left
    # unanswered), None while it answers; the supervisor's grace counts from here
    silent_since: float | None = None


_POOL: dict[Endpoint, _Conn] = {}


def silence_for(grace_s: float) -> float:
    """How long a target's link may stay silent before it counts as dead, from the target's
    unreachable_grace_s: half the grace (so the host is noticed silent well within it), at
    least SILENT_MIN_S (a keepalive a second at most, the loop's worst stalls far below it),
    at most SILENT_S (today's default for the default grace of 600 s)."""
    return min(SILENT_S, max(SILENT_MIN_S, float(grace_s) / 2))


def _load_known_hosts(ep: Endpoint):
    """The known_hosts entries as an asyncssh object; an empty one (refusing every key) when
    the file does not exist. Never None: None would turn host-key checking off."""
    import asyncssh

    path = ep.known_hosts_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    return asyncssh.import_known_hosts(text)


def _addr(host: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return ""


def recorded_keys(ep: Endpoint) -> list:
    known = _load_known_hosts(ep)
    found = known.match(ep.host, _addr(ep.host), ep.port if ep.port != 22 else None)
    return list(found[0]) + list(found[1])


async def fetch_host_key(ep: Endpoint):
    """The key the host presents (no login, nothing sent but the key exchange)."""
    import asyncssh

    try:
        return await asyncio.wait_for(asyncssh.get_server_host_key(ep.host, ep.port), ep.connect_timeout)
    except (OSError, asyncssh.Error, asyncio.TimeoutError, TimeoutError) as exc:
        raise Unreachable(f"{ep.label()} did not answer: {_describe(exc)}") from None


def fingerprint(key) -> str:
    return key.get_fingerprint("sha256")


async def host_key_error(ep: Endpoint, target: str) -> HostKeyError:
    """Explain a refused host key: unknown, or changed (which can mean an attack)."""
    try:
        key = await fetch_host_key(ep)
        fp, alg = fingerprint(key), key.get_algorithm()
    except Unreachable:
        fp, alg = None, "host"
    shown = f"{alg} key {fp}" if fp else "key (it could not be read)"
    known = ep.known_hosts_file()
    if recorded_keys(ep):
        return HostKeyError(
            f"the host key of {ep.label()} CHANGED: it now presents the {shown}, not the key "
            f"recorded for {ep.pattern()} in {known}. Someone may be intercepting the connection; "
            f"nothing was sent to it",
            f"if the host was reinstalled and its admin confirms {fp}, run "
            f"`gpu targets trust {target} --replace`", fp, changed=True)
    return HostKeyError(
        f"the host key of {ep.label()} is not known (not in {known}); it presents the {shown}. "
        f"Nothing was sent to it",
        f"check that fingerprint with the host's admin (`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` "
        f"on the host), then run `gpu targets trust {target}`", fp)


def known_hosts_line(ep: Endpoint, key) -> str:
    alg = key.get_algorithm()
    body = key.export_public_key("openssh").decode().split()
    return f"{ep.pattern()} {alg} {body[1]}"


def trust_host_key(ep: Endpoint, key, *, replace: bool = False) -> Path:
    """Record `key` for the host in known_hosts. A different recorded key stays (and this
    refuses) unless `replace`, which drops the host's old lines first."""
    import asyncssh

    path = ep.known_hosts_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = path.read_text().splitlines() if path.exists() else []
    recorded = recorded_keys(ep)
    if recorded and any(k.public_data == key.public_data for k in recorded) and not replace:
        return path
    if recorded and not replace:
        raise ValueError("changed")
    keep = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            try:
                m = asyncssh.import_known_hosts(stripped).match(
                    ep.host, _addr(ep.host), ep.port if ep.port != 22 else None)
                if m[0] or m[1]:
                    continue
            except (ValueError, asyncssh.Error):
                pass
        keep.append(line)
    keep.append(known_hosts_line(ep, key))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text("\n".join(keep) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    import errno
    import socket

    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):  # the name has no address: no network was tried
        return f"the host name does not resolve ({exc.strerror or text}): check the address"
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"no route to that address ({exc.strerror or text}): check the address and the network"
    if type(exc).__name__ == "ConnectionLost" or isinstance(exc, ConnectionResetError):
        return ("the connection closed before SSH could start (no SSH server answers there, or the "
                "address cannot be routed): check the address and port")
    return text


class SSHTransport(Transport):
    kind = "ssh"

    def __init__(self, endpoint: Endpoint, name: str | None = None) -> None:
        super().__init__()
        self.ep = endpoint
        self.name = name or endpoint.host

    def describe(self) -> str:
        return self.ep.label()

    # -- the pooled connection --------------------------------------------------------------

    def _entry(self) -> _Conn:
        loop = asyncio.get_running_loop()
        entry = _POOL.get(self.ep)
        if entry is None or entry.loop is not loop:
            if entry is not None and entry.conn is not None:
                try:  # a connection from a loop that is gone: drop it without awaiting
                    entry.conn.abort()
                except Exception:  # noqa: BLE001
                    pass
            entry = _Conn(loop=loop, lock=asyncio.Lock())
            _POOL[self.ep] = entry
        return entry

    async def connection(self):
        import asyncssh

        entry = self._entry()
        if entry.conn is not None and not entry.conn.is_closed():
            return entry
        async with entry.lock:
            if entry.conn is not None and not entry.conn.is_closed():
                return entry
            entry.conn = entry.sftp = None
            wait = entry.retry_at - time.monotonic()
            started = time.time()
            if wait > 0:
                raise Unreachable(f"{entry.last_error} (next try in {wait:.0f}s)")
            try:
                conn = await asyncio.wait_for(asyncssh.connect(
                    self.ep.host, self.ep.port, username=self.ep.user,
                    client_keys=[os.path.expanduser(self.ep.key)] if self.ep.key else (),
                    known_hosts=_load_known_hosts(self.ep),
                    agent_forwarding=False, x11_forwarding=False,
                    keepalive_interval=self.ep.keepalive()[0], keepalive_count_max=self.ep.keepalive()[1],
                    connect_timeout=self.ep.connect_timeout, login_timeout=self.ep.connect_timeout),
                    self.ep.connect_timeout + 5)
            except asyncssh.HostKeyNotVerifiable:
                self._backoff(entry, "host key refused")
                raise await host_key_error(self.ep, self.name) from None
            except asyncssh.PermissionDenied as exc:
                self._backoff(entry, f"login refused: {_describe(exc)}")
                raise Unreachable(f"{self.ep.label()} refused the login ({_describe(exc)}): "
                                  f"check --user and --key") from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError, TimeoutError) as exc:
                self._backoff(entry, f"{self.ep.label()}: {_describe(exc)}")
                self._went_silent(entry, started)
                raise Unreachable(entry.last_error) from None
            entry.conn = conn
            entry.failures = 0
            entry.retry_at = 0.0
            entry.connects += 1
            return entry

    @staticmethod
    def _backoff(entry: _Conn, why: str) -> None:
        entry.failures += 1
        entry.last_error = why
        entry.retry_at = time.monotonic() + min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (entry.failures - 1))

    def silent_since(self) -> float | None:
        """When the host stopped answering (wall clock), or None while it answers."""
        entry = _POOL.get(self.ep)
        return entry.silent_since if entry is not None else None

    @staticmethod
    def _went_silent(entry: _Conn, started: float) -> None:
        """A call started at `started` got no answer: the host is silent since then at most."""
        if entry.silent_since is None or started < entry.silent_since:
            entry.silent_since = started

    def _drop(self, entry: _Conn) -> None:
        conn, entry.conn, entry.sftp = entry.conn, None, None
        if conn is not None:
            try:
                conn.abort()
            except Exception:  # noqa: BLE001
                pass

    async def _sftp(self, entry: _Conn):
        if entry.sftp is None:
            entry.sftp = await entry.conn.start_sftp_client()
        return entry.sftp

    async def _with_retry(self, op, what: str, retry: bool = True, bound: float | None = None):
        """Run `op` on the pooled connection, once more on a fresh one if the link dropped.

        Bounded end to end on a silent host: the connect by connect_timeout, the call by the
        keepalives (silent_s) or by `bound` where given (a small SFTP read or write), the
        second try likewise. A call that got no answer marks the host silent since its start;
        any answer clears it."""
        import asyncssh

        started = time.time()
        for attempt in (0, 1):
            entry = await self.connection()
            try:
                if bound is None:
                    result = await op(entry)
                else:
                    try:
                        result = await asyncio.wait_for(op(entry), bound)
                    except (asyncio.TimeoutError, TimeoutError):
                        self._drop(entry)
                        self._went_silent(entry, started)
                        raise Unreachable(f"{self.ep.label()}: {what} got no answer within "
                                          f"{bound:g}s") from None
                entry.silent_since = None
                return result
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, asyncssh.ChannelOpenError,
                    BrokenPipeError, ConnectionError) as exc:
                self._drop(entry)
                self._went_silent(entry, started)
                if attempt == 0 and retry:
                    continue
                raise Unreachable(f"{self.ep.label()}: connection lost during {what} "
                                  f"({_describe(exc)})") from None
            except asyncssh.SFTPError as exc:  # the host said no (permissions, a full disk)
                raise TransportError(f"{self.ep.label()}: {what} failed: {exc.reason}") from None
        raise AssertionError("unreachable")

    # -- the interface ----------------------------------------------------------------------

    async def run(self, script: str, *, input: bytes | None = None, timeout: float = 120.0,
                  check: str | None = None, retry: bool = True) -> Result:
        command = "exec /bin/sh -c " + quote(script)

        async def op(entry: _Conn) -> Result:
            import asyncssh

            # no input: stdin is /dev/null (an EOF at once), so nothing can wait on it
            stdin = {"input": input} if input else {"stdin": asyncssh.DEVNULL}
            try:
                r = await asyncio.wait_for(entry.conn.run(command, encoding=None, check=False, **stdin),
                                           timeout)
            except (asyncio.TimeoutError, TimeoutError):
                self._drop(entry)  # a hung link: start afresh next time
                raise Unreachable(f"{self.ep.label()}: a command took longer than {timeout:g}s") from None
            code = r.exit_status if r.exit_status is not None and r.exit_status >= 0 else None
            return Result(code, r.stdout or b"", r.stderr or b"")

        result = await self._with_retry(op, "a command", retry)
        self.stats["bytes_sent"] += len(command) + len(input or b"")
        self.stats["bytes_received"] += len(result.stdout) + len(result.stderr)
        return self._checked(result, check)

    async def stream_to(self, script: str, local: Path, *, max_bytes: int, idle_s: float = SMALL_OP_S,
                        what: str = "a copy", on_bytes: Callable[[int], None] | None = None) -> tuple[Result, int]:
        """See Transport.stream_to: the command's stdout read off the channel in chunks into
        `local`. A silent host ends it by the keepalives (the link's silent_s: Unreachable,
        the host marked silent since the copy began), never retried (the caller's next look
        starts a fresh copy); a stopped copy closes its channel, so the command on the host
        meets a closed pipe and ends."""
        import asyncssh

        command = "exec /bin/sh -c " + quote(script)

        async def op(entry: _Conn) -> tuple[Result, int]:
            proc = await entry.conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL)
            err = asyncio.ensure_future(tail_of(proc.stderr.read))
            try:
                n = await pump(proc.stdout.read, local, max_bytes=max_bytes, idle_s=idle_s, what=what,
                               where=self.ep.label(), on_bytes=on_bytes)
                await asyncio.wait_for(proc.wait_closed(), idle_s)
                stderr = await asyncio.wait_for(err, idle_s)
            except BaseException:
                proc.close()
                err.cancel()
                raise
            if proc.exit_status is None:  # the channel ended without an exit: the link went
                raise asyncssh.ConnectionLost(f"{what} ended without an exit status")
            code = proc.exit_status if proc.exit_status >= 0 else None
            return Result(code, b"", stderr), n

        try:
            result, n = await self._with_retry(op, what, retry=False)
        except BaseException:
            local.unlink(missing_ok=True)
            raise
        self.stats["commands"] += 1
        self.stats["bytes_sent"] += len(command)
        self.stats["bytes_received"] += n + len(result.stderr)
        return result, n

    async def put_bytes(self, data: bytes, remote: str) -> int:
        async def op(entry: _Conn) -> None:
            sftp = await self._sftp(entry)
            async with sftp.open(remote, "wb") as f:
                await f.write(data)

        await self._with_retry(op, f"writing {remote}", bound=SMALL_OP_S + len(data) / 65536)
        self.stats["bytes_sent"] += len(data)
        self.stats["files_sent"] += 1
        return len(data)

    async def put_file(self, local: Path, remote: str) -> int:
        async def op(entry: _Conn) -> None:
            sftp = await self._sftp(entry)
            await sftp.put(str(local), remote)

        await self._with_retry(op, f"uploading {local.name}")
        size = local.stat().st_size
        self.stats["bytes_sent"] += size
        self.stats["files_sent"] += 1
        return size

    async def get_file(self, remote: str, local: Path, max_bytes: int | None = None) -> int:
        async def op(entry: _Conn) -> int:
            sftp = await self._sftp(entry)
            size = (await sftp.stat(remote)).size or 0
            if max_bytes is not None and size > max_bytes:
                raise TransportError(f"{remote} is {size} bytes, over the {max_bytes} byte cap")
            await sftp.get(remote, str(local))
            return size

        size = await self._with_retry(op, f"downloading {remote}")
        self.stats["bytes_received"] += size
        return size

    async def read_from(self, remote: str, offset: int, limit: int) -> tuple[bytes, int]:
        import asyncssh

        async def op(entry: _Conn) -> tuple[bytes, int]:
            sftp = await self._sftp(entry)
            try:
                async with sftp.open(remote, "rb") as f:
                    size = (await f.stat()).size or 0
                    if offset >= size:
                        return b"", size
                    await f.seek(offset)
                    return await f.read(min(limit, size - offset)), size
            except asyncssh.SFTPNoSuchFile:
                return b"", -1

        data, size = await self._with_retry(op, f"reading {remote}", bound=SMALL_OP_S + limit / 65536)
        self.stats["bytes_received"] += len(data)
        return data, size

    async def close(self) -> None:
        entry = _POOL.get(self.ep)
        if entry is None or entry.loop is not asyncio.get_running_loop():
            return
        _POOL.pop(self.ep, None)
        if entry.conn is not None:
            entry.conn.close()
            try:
                await asyncio.wait_for(entry.conn.wait_closed(), 5)
            except (asyncio.TimeoutError, TimeoutError):
                pass


async def close_all() -> None:
    """Close every pooled connection of the running loop (a CLI command ends)."""
    loop = asyncio.get_running_loop()
    for ep, entry in list(_POOL.items()):
        if entry.loop is loop:
            await SSHTransport(ep).close()

