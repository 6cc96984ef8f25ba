"""gpu-router's side of the SkyPilot adapter: the adapter runs as a child process with
SkyPilot's own venv python (core/providers/skypilot/adapter.py); we speak JSON lines to it.

One child serves many requests at once: each request has an id, its answer (and, for an
operation that streams, its lines before the answer) carry that id, and a reader task hands
each to whoever waits on it. Every way the conversation can go wrong is a clear exception
rather than a hang:

- SkyPilot said no (a cluster that does not exist, a launch that found no resources):
  SkyPilotError, with SkyPilot's exception name and its message;
- no answer in time: AdapterTimeout (the request is forgotten; a late answer is dropped);
- the adapter wrote a line that is not the protocol, or died: AdapterBroken, with the line or
  the exit status and the end of its stderr; every request still waiting gets it, and the
  client is closed (a child that broke the protocol once cannot be trusted with the next line).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
from pathlib import Path
from typing import Any, Callable

ADAPTER = Path(__file__).with_name("adapter.py")
LINE_LIMIT = 16 * 1024 * 1024  # a log line can be long; asyncio's default (64 KiB) would break on it
STDERR_KEEP = 40  # lines of the adapter's stderr kept for the message when it dies
DEFAULT_TIMEOUT_S = 120.0
# the environment SkyPilot must always have: no telemetry to outside hosts
QUIET_ENV = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "DO_NOT_TRACK": "1", "SCARF_NO_ANALYTICS": "1"}


class AdapterError(Exception):
    """Anything that went wrong talking to SkyPilot through the adapter."""


class SkyPilotError(AdapterError):
    """SkyPilot answered the request with an error (its exception's name is `kind`)."""

    def __init__(self, op: str, kind: str, message: str) -> None:
        self.op, self.kind, self.text = op, kind, message
        super().__init__(f"SkyPilot {op}: {message} ({kind})")


class AdapterTimeout(AdapterError):
    """No answer within the request's timeout."""


class AdapterBroken(AdapterError):
    """The adapter died or broke the protocol; the client is closed."""


class _Pending:
    def __init__(self, op: str, on_line: Callable[[str], Any] | None) -> None:
        self.op = op
        self.on_line = on_line
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()


class SkyPilotClient:
    """A running adapter. `await SkyPilotClient.start(python, env=...)`, then `await
    client.request("status")`, and `await client.close()` (or `async with`)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: dict[int, _Pending] = {}
        self.next_id = 1
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_KEEP)
        self.broken: AdapterBroken | None = None
        self.write_lock = asyncio.Lock()
        self.reader = asyncio.get_running_loop().create_task(self._read())
        self.err_reader = asyncio.get_running_loop().create_task(self._read_stderr())

    @classmethod
    async def start(cls, python: str | os.PathLike, *, env: dict[str, str] | None = None,
                    adapter: str | os.PathLike = ADAPTER, cwd: str | os.PathLike | None = None) -> "SkyPilotClient":
        """Start the adapter with SkyPilot's venv python. `env` is its whole environment (HOME
        where SkyPilot keeps ~/.sky, the API server's endpoint) with telemetry always off."""
        proc = await asyncio.create_subprocess_exec(
            str(python), "-u", str(adapter), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**(env if env is not None else os.environ), **QUIET_ENV},
            cwd=None if cwd is None else str(cwd), limit=LINE_LIMIT, start_new_session=True)
        return cls(proc)

    async def __aenter__(self) -> "SkyPilotClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- reading ------------------------------------------------------------------------------
    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            try:
                raw = await self.proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not raw:
                return
            self.stderr.append(raw.decode(errors="replace").rstrip("\n"))

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    break
                if not raw.strip():
                    continue
                try:
                    doc = json.loads(raw)
                    if not isinstance(doc, dict) or "id" not in doc:
                        raise ValueError("not an object with an id")
                except ValueError:
                    self._break(f"the SkyPilot adapter wrote a line that is not the protocol: "
                                f"{raw[:300].decode(errors='replace').rstrip()!r}")
                    return
                self._deliver(doc)
        except (ValueError, asyncio.LimitOverrunError) as e:  # a line over LINE_LIMIT
            self._break(f"the SkyPilot adapter wrote a line over {LINE_LIMIT} bytes: {e}")
            return
        code = await self.proc.wait()
        await asyncio.wait([self.err_reader], timeout=2)
        tail = " | ".join(list(self.stderr)[-8:])
        self._break(f"the SkyPilot adapter ended (exit status {code})" + (f"; its stderr ends: {tail}" if tail else ""))

    def _deliver(self, doc: dict) -> None:
        waiting = self.pending.get(doc["id"])
        if waiting is None:
            return  # the answer to a request that timed out: nobody waits for it any more
        if "line" in doc and "ok" not in doc:
            if waiting.on_line is not None:
                try:
                    waiting.on_line(str(doc["line"]))
                except Exception as e:  # the caller's callback failing fails its request only
                    self.pending.pop(doc["id"], None)
                    if not waiting.future.done():
                        waiting.future.set_exception(e)
            return
        self.pending.pop(doc["id"], None)
        if waiting.future.done():
            return
        if doc.get("ok") is True:
            waiting.future.set_result(doc.get("result"))
        elif doc.get("ok") is False:
            err = doc.get("error") if isinstance(doc.get("error"), dict) else {}
            waiting.future.set_exception(SkyPilotError(waiting.op, str(err.get("type") or "Error"),
                                                       str(err.get("message") or "no message")))
        else:
            waiting.future.set_exception(AdapterBroken(f"the SkyPilot adapter's answer to {waiting.op} "
                                                       f"has no ok: {json.dumps(doc)[:300]}"))

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = AdapterBroken(why)
        for rid, waiting in list(self.pending.items()):
            self.pending.pop(rid, None)
            if not waiting.future.done():
                waiting.future.set_exception(AdapterBroken(f"{waiting.op}: {self.broken}"))
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    # -- asking -------------------------------------------------------------------------------
    async def request(self, op: str, args: dict | None = None, *, timeout: float = DEFAULT_TIMEOUT_S,
                      on_line: Callable[[str], Any] | None = None) -> Any:
        """Send one request and wait for its answer: the result, or an AdapterError. Lines the
        operation streams go to `on_line` as they come."""
        if self.broken is not None:
            raise AdapterBroken(f"{op}: {self.broken}")
        rid = self.next_id
        self.next_id += 1
        waiting = _Pending(op, on_line)
        self.pending[rid] = waiting
        line = json.dumps({"id": rid, "op": op, "args": args or {}}) + "\n"
        try:
            async with self.write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode())
                await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            self.pending.pop(rid, None)
            raise AdapterBroken(f"{op}: the SkyPilot adapter is not reading its requests ({e})") from None
        try:
            return await asyncio.wait_for(asyncio.shield(waiting.future), timeout)
        except asyncio.TimeoutError:
            raise AdapterTimeout(f"SkyPilot {op}: no answer in {timeout:g} s") from None
        finally:  # answered, timed out or cancelled: lines still coming for it go nowhere
            self.pending.pop(rid, None)

    async def close(self, grace: float = 10.0) -> None:
        """Close stdin (the adapter finishes what it was asked, then ends), wait `grace`, kill."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except asyncio.TimeoutError:
            try:
                os.killpg(self.proc.pid, 9)  # its own session: SkyPilot's children go with it
            except ProcessLookupError:
                pass
            await self.proc.wait()
        for task in (self.reader, self.err_reader):
            try:
                await asyncio.wait_for(task, 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
        self._break("the SkyPilot adapter was closed")


def ask_once(python: str | os.PathLike, requests: list[tuple[str, dict]], *, env: dict[str, str] | None = None,
             timeout: float = DEFAULT_TIMEOUT_S, adapter: str | os.PathLike = ADAPTER) -> list[Any]:
    """Blocking: one adapter for a few requests (a probe's `check` and `prices`), all sent at
    once with stdin closed after them; their results in the order asked.

    For callers that are not on a loop of their own (a probe runs on a daemon thread,
    core.providers.probing): past `timeout` the adapter's whole session is killed, so an API
    server that never answers leaves no child behind. The first request that failed raises its
    SkyPilotError; no answer at all raises AdapterTimeout or AdapterBroken."""
    import signal
    import subprocess

    lines = "".join(json.dumps({"id": i, "op": op, "args": args}) + "\n" for i, (op, args) in enumerate(requests))
    proc = subprocess.Popen([str(python), "-u", str(adapter)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**(env if env is not None else os.environ), **QUIET_ENV},
                            start_new_session=True)
    try:
        out, err = proc.communicate(lines.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise AdapterTimeout(f"SkyPilot {', '.join(op for op, _ in requests)}: no answer in {timeout:g} s") from None
    answers: dict[int, dict] = {}
    for raw in out.splitlines():
        try:
            doc = json.loads(raw)
        except ValueError:
            raise AdapterBroken("the SkyPilot adapter wrote a line that is not the protocol: "
                                f"{raw[:300].decode(errors='replace')!r}") from None
        if isinstance(doc, dict) and "ok" in doc and isinstance(doc.get("id"), int):
            answers[doc["id"]] = doc
    results = []
    for i, (op, _) in enumerate(requests):
        doc = answers.get(i)
        if doc is None:
            tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-8:])
            raise AdapterBroken(f"{op}: the SkyPilot adapter ended (exit status {proc.returncode}) without "
                                "answering" + (f"; its stderr ends: {tail}" if tail else ""))
        if doc["ok"] is not True:
            e = doc.get("error") if isinstance(doc.get("error"), dict) else {}
            raise SkyPilotError(op, str(e.get("type") or "Error"), str(e.get("message") or "no message"))
        results.append(doc.get("result"))
    return results
