"""Many short looks at one host, sent as one command.

The supervisor looks at every live job each tick. On an SSH host each look was a command of
its own: a channel opened, a shell started, a few lines read, for every job, every second. With
hundreds of jobs on a host that is hundreds of channels a second (OpenSSH also caps the
channels open at once), and the supervisor's loop spends its time opening them. Here the looks
that arrive together (within WINDOW_S, or while a batch is on its way) go as one script that
defines the look once as a shell function and runs it for each attempt in turn, each answer
framed by a random boundary the jobs cannot know, so one command answers them all. The
checkpoint listings (remoteckpt.py) gather the same way: one Python on the host lists them all.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Awaitable, Callable, Generic, TypeVar

from core.transport.base import Result, quote

WINDOW_S = 0.02  # how long the first look waits for others to join it
MAX_ITEMS = 200  # looks per command (a command line stays well under any limit)
T = TypeVar("T")


class Gather(Generic[T]):
    """`await gather.ask(arg)`: this asker's answer from `send(args)`, which answers many at once
    (one per arg, in order). Askers that arrive within WINDOW_S, or while a batch is on its way,
    go in one call (at most MAX_ITEMS an arg list)."""

    def __init__(self, send: Callable[[list[str]], Awaitable[list[T]]]) -> None:
        self._send_many = send
        self._waiting: list[tuple[str, asyncio.Future[T]]] = []
        self._flush: asyncio.Task | None = None

    async def ask(self, arg: str) -> T:
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((arg, fut))
        if self._flush is None or self._flush.done():
            self._flush = asyncio.get_running_loop().create_task(self._send_all())
        return await fut

    async def _send_all(self) -> None:
        await asyncio.sleep(WINDOW_S)
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_ITEMS], self._waiting[MAX_ITEMS:]
            await self._send(batch)

    async def _send(self, batch: list[tuple[str, asyncio.Future[T]]]) -> None:
        try:
            answers = await self._send_many([arg for arg, _ in batch])
            if len(answers) != len(batch):
                raise ValueError(f"{len(answers)} answers to {len(batch)} questions")
        except BaseException as exc:  # noqa: BLE001 - each asker hears why, cancellation too
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), answer in zip(batch, answers):
            if not fut.done():
                fut.set_result(answer)


class LookBatch(Gather[str]):
    """`await batch.ask(arg)`: the output of `look arg` on the host, run with the others."""

    def __init__(self, run: Callable[[str], Awaitable[Result]], function: str) -> None:
        super().__init__(self._looks)
        self._run = run
        self._function = function  # the body of the shell function `look`, its argument $1

    async def _looks(self, args: list[str]) -> list[str]:
        mark = "gpu-router-look-" + secrets.token_hex(16)
        script = (f"look() {{\n{self._function}\n}}\n"
                  f"for a in {' '.join(quote(arg) for arg in args)}; do\n"
                  f"  printf '\\n%s\\n' {mark}; look \"$a\"\ndone\nprintf '\\n%s\\n' {mark}\n")
        result = await self._run(script)
        answers = result.out.split(f"\n{mark}\n")[1:len(args) + 1]
        if len(answers) != len(args):
            raise ValueError(f"{len(answers)} answers to {len(args)} looks ({result.err[:200]!r})")
        return answers
