"""One attempt's task output, followed home through SkyPilot's API and split back into what
the runtime on the cluster sent (core/runtime/skypilot_task.py): the job's log lines, its
metric rows, and framed files (core/runtime/frames.py): each checkpoint generation, the
checkpoint folder a job left without freezing one, the outputs, the exit record.

What arrives is kept per attempt under `jobs/<id>/sky/a<N>/`:

    ckpt-gens/<gen>/   each generation as the cluster froze it (the newest few), with its
                       files' times as its marker names them, so the checkpoint mirror lists
                       and packs it by the same code as a host's folder (ckptscan)
    ckpt/              the live folder a job left (sent only where it froze none)
    outputs.tar.gz     out/ packed there; unpacked into runs/<id>/ by safe_extract at the end
    exit.json          the launcher's exit record, sent last

SkyPilot prefixes each line of a task's output with the task's name (`(gr-1a2b3c4d-a1, pid=123) `); lines
without that prefix are SkyPilot's own (`✓ Job finished`) and never the job's. The job's lines
and rows are appended to the attempt's mirrored files and the job's joined ones as they come,
never held whole in memory nor rewritten (a day's log was rewritten every tick). A follower
started again (a supervisor restart) reads the stream from its beginning: as many lines as the
attempt's files hold are read past, and files already here are read past, not rewritten.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from core.providers import logmirror
from core.runtime.frames import FrameReader
from core.runtime.relay import METRIC_MARK


def task_prefix(name: str) -> re.Pattern:
    """How SkyPilot begins each line its task `name` printed (`(gr-1a2b3c4d-a1, pid=123) `;
    an unnamed task's is `task`). Anything else in the stream is SkyPilot's own."""
    return re.compile(rf"^\({re.escape(name)}(?:, rank=\d+)?, pid=\d+\) ")
KEEP_GENERATIONS = 3
EXIT_MAX = 1 << 20
MAX_ERRORS = 20  # what the stream keeps of the files it dropped, for the job's notes
TAR_ALLOWANCE = 16 << 20  # a tar's headers and gzip's worst case over the files it holds


class AttemptStream:
    """What one attempt's stream has brought home so far (see the module's docstring)."""

    def __init__(self, local_dir: Path, attempt: int, max_bytes: int, task: str = "task") -> None:
        self.local_dir = local_dir
        self.prefix = task_prefix(task)
        self.attempt = attempt
        self.folder = local_dir / "sky" / f"a{attempt}"
        self.folder.mkdir(parents=True, exist_ok=True)
        # per kind ("log", "metrics"): lines this follow read, lines held (the attempt's file's
        # and those come since the last store), and those come since the last store
        self.seen = {"log": 0, "metrics": 0}
        self.held = {name: _lines_in(local_dir / "mirror" / f"{attempt}.{name}") for name in logmirror.NAMES}
        self.pending: dict[str, list[str]] = {"log": [], "metrics": []}
        logmirror.rejoin(local_dir, attempt)  # a store cut off between its appends
        self.sky_lines: list[str] = []  # SkyPilot's own, the last few: what a poll may say
        self.errors: list[str] = []
        self.received: list[tuple[str, str, str]] = []  # checkpoints whole, for `store` to unpack
        self.set_aside = 0
        shutil.rmtree(self.folder / "received", ignore_errors=True)  # a restart's: sent again
        self.max_bytes = max_bytes
        self.reader = self._reader()
        self.follows = 0  # follows begun: a line from an earlier one is read past (`line`'s `follow`)
        self.ended = False  # the stream reached its end (the job ended there, or it broke too often)
        self.exit_code: int | None = None  # SkyPilot's, where the stream ended with one
        self.broken: str | None = None  # why the last follow broke, where it did
        self.breaks = 0
        self.broke_at = 0.0  # time.monotonic() of the last break

    def _reader(self) -> FrameReader:
        return FrameReader(str(self.folder / "incoming"), self.max_bytes + TAR_ALLOWANCE, self._on_file,
                           self._on_error, self._have)

    def begin(self) -> int:
        """A follow from the stream's beginning (the first, or one after a break or a restart):
        its lines are counted from the start again, so those held are read past, and a file
        half received is dropped (it is sent again whole). Returns the follow's number."""
        self.reader.close()
        self.reader = self._reader()
        self.seen = {"log": 0, "metrics": 0}
        self.follows += 1
        return self.follows

    def broke(self, why: str, max_breaks: int) -> None:
        """A follow that ended without the stream's end (the adapter restarted, the API server
        was away): followed again later, from the start; after `max_breaks` in a row, ended."""
        import time

        self.broken, self.breaks, self.broke_at = why, self.breaks + 1, time.monotonic()
        if self.breaks >= max_breaks:
            self.end(broken=why)

    # -- lines --------------------------------------------------------------------------------

    def line(self, raw: str, follow: int | None = None) -> None:
        if follow is not None and follow != self.follows:
            return  # an earlier follow's, still coming: the newest reads the stream whole
        m = self.prefix.match(raw)
        if m is None:
            self.sky_lines = [*self.sky_lines[-19:], raw]
            return
        body = raw[m.end():]
        if body.startswith(METRIC_MARK):  # the relay's row: a job's own line never begins so (escaped)
            self._take("metrics", body[len(METRIC_MARK):])
            return
        text = self.reader.feed(body)  # a frame (None), or the job's line as it printed it
        if text is not None:
            self._take("log", text)

    def _take(self, name: str, text: str) -> None:
        self.seen[name] += 1
        if self.seen[name] > self.held[name]:  # past what an earlier follow brought
            self.pending[name].append(text)
            self.held[name] += 1
            self.breaks = 0  # the follow brings what was not here: a later break starts the count again

    @property
    def printed(self) -> bool:
        """Whether the job has printed a line yet (its task is running, past SkyPilot's setup)."""
        return self.held["log"] > 0

    def store(self) -> None:
        """The lines and rows come since the last store, appended to the attempt's mirrored
        files and the job's joined ones (which only grow: the supervisor reads the rows from a
        byte offset). Runs every supervisor tick: nothing is written where nothing came."""
        for name in logmirror.NAMES:
            rows, self.pending[name] = self.pending[name], []
            if rows:
                logmirror.append(self.local_dir, self.attempt, {name: ("\n".join(rows) + "\n").encode()})
        while self.received:  # checkpoints unpacked here, in the tick's thread, not on the loop
            kind, name, path = self.received.pop(0)
            self._file(kind, name, path)

    def end(self, exit_code: Any = None, broken: str | None = None) -> None:
        self.reader.close()
        self.ended = True
        self.exit_code = exit_code if isinstance(exit_code, int) else None
        self.broken = broken

    # -- files --------------------------------------------------------------------------------

    def _have(self, kind: str, name: str) -> bool:
        return {"ckpt": lambda: (self.folder / "ckpt-gens" / name).is_dir(),
                "live": lambda: (self.folder / "ckpt" / ".received").exists(),
                "out": lambda: (self.folder / "outputs.tar.gz").exists(),
                "exit": lambda: (self.folder / "exit.json").exists()}[kind]()

    def _on_error(self, kind: str, name: str, why: str) -> None:
        if len(self.errors) < MAX_ERRORS:  # a job that forges frames by the thousand
            self.errors.append(f"{kind} {name}: {why}"[:500])

    def _on_file(self, kind: str, name: str, path: str) -> None:
        """A file whole and checked (called on the supervisor's loop, as its last line comes): a
        checkpoint is set aside for `store` to unpack in its thread (gigabytes to extract held
        every job's supervision up); the outputs and the exit record are taken at once."""
        if kind in ("ckpt", "live"):
            self.set_aside += 1  # a name of its own: the tick's thread may be unpacking another
            aside = self.folder / "received" / f"{kind}-{name}-{self.set_aside}"
            try:
                aside.parent.mkdir(exist_ok=True)
                os.replace(path, aside)
            except OSError as exc:
                self._on_error(kind, name, str(exc))
                return
            self.received.append((kind, name, str(aside)))
            return
        self._file(kind, name, path)

    def _file(self, kind: str, name: str, path: str) -> None:
        try:
            if kind == "ckpt":
                self._generation(name, path)
            elif kind == "live":
                self._unpack_to(path, self.folder / "ckpt")
                (self.folder / "ckpt" / ".received").touch()
            elif kind == "out":
                os.replace(path, self.folder / "outputs.tar.gz")
            elif kind == "exit":
                with open(path, "rb") as f:
                    doc = json.loads(f.read(EXIT_MAX))
                if not isinstance(doc, dict):
                    raise ValueError("the exit record is not a JSON object")
                tmp = self.folder / "exit.json.part"
                tmp.write_text(json.dumps(doc))
                os.replace(tmp, self.folder / "exit.json")
        except Exception as exc:  # noqa: BLE001 - the file is the job's: any way it is bad, it is dropped
            self._on_error(kind, name, f"{type(exc).__name__}: {exc}")
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _unpack_to(self, archive: str, dest: Path) -> None:
        """An archive from the cluster into a fresh folder that replaces `dest`: regular files
        and folders only (a link, a device, a name out of the folder is refused by tarfile's
        data filter), then its files' times as the marker names them."""
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=self.folder))
        try:
            with tarfile.open(archive, "r:*") as tar:
                for member in tar.getmembers():
                    if not (member.isfile() or member.isdir()):
                        raise ValueError(f"{member.name!r} is not a regular file")
                tar.extractall(staging, filter="data")
            _times_from_marker(staging)
            old = dest.with_name(dest.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            if dest.exists():
                os.replace(dest, old)
            os.replace(staging, dest)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _generation(self, name: str, archive: str) -> None:
        if not (name.isdigit() and len(name) == 10):
            raise ValueError(f"{name!r} is not a generation's name")
        gens = self.folder / "ckpt-gens"
        gens.mkdir(exist_ok=True)
        self._unpack_to(archive, gens / name)
        for old in sorted(n for n in os.listdir(gens) if n.isdigit())[:-KEEP_GENERATIONS]:
            shutil.rmtree(gens / old, ignore_errors=True)

    def newest_generation(self) -> int | None:
        try:
            names = [n for n in os.listdir(self.folder / "ckpt-gens") if n.isdigit() and len(n) == 10]
        except OSError:
            return None
        return int(max(names)) if names else None

    def exit_doc(self) -> dict | None:
        try:
            doc = json.loads((self.folder / "exit.json").read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None


def _lines_in(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def _times_from_marker(folder: Path) -> None:
    """Each file's modification time as the generation's marker recorded it (tar keeps whole
    seconds): the mirror checks a generation's files against its marker by size and time."""
    try:
        doc = json.loads((folder / ".complete").read_text())
        files = dict(doc["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    for rel, v in files.items():
        if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
            continue  # a marker's name is the job's text: never a path out of the folder
        path = folder / rel
        if isinstance(v, list) and len(v) >= 2 and isinstance(v[1], int) and path.is_file() \
                and not path.is_symlink():
            os.utime(path, ns=(v[1], v[1]), follow_symlinks=False)


COST = "cost.json"  # beside an attempt: SkyPilot's own report of its cluster, once down


def write_reported_cost(folder: Path, target: str, row: dict) -> None:
    doc = {"target": target, "cluster": row.get("name"), "cost": row.get("cost"),
           "duration_s": row.get("duration_s"), "usage_intervals": row.get("usage_intervals")}
    tmp = folder / (COST + ".part")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, folder / COST)


def reported_costs(local_dir: Path) -> list[dict]:
    """What SkyPilot reported for each attempt's cluster of a job (`gpu cost`)."""
    out = []
    for path in sorted((local_dir / "sky").glob(f"a*/{COST}")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("cost"), (int, float)):
            out.append(doc)
    return out
