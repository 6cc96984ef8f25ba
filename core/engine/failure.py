"""Why a job failed, in one line: its own error, taken from the end of its log.

"exited with status 1" says nothing a person or an agent can act on; the cause sits in the
log (a Python traceback's last line, or the last lines a shell command printed). `job_error`
reads the log's tail (core/display/logtail.py, the reader `gpu logs` uses) and picks that
line: the last exception of the last traceback, else the last few lines the job printed.
The text is filtered for the terminal (core/display/sanitize.py, the one choke point for job
text) and masked with the job's secret values (core/secrets/names.py, read from the keychain
now; the launcher masked the log as it was written already, this is the second look).

When the error is a file the job could not find that exists in the project but was left out
of its bundle (git-ignored: nanoGPT's `data/<set>/train.bin`), the reason says so and how to
ship it: `include:` in gpu.yaml, or `--data`. The supervisor records the result as the failed
job's reason, so `gpu status` (and --json), the dashboard, the MCP tools and job.json all say it.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import paths
from core.display.logtail import tail_lines
from core.display.sanitize import printable
from core.errors import UserError
from core.jobs.store import Job
from core.packaging.leftout import find_left_out
from core.runtime import uvenv

TAIL_LINES = 200  # lines of the log's end read for the error (a traceback fits many times)
LAST_LINES = 3  # lines shown when the job printed no traceback
LINE_CAP = 300  # characters kept of one line of the error
ERROR_CAP = 600  # characters kept of the whole error

_OURS = "[gpu-router] "  # the launcher's own lines: how the attempt went, never the job's error
_ATTEMPT_START = re.compile(r"^\[gpu-router\] attempt \d+: running ")
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
# an exception line printed without its "Traceback" header (a SyntaxError of the script itself)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b(?::.*)?$")
# the path a "file not found" names: Python's OSError text, a shell tool's, a few libraries'
_MISSING = (
    re.compile(r"No such file or directory: (?P<q>['\"])(?P<path>[^'\"]+)(?P=q)"),
    re.compile(r"FileNotFoundError: .*?(?P<q>['\"])(?P<path>[^'\"]+)(?P=q)"),
    re.compile(r"(?:^|: )(?P<path>[^\s:'\"]+): No such file or directory"),
    re.compile(r"(?P<q>['\"])(?P<path>[^'\"]+)(?P=q):? (?:does not exist|not found)"),
)


@dataclass
class JobError:
    """A failed job's own error (`text`), and the project path it missed that did not ship."""

    text: str
    not_shipped: str | None = None  # project-relative, as the person would `include:` it
    left_out_why: str = ""  # the bundle report's reason: "ignored by git", "withheld: ..."

    def reason(self) -> str:
        """The error, with what to do when it is a file that did not ship."""
        if not self.not_shipped:
            return self.text
        return f"{self.text} -- {not_shipped_fix(self.not_shipped, self.left_out_why)}"


def not_shipped_fix(rel: str, why: str) -> str:
    """What to tell the person about a path the job needed that stayed home."""
    base = posixpath.basename(rel.rstrip("/")) or rel
    return (f"{rel} exists in the project but did not ship ({why or 'left out of the bundle'}): "
            f"add it to `include:` in gpu.yaml, or pass it as data (`--data {base}={rel}`, "
            f"read at gpu.data_dir()/{base})")


def error_text(lines: list[str]) -> str | None:
    """The job's error in its log's last lines (already printable): the exception line of
    the last traceback, else the last LAST_LINES lines it printed, joined; None if it
    printed nothing. gpu-router's own lines are skipped, and so is what came before the
    last attempt's start."""
    for i in range(len(lines) - 1, -1, -1):
        if _ATTEMPT_START.match(lines[i]):
            lines = lines[i + 1:]
            break
    own = [line.rstrip() for line in lines if not line.startswith(_OURS)]
    own = [line for line in own if line.strip()]
    if not own:
        return None
    start = next((i for i in range(len(own) - 1, -1, -1) if _TRACEBACK.match(own[i])), None)
    if start is not None:
        found = _exception_line(own[start + 1:])
        if found:
            return _cap(found)
    if _EXCEPTION.match(own[-1].strip()):
        return _cap(own[-1].strip())
    return _cap(" | ".join(_cap(line.strip(), LINE_CAP) for line in own[-LAST_LINES:]), ERROR_CAP)


