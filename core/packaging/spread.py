"""A cold pack's per-file work spread over the machine's cores: this process and helpers.

A first pack of a 20,000-file project reads, judges (the credential gate's content rules) and
stores every file; that work is Python between system calls, so threads fight over the GIL
(two threads packed small files three times slower than one). Helpers are separate
processes instead: `python -P -c ...` importing this same code (the folder holding `core` put
first, the project's own folder never on the path), fed chunks of jobs over a pipe. This
process works through the same queue between two looks at the pipes, so a helper that starts
late, or dies, costs only its share: whatever a helper took and did not answer is done here.

Only plain facts cross the pipe (JSON lines: names, sizes, digests, verdicts); each job is
one call of a module-level function `func(context, job) -> result`, the same function here
and in a helper, so what a helper decides is exactly what this process would. A UserError a
job raises (a file that changed into a credential while packing) comes back as one and stops
the whole run, as it would in one process.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any, Callable

from core.errors import UserError

Job = list
Result = Any
Func = Callable[[dict, Job], Result]

MIN_JOBS = 400  # files worth one helper's start (~60 ms of a core) ...
MIN_BYTES = 48 << 20  # ... or bytes to read: hashing and copying big files is work too
CHUNK_JOBS = 48  # jobs per message: few enough to balance the tail, enough to amortise JSON
CHUNK_BYTES = 8 << 20  # or this many file bytes, so a chunk of big files is not one core's tail
MAX_HELPERS = 3
OFF_VAR = "GPU_ROUTER_SPREAD"  # "0": every file on this process (a debugging aid)


def helpers_wanted(n_jobs: int, n_bytes: int = 0, n_chunks: int | None = None) -> int:
    """How many helper processes this much work is worth on this machine (0: do it here)."""
    if os.environ.get(OFF_VAR) == "0":
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    worth = int(n_jobs / MIN_JOBS + n_bytes / MIN_BYTES)
    chunks = n_jobs if n_chunks is None else n_chunks
    return max(0, min(MAX_HELPERS, cores - 1, worth, chunks - 1))


def run(func: Func, context: dict, jobs: list[Job], *, sizes: list[int] | None = None,
        tick: Callable[[], None] = lambda: None) -> list[Result]:
    """func(context, job) for every job, on this process and helpers; results in job order.
    `sizes` (bytes per job) keeps a chunk of big files small; `tick` is told of each job done."""
    results: list[Result] = [None] * len(jobs)
    chunks = _chunks(len(jobs), sizes)
    wanted = helpers_wanted(len(jobs), sum(sizes) if sizes else 0, len(chunks))
    if not wanted:
        for i, job in enumerate(jobs):
            results[i] = func(context, job)
            tick()
        return results
    queue = deque(chunks)
    helpers = [h for h in (_Helper.start(func, context) for _ in range(wanted)) if h is not None]
    failed = True
    try:
        for h in helpers:
            for _ in range(2):  # one to work on, one waiting: the pipe never runs dry
                if queue:
                    h.send(queue.popleft(), jobs)
        local: deque[int] = deque()
        while queue or local or any(h.busy for h in helpers):
            if not local and queue:
                local.extend(queue.pop())  # this process takes from the far end
            if local:
                i = local.popleft()
                results[i] = func(context, jobs[i])
                tick()
                timeout = 0.0
            else:
                timeout = 1.0  # nothing left here: wait for the helpers' last answers
            for h in _ready([h for h in helpers if h.busy], timeout):
                done, redo = h.answers()
                for i, value in done:
                    results[i] = value
                    tick()
                local.extend(redo)
                if not h.alive:
                    queue.extendleft(h.take_back())
                    helpers.remove(h)
                    h.close(kill=True)
                elif queue and len(h.held) < 2:
                    h.send(queue.popleft(), jobs)
        failed = False
    finally:
        for h in helpers:
            h.close(kill=failed)  # an error or Ctrl-C here: the helpers' work is moot
    return results


def _chunks(n: int, sizes: list[int] | None) -> list[list[int]]:
    out: list[list[int]] = []
    cur: list[int] = []
    weight = 0
    for i in range(n):
        cur.append(i)
        weight += sizes[i] if sizes else 0
        if len(cur) >= CHUNK_JOBS or weight >= CHUNK_BYTES:
            out.append(cur)
            cur, weight = [], 0
    if cur:
        out.append(cur)
    return out


def _ready(helpers: list[_Helper], timeout: float) -> list[_Helper]:
    """The helpers with something to read, after writing what each can take of its pending
    input. Writes never block: a helper blocked writing a long reply while this process
    blocked writing it a long chunk would wait on each other for ever."""
    if not helpers:
        return []
    by_out = {h.out_fd: h for h in helpers}
    by_in = {h.in_fd: h for h in helpers if h.pending}
    readable, writable, _ = select.select(list(by_out), list(by_in), [], timeout)
    for fd in writable:
        by_in[fd].flush()
    return [by_out[fd] for fd in readable]


class _Helper:
    """One helper process, the chunks it holds, and the input it has yet to be given."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.out_fd = proc.stdout.fileno()
        self.in_fd = proc.stdin.fileno()
        os.set_blocking(self.in_fd, False)
        self.held: deque[list[int]] = deque()
        self.buf = b""
        self.pending = bytearray()
        self.alive = True

    @classmethod
    def start(cls, func: Func, context: dict) -> _Helper | None:
        top = str(Path(__file__).resolve().parents[2])  # the folder holding `core`
        code = f"import sys; sys.path.insert(0, {top!r}); from core.packaging.spread import serve; serve()"
        try:
            proc = subprocess.Popen([sys.executable, "-P", "-c", code], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/",
                                    close_fds=True, bufsize=0)
        except OSError:
            return None
        helper = cls(proc)
        helper._write({"func": f"{func.__module__}:{func.__qualname__}", "context": context})
        return helper

    @property
    def busy(self) -> bool:
        return bool(self.held)

    def _write(self, doc: Any) -> None:
        self.pending += json.dumps(doc).encode("ascii") + b"\n"
        self.flush()

    def flush(self) -> None:
        """Write what the pipe takes now; the rest waits for `_ready` to find it writable."""
        while self.pending and self.alive:
            try:
                n = os.write(self.in_fd, self.pending)
            except BlockingIOError:
                return
            except OSError:  # the helper is gone: its held chunks are taken back on EOF
                self.alive = False
                self.pending.clear()
                return
            del self.pending[:n]

    def send(self, chunk: list[int], jobs: list[Job]) -> None:
        self.held.append(chunk)
        self._write([[i, jobs[i]] for i in chunk])

    def answers(self) -> tuple[list[tuple[int, Result]], list[int]]:
        """(done, to redo here) from every chunk that came back whole; a closed pipe, or a
        line that is not the answer to the chunk it should answer (a stray print in the
        helper's start), marks the helper dead (what it still held is taken back by the caller)."""
        try:
            data = os.read(self.out_fd, 1 << 20)
        except OSError:
            data = b""
        if not data:
            self.alive = False
            return [], []
        self.buf += data
        out: list[tuple[int, Result]] = []
        redo: list[int] = []
        while b"\n" in self.buf and self.held:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                reply = json.loads(line)
                answered = [item[0] for item in reply]
            except (ValueError, TypeError, IndexError, KeyError):
                answered = None
            if answered != self.held[0]:
                self.alive = False
                return out, redo
            self.held.popleft()
            for i, kind, value in reply:
                if kind == "error":
                    raise UserError(value[0], fix=value[1])
                if kind == "crash":  # a fault of ours in the helper: this process does it
                    redo.append(i)
                    continue
                out.append((i, value))
        return out, redo

    def take_back(self) -> list[list[int]]:
        held, self.held = list(self.held), deque()
        return held

    def close(self, kill: bool = False) -> None:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError, ValueError):
            os.set_blocking(self.in_fd, True)
            self.proc.stdin.close()
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdout.close()


def serve() -> None:
    """A helper's loop: the first line names the function and its context; each next line is
    a chunk of [index, job] pairs, answered by one line of [index, kind, value] triples."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the packer's to handle: it stops us
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    head = json.loads(stdin.readline())
    module, _, name = head["func"].partition(":")
    func = getattr(importlib.import_module(module), name)
    context = head["context"]
    for line in stdin:
        reply = []
        for i, job in json.loads(line):
            try:
                reply.append([i, "ok", func(context, job)])
            except UserError as exc:
                reply.append([i, "error", [exc.what, exc.fix]])
            except Exception as exc:  # noqa: BLE001 - the parent redoes it and reports its own
                reply.append([i, "crash", repr(exc)])
        stdout.write(json.dumps(reply).encode("ascii") + b"\n")
        stdout.flush()
