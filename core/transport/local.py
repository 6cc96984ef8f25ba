"""The local shell behind the Transport interface: a login node we sit on, and the tests' twin."""

from __future__ import annotations

import os
import shutil
from typing import Callable
from pathlib import Path

from core.transport.base import STREAM_CHUNK, Result, Transport, TransportError, pump, tail_of

# -- the local shell -----------------------------------------------------------------------


class LocalTransport(Transport):
    """This machine: a Slurm or PBS login node we are on (`--local`), and the tests' twin."""

    kind = "local"

    def __init__(self, name: str = "local", env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.name = name
        self.env = env or {}

    async def run(self, script: str, *, input: bytes | None = None, timeout: float = 120.0,
                  check: str | None = None, retry: bool = True) -> Result:
        import asyncio  # lazy: off `gpu submit`'s start
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, stdin=asyncio.subprocess.PIPE if input is not None
            else asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **self.env}, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            try:  # the whole group: a child left holding the pipes would keep us waiting
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            await proc.wait()
            raise TransportError(f"a command on {self.name} took longer than {timeout:g}s") from None
        if input:
            self.stats["bytes_sent"] += len(input)
        return self._checked(Result(proc.returncode, out, err), check)

    async def stream_to(self, script: str, local: Path, *, max_bytes: int, idle_s: float = 60.0,
                        what: str = "a copy", on_bytes: Callable[[int], None] | None = None) -> tuple[Result, int]:
        """See Transport.stream_to: the command's stdout pumped into `local` as it comes."""
        import asyncio  # lazy: off `gpu submit`'s start
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **self.env}, start_new_session=True)
        err = asyncio.ensure_future(tail_of(proc.stderr.read))
        try:
            n = await pump(proc.stdout.read, local, max_bytes=max_bytes, idle_s=idle_s, what=what,
                           where=self.name, on_bytes=on_bytes)
            code = await asyncio.wait_for(proc.wait(), idle_s)
            stderr = await asyncio.wait_for(err, idle_s)
        except BaseException:
            try:  # the whole group: the copy stops, and nothing is left holding the pipes
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            # Python 3.11's wait() returns only once every pipe has closed, and a stdout left
            # full (the copy stopped reading it) is paused and never sees its end: read it to
            # the end (the group is gone, so the end comes), then reap
            while await proc.stdout.read(STREAM_CHUNK):
                pass
            await proc.wait()
            err.cancel()
            local.unlink(missing_ok=True)
            raise
        self.stats["commands"] += 1
        self.stats["bytes_received"] += n
        return Result(code, b"", stderr), n

    async def put_bytes(self, data: bytes, remote: str) -> int:
        def write() -> None:
            path = Path(os.path.expanduser(remote))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)

        await _local_io(write)
        self.stats["bytes_sent"] += len(data)
        self.stats["files_sent"] += 1
        return len(data)

    async def put_file(self, local: Path, remote: str) -> int:
        def copy() -> int:
            dest = Path(os.path.expanduser(remote))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, dest)
            return dest.stat().st_size

        size = await _local_io(copy)
        self.stats["bytes_sent"] += size
        self.stats["files_sent"] += 1
        return size

    async def get_file(self, remote: str, local: Path, max_bytes: int | None = None) -> int:
        def copy() -> int:
            src = Path(os.path.expanduser(remote))
            size = src.stat().st_size
            if max_bytes is not None and size > max_bytes:
                raise TransportError(f"{remote} is {size} bytes, over the {max_bytes} byte cap")
            shutil.copyfile(src, local)
            return size

        size = await _local_io(copy)
        self.stats["bytes_received"] += size
        return size

    async def read_from(self, remote: str, offset: int, limit: int) -> tuple[bytes, int]:
        def read() -> tuple[bytes, int]:
            try:
                with open(os.path.expanduser(remote), "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if offset >= size:
                        return b"", size
                    f.seek(offset)
                    return f.read(min(limit, size - offset)), size
            except FileNotFoundError:
                return b"", -1

        data, size = await _local_io(read)
        self.stats["bytes_received"] += len(data)
        return data, size


async def _local_io(fn):
    """Run a file operation off the loop; a refused one is a TransportError like over SSH."""
    import asyncio  # lazy: off `gpu submit`'s start
    try:
        return await asyncio.to_thread(fn)
    except TransportError:
        raise
    except OSError as exc:
        raise TransportError(f"{getattr(exc, 'filename', '') or ''}: {exc.strerror or exc}") from None