def _exception_line(after: list[str]) -> str | None:
    """The first line after a traceback's frames (which are indented): `ValueError: bad lr`."""
    indent = len(after[0]) - len(after[0].lstrip()) if after else 0
    for line in after:
        if len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith("File \""):
            return line.strip()
    return None


def _cap(text: str, cap: int = LINE_CAP) -> str:
    return text if len(text) <= cap else text[:cap - 1] + "…"


def missing_path(error: str) -> str | None:
    """The path a "no such file" error names, as written, or None."""
    for pattern in _MISSING:
        m = pattern.search(error)
        if m:
            return m.group("path").strip()
    return None


def not_shipped(job: Job, path: str) -> tuple[str, str] | None:
    """(the project-relative path, why it was left out) when `path`, as the job named it,
    is a file or folder of the project that its bundle left out; else None.

    A relative path is read from the job's working folder (the project's folder in its
    repository); an absolute one names the target's copy, so its endings are tried."""
    project = Path(job.project_dir or "")
    prefix = str(job.plan.get("workdir") or "").strip("/")
    left_out = list((job.bundle or {}).get("left_out") or [])
    if not job.project_dir or not left_out:
        return None
    norm = posixpath.normpath(path.replace(os.sep, "/"))
    if norm.startswith("/"):
        parts = norm.strip("/").split("/")
        tries = ["/".join(parts[i:]) for i in range(1, len(parts))]
    else:
        tries = [norm]
    for rel in tries:
        if rel in ("", ".") or rel == ".." or rel.startswith("../"):
            continue
        try:
            if not os.path.lexists(project / rel):
                continue
        except (OSError, ValueError):
            continue
        item = find_left_out(posixpath.join(prefix, rel) if prefix else rel, left_out)
        if item is not None:
            return rel, str(item.get("reason") or "left out")
    return None


def job_error(job: Job, mask: Any = None) -> JobError | None:
    """The job's error from the end of its log (see the module's docstring), or None when its
    log holds nothing. `mask` masks secret values (core/secrets/names.NameMask); without one
    it is made from the keychain for a job that declared secrets."""
    lines, _ = tail_lines(paths.jobs_dir() / job.id / "job.log", TAIL_LINES)
    if mask is None and job.request.get("secrets"):
        from core.secrets import names

        try:
            mask = names.for_job(job)
        except UserError:
            mask = None  # no keychain answers: the launcher's masking of the log stands
    text = shown_error(lines, mask)
    if not text:
        return None
    missed = missing_path(text)
    found = not_shipped(job, missed) if missed else None
    return JobError(text, *(found or (None, "")))


def shown_error(lines: list[str], mask: Any = None) -> str | None:
    """`error_text` as it may be shown anywhere: secret values masked, then reduced to
    printable text on one line (whatever the lines held: tests/engine/test_job_errors.py)."""
    text = error_text([printable(line) for line in lines])
    if not text:
        return None
    if mask:
        text = mask.mask(text)
    text = printable(text).replace("\n", " ").replace("\t", " ").strip()
    return text or None


def failed_reason(job: Job, exit_code: int | None, detail: str = "") -> str:
    """The reason a job that exited non-zero is recorded with: its status and its error
    (the launcher's own `detail` first: a failure before or around the job's run)."""
    if detail.startswith(uvenv.FAILED):  # it never started: the installer's reason, no status
        return detail
    head = f"exited with status {exit_code}"
    if detail:
        return f"{head}: {detail}"
    try:
        err = job_error(job)
    except OSError:
        err = None
    return f"{head}: {err.reason()}" if err else head
