"""The gpu_* tools of `gpu mcp`: each takes the checked arguments and returns a document.

They run in a worker thread (the engine blocks: git, hashing, SQLite) and call only the
engine's public functions; the documents are the ones `gpu ... --json` prints (built in
core/engine/reports.py), with guidance in tool calls instead of shell commands.

Every call that arrives here is an agent's, whatever terminal the server was started from:
submissions are `interactive=False` with actor "agent (it came through MCP; mcp)", so every approval rule holds
for them in full, and no tool approves or denies.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from core.engine import actor as actor_rule
from core.errors import UserError
from tui.mcp_schema import LOGS_DEFAULT_LINES, SUBMIT_PROPERTIES, WAIT_DEFAULT_S, WAIT_MAX_S

ACTOR = actor_rule.mcp().label("mcp")  # "agent (it came through MCP; mcp)"
WAIT_POLL_S = 0.2
WAIT_PROGRESS_S = 5.0  # a wait says it is alive this often (clients reset their timeouts)


@dataclass
class Call:
    """What a tool may do besides returning: tell progress, notice it was cancelled."""

    progress: Callable[[float, float | None, str], None] = lambda done, total, text: None
    cancelled: Callable[[], bool] = lambda: False


@dataclass
class Engine:
    """The one store of this server process, opened on first use and shared by the worker
    threads (the store serialises its connection)."""

    _store: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def store(self, supervise: bool = True):
        """The store; live jobs that no supervisor drives get one started, as in the CLI."""
        from core.engine.daemon import supervise_live
        from core.jobs.store import Store

        with self._lock:
            if self._store is None:
                self._store = Store()
        if supervise:
            supervise_live(self._store)
        return self._store

    def job(self, ref: str):
        return self.store().resolve(ref)


def argument(tool: str) -> Callable[[str], str]:
    """Where a bad argument came from, in this front's words."""
    return lambda key: f"{tool} argument {key}"


def project_dir(tool: str, key: str, value: str) -> str:
    """An absolute project path: the server's own folder means nothing to the agent."""
    if not os.path.isabs(os.path.expanduser(value)):
        raise UserError(f"{key} {value!r} is not an absolute path", where=f"{tool} argument {key}",
                        fix="pass the absolute path of the project folder, e.g. /Users/me/code/yolo")
    return value


def submit_overrides(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k in SUBMIT_PROPERTIES and k != "project_dir"}


def stage(call: Call) -> Callable[[int, int | None, str], None]:
    return lambda done, total, text: call.progress(float(done), None if total is None else float(total), text)


# -- the tools -----------------------------------------------------------------------------


def gpu_submit(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.config.request import build_request
    from core.engine.service import submit

    project = project_dir("gpu_submit", "project_dir", args["project_dir"])
    req = build_request(project, submit_overrides(args), argument=argument("gpu_submit"),
                        command="gpu_submit")
    result = submit(req, actor=ACTOR, interactive=False, store=engine.store(supervise=False),
                    front="gpu", progress=stage(call))
    return result.to_json(verbose=req.verbose)


def gpu_plan(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.config.request import build_request
    from core.engine.reports import plan_doc
    from core.engine.service import prepare

    project = project_dir("gpu_plan", "project_dir", args["project_dir"])
    req = build_request(project, submit_overrides(args), argument=argument("gpu_plan"),
                        command="gpu_plan")
    bundle, plan = prepare(req, interactive=False, store=engine.store(supervise=False),
                           progress=stage(call))
    from core.engine.accounts import elsewhere

    other = elsewhere(req.gpu, req.vram_gb, req.hours)
    return {**plan_doc(bundle.summary(), plan, other), "digest": plan["digest"]}


def gpu_status(engine: Engine, args: dict[str, Any], call: Call, front: str = "gpu") -> dict[str, Any]:
    from core.engine.reports import agent_status

    store = engine.store()
    return agent_status(store, store.resolve(args["job"]), verbose=bool(args.get("verbose")),
                        front=front, log_lines=args.get("log_lines"))


def gpu_wait(engine: Engine, args: dict[str, Any], call: Call, front: str = "gpu") -> dict[str, Any]:
    """Poll the store (one indexed read) until the job's state is not what it was at the call,
    or it has ended, or the time is up; then its status. The supervisor is started first if
    live jobs have none, so a wait never waits on nobody."""
    from core.engine.reports import agent_status
    from core.jobs.states import TERMINAL

    store = engine.store()
    job = store.resolve(args["job"])
    timeout = args.get("timeout_s")
    timeout = WAIT_DEFAULT_S if timeout is None else max(0.0, min(float(timeout), WAIT_MAX_S))
    start, began = job.state, time.monotonic()
    told = began
    while job.state not in TERMINAL and job.state == start:
        now = time.monotonic()
        if now - began >= timeout or call.cancelled():
            break
        if now - told >= WAIT_PROGRESS_S:
            told = now
            call.progress(round(now - began, 1), timeout, f"job {job.short_id} is still {job.state.value}")
        time.sleep(min(WAIT_POLL_S, max(0.0, timeout - (now - began))))
        job = store.get(job.id)
    doc = agent_status(store, job, front=front, log_lines=args.get("log_lines"))
    doc["wait"] = {"from": start.value, "to": job.state.value, "changed": job.state != start,
                   "ended": job.state in TERMINAL, "waited_s": round(time.monotonic() - began, 2)}
    return doc


def gpu_logs(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    """By lines (the tail) or from a byte offset; either way `next_offset` says where to read on."""
    from core.engine.reports import log_chunk, logs_doc

    job = engine.job(args["job"])
    if args.get("offset") is not None:
        return log_chunk(job, int(args["offset"]), int(args.get("max_bytes") or 65536))
    tail = args.get("tail")
    return logs_doc(job, LOGS_DEFAULT_LINES if tail is None else int(tail), offsets=True)


def gpu_metrics(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import metrics_doc

    store = engine.store()
    return metrics_doc(store, store.resolve(args["job"]), args.get("key"),
                       series=bool(args.get("series")))


def gpu_cancel(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import job_only
    from core.engine.service import cancel

    store = engine.store()
    return job_only(cancel(store, store.resolve(args["job"]).id, actor=ACTOR))


def gpu_jobs(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import jobs_doc, parse_states

    states = parse_states(args["state"]) if args.get("state") else None
    return jobs_doc(engine.store(), states=states, active=bool(args.get("active")),
                    limit=int(args.get("limit") or 50))


def gpu_targets(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import targets_doc

    return targets_doc(engine.store())


HANDLERS: dict[str, Callable[[Engine, dict[str, Any], Call], dict[str, Any]]] = {
    "gpu_submit": gpu_submit, "gpu_status": gpu_status, "gpu_wait": gpu_wait,
    "gpu_logs": gpu_logs, "gpu_metrics": gpu_metrics, "gpu_cancel": gpu_cancel,
    "gpu_jobs": gpu_jobs, "gpu_targets": gpu_targets, "gpu_plan": gpu_plan,
}
