"""Guidance: what the caller of a submit, a status or a wait does next, in its own front's words.

Every result a front returns for a job carries it (shell commands for the CLI, tool calls for an
agent over MCP), so an agent is told to wait on a live job, to read a failed job's log from
where its error starts (`_failure_read`), or to tell its person about a held one, without
working that out from the job's state itself.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from core.engine.jobfiles import log_path
from core.jobs.states import TERMINAL, State
from core.jobs.store import Job


def tool_call(tool: str, **arguments: Any) -> str:
    """How guidance names a tool call: `gpu_wait(job="1a2b3c4d")`."""
    return f"{tool}({', '.join(f'{k}={json.dumps(v)}' for k, v in arguments.items())})"


JOB_RESOURCE = "gpu://jobs/"  # + short id: the MCP resource of a job (tui/mcp/watch.py)


FAILURE_READ_MAX = 1 << 20  # the most one read of a log by offset returns (reports.MAX_LOG_CHUNK)
FAILURE_CONTEXT_LINES = 5  # lines read before a traceback's start: what the job did last
FAILURE_LAST_LINES = 40  # lines read of a failure that printed no traceback
FAILURE_MARGIN = 4096  # bytes read past the log's end as it is now: lines written after the end
_TRACEBACK = b"Traceback (most recent call last):"
_CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
_ATTEMPT = re.compile(rb"^\[gpu-router\] attempt \d+: running ")  # the launcher's line (core/runtime/launch.py)


def _failure_read(job: Job) -> dict[str, int]:
    """Where a failed job's log is read so that its error is in that one read: {offset,
    max_bytes} (a read by offset of gpu_logs / compute_job logs), from a few lines before the
    last traceback of its last attempt (a chained traceback from the first of its chain) to
    the log's end; with no traceback, its last FAILURE_LAST_LINES lines. {} without a log."""
    try:
        with open(log_path(job), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            base = max(0, size - FAILURE_READ_MAX)
            f.seek(base)
            data = f.read(size - base)
    except OSError:
        return {}
    if base and b"\n" in data:  # the window began inside a line: from the next whole one
        cut = data.index(b"\n") + 1
        base, data = base + cut, data[cut:]
    lines = data.splitlines(keepends=True)
    if not data.strip():
        return {}
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    floor = max((i for i, line in enumerate(lines) if _ATTEMPT.match(line)), default=0)
    tb = max((i for i in range(floor, len(lines)) if _TRACEBACK in lines[i]), default=None)
    while tb is not None:  # "During handling of the above exception": its cause first
        before = next((i for i in range(tb - 1, floor - 1, -1) if lines[i].strip()), None)
        if before is None or not any(c in lines[before] for c in _CHAINED):
            break
        earlier = max((i for i in range(floor, before) if _TRACEBACK in lines[i]), default=None)
        if earlier is None:
            break
        tb = earlier
    begin = max(floor, len(lines) - FAILURE_LAST_LINES) if tb is None \
        else max(floor, tb - FAILURE_CONTEXT_LINES)
    offset = base + starts[begin]
    return {"offset": offset, "max_bytes": min(FAILURE_READ_MAX, size - offset + FAILURE_MARGIN)}


def _next_calls(job: Job, front: str) -> dict[str, Any]:
    """What an agent calls next: wait on a live job until it ends (it returns then, or when the
    job needs a person: no sleep loop), read the log of one that ended (of a failed one, from
    where its error starts: `_failure_read`), look at one held for a person. `resource` is the job's MCP resource: a client that subscribes to it is told
    when the job's state changes, without calling anything."""
    short = job.short_id
    held = job.state == State.AWAITING_APPROVAL
    failed = job.state == State.FAILED  # its log first, read from where its error starts
    if front == "compute":
        status = ("compute_job", {"action": "wait", "job": short, "timeout_s": 0})
        nxt = status if held else \
            ("compute_job", {"action": "logs", "job": short, **_failure_read(job)}) if failed else \
            ("compute_job", {"action": "artifacts", "job": short}) if job.state in TERMINAL \
            else ("compute_job", {"action": "wait", "job": short, "until": "end"})
    else:
        status = ("gpu_status", {"job": short})
        nxt = status if held else ("gpu_logs", {"job": short, **_failure_read(job)}) if failed \
            else ("gpu_logs", {"job": short}) if job.state in TERMINAL \
            else ("gpu_wait", {"job": short, "until": "end"})
    return {"follow": tool_call(nxt[0], **nxt[1]), "status": tool_call(status[0], **status[1]),
            "next_call": {"tool": nxt[0], "arguments": nxt[1]},
            "resource": JOB_RESOURCE + short, "shell": f"gpu logs -f {short}"}


def guidance(job: Job, submitted: bool, front: str = "cli") -> dict[str, Any]:
    """What the caller does next, in its own front's words: shell commands for the CLI, tool
    calls for an agent over MCP (`front` "gpu" for the gpu_* tools, "compute" for compute_job)."""
    if front == "cli":
        doc: dict[str, Any] = {"follow": f"gpu logs -f {job.short_id}",
                               "status": f"gpu status {job.short_id}"}
    else:
        doc = _next_calls(job, front)
    doc["needs_approval"] = job.state == State.AWAITING_APPROVAL
    slot = job.handle.get("slot_held") or {}  # a target with a free slot would hold it (reroute.py)
    held = slot.get("note") if slot.get("at") == job.provider and job.state == State.ROUTING else None
    queue = job.handle.get("queue_stuck") or held or job.handle.get("queue_note")
    if queue and job.state not in TERMINAL:  # it did not start where it was placed (queuewait.py)
        doc["queue"] = queue
    if not submitted:
        doc["note"] = (f"job {job.short_id} with the same request is still {job.state.value}: "
                       "returned it instead of starting a second copy")
    if job.state == State.AWAITING_APPROVAL:
        from core.planning.policy import plain_paragraph

        # a plan stored by an older version, or the reason, may hold raw text: filter on read
        doc["tell_user"] = plain_paragraph(job.plan.get("tell_user") or job.reason)
        doc["approve"] = f"gpu approve {job.short_id}"
    return doc
