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
from pathlib import Path
from typing import Any, Callable

from core.engine import actor as actor_rule
from core.errors import UserError
from tui.mcp.schema import LOGS_DEFAULT_LINES, SUBMIT_PROPERTIES, WAIT_DEFAULT_S, WAIT_MAX_S

ACTOR = actor_rule.mcp().label("mcp")  # "agent (it came through MCP; mcp)"


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
    # the folder `gpu mcp` was started in: the projects root unless mcp.projects_root says one
    started_in: Path = field(default_factory=Path.cwd)

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
        """A job by its reference; a sweep's group id is answered with its points' ids (a
        log or an outputs folder is a point's)."""
        store = self.store()
        group = store.find_group(ref)
        if group is not None:
            from core.errors import UserError

            points = ", ".join(j.short_id for j in store.group_jobs(group.id)[:20])
            raise UserError(f"{ref} is sweep {group.short_id}: its logs and files are its points'",
                            fix=f"ask for one of its points ({points})")
        return store.resolve(ref)

    def group(self, ref: str):
        """The sweep's group `ref` names, or None (then it names a job)."""
        return self.store().find_group(ref)

    def project(self, tool: str, key: str, name: str) -> str:
        """compute_job's `cwd`: a folder under the projects root (core.config.projectsroot, the
        one check), read against the user config as it is now."""
        from core.config import user as userconfig
        from core.config.projectsroot import project_in_root, projects_root

        root = projects_root(userconfig.load().projects_root, self.started_in)
        return str(project_in_root(root, name, where=f"{tool} argument {key}"))


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


def settling(call: Call) -> tuple[Callable[[int, int | None, str], None], Callable[[float, Any], None]]:
    """A start's progress: the bundling's stages (core.engine.service `Stage`), then the
    grace's ticks (core.engine.waiting `wait_job`). MCP's progress only grows, so the ticks go
    on from the bundling's last value."""
    last = [0.0]

    def bundling(done: int, total: int | None, text: str) -> None:
        last[0] = float(done)
        call.progress(float(done), None if total is None else float(total), text)

    def waiting(waited_s: float, job: Any) -> None:
        call.progress(last[0] + round(waited_s, 1), None,
                      f"job {job.short_id} is {job.state.value} after {waited_s:.0f} s")

    return bundling, waiting


# -- the tools -----------------------------------------------------------------------------


def gpu_submit(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    """The contract's submit: it "returns at once; the job keeps running when this call
    returns". `wait_s` is the wait for the job to be placed or to need approval (as `gpu
    submit --json`), never for its end: the outcome within a grace is compute_job start's."""
    from core.config.request import build_request
    from core.engine.reports import submit_doc
    from core.engine.sweeps import submit  # a sweep as one group, else one job

    project = project_dir("gpu_submit", "project_dir", args["project_dir"])
    req = build_request(project, submit_overrides(args), argument=argument("gpu_submit"),
                        command="gpu_submit")
    store = engine.store(supervise=False)
    result = submit(req, actor=ACTOR, interactive=False, store=store, front="gpu",
                    progress=stage(call))
    return submit_doc(store, result, verbose=bool(req.verbose))


def gpu_plan(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.config.request import build_request
    from core.engine.reports import plan_doc
    from core.engine.service import prepare

    project = project_dir("gpu_plan", "project_dir", args["project_dir"])
    req = build_request(project, submit_overrides(args), argument=argument("gpu_plan"),
                        command="gpu_plan")
    if req.sweep:
        from core.engine.sweeps import preview

        return preview(req, interactive=False, store=engine.store(supervise=False), progress=stage(call))
    bundle, plan = prepare(req, interactive=False, store=engine.store(supervise=False),
                           progress=stage(call))
    from core.engine.accounts import elsewhere

    other = elsewhere(req.gpu, req.vram_gb, req.hours)
    return {**plan_doc(bundle.summary(), plan, other), "digest": plan["digest"]}


def gpu_status(engine: Engine, args: dict[str, Any], call: Call, front: str = "gpu") -> dict[str, Any]:
    from core.engine.reports import agent_status

    store = engine.store()
    group = engine.group(args["job"])
    if group is not None:  # a sweep: its points counted, each point, what to call next
        from core.engine.sweeps import guidance, status_doc

        doc = status_doc(store, group)
        return {**doc, "guidance": guidance(group, store.group_jobs(group.id), True, front)}
    return agent_status(store, store.resolve(args["job"]), verbose=bool(args.get("verbose")),
                        front=front, log_lines=args.get("log_lines"))


def gpu_wait(engine: Engine, args: dict[str, Any], call: Call, front: str = "gpu") -> dict[str, Any]:
    """Wait in the engine (`wait_job`: one indexed read of the store at a time) until the job
    changes state (until="change", the default) or ends or needs a person (until="end"), or
    the time is up; then its status. The supervisor is started first if live jobs have none,
    so a wait never waits on nobody."""
    from core.engine.reports import wait_doc
    from core.engine.waiting import wait_job

    store = engine.store()
    timeout = args.get("timeout_s")
    timeout = WAIT_DEFAULT_S if timeout is None else max(0.0, min(float(timeout), WAIT_MAX_S))
    until = args.get("until") or "change"
    began = time.monotonic()
    group = engine.group(args["job"])
    if group is not None:  # a sweep: until a point moves, or until every point ended
        from core.engine.sweeps import guidance, status_doc, wait_group

        jobs, woken = wait_group(store, group, until=until, timeout_s=timeout, cancelled=call.cancelled)
        doc = status_doc(store, group)
        return {**doc, "guidance": guidance(group, jobs, True, front),
                "wait": {"until": until, "changed": woken, "waited_s": round(time.monotonic() - began, 1),
                         "ended": all(j.state.value in ("done", "failed", "cancelled", "denied") for j in jobs)}}
    job = store.resolve(args["job"])

    def alive(waited_s: float, now: Any) -> None:
        call.progress(round(waited_s, 1), timeout, f"job {now.short_id} is still {now.state.value}")

    last = wait_job(store, job.id, until=until, timeout_s=timeout, since=job.state,
                    cancelled=call.cancelled, tick=alive)
    return wait_doc(store, last, job.state, until=until, waited_s=time.monotonic() - began,
                    verbose=bool(args.get("verbose")), front=front, log_lines=args.get("log_lines"))


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
    group = engine.group(args["job"])
    if group is not None:  # a sweep: each point's metrics, one entry per point
        return {"group": group.to_json(), "points": [
            {"job": j.short_id, "state": j.state.value, "point": j.plan.get("point") or {},
             **metrics_doc(store, j, None, series=bool(args.get("series")))}
            for j in store.group_jobs(group.id)]}
    return metrics_doc(store, store.resolve(args["job"]), args.get("key"),
                       series=bool(args.get("series")))


def gpu_cancel(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import job_only
    from core.engine.cancelling import cancel

    store = engine.store()
    group = engine.group(args["job"])
    if group is not None:  # a sweep: every live point
        from core.engine.sweeps import cancel_group

        return {"group": group.to_json(), "jobs": [j.to_json() for j in cancel_group(store, group, actor=ACTOR)]}
    return job_only(cancel(store, store.resolve(args["job"]).id, actor=ACTOR))


def gpu_jobs(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import jobs_doc, parse_states

    states = parse_states(args["state"]) if args.get("state") else None
    return jobs_doc(engine.store(), states=states, active=bool(args.get("active")),
                    limit=int(args.get("limit") or 50))


def gpu_targets(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    from core.engine.reports import targets_doc

    return targets_doc(engine.store())


def gpu_accounts(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    """`gpu accounts --json`, through the same read-only engine call (core.engine.accounts):
    every request leaves through the read-only client, the keys stay in the keychain."""
    from core.engine.accounts import snapshot

    return snapshot(refresh=bool(args.get("refresh")))


HANDLERS: dict[str, Callable[[Engine, dict[str, Any], Call], dict[str, Any]]] = {
    "gpu_submit": gpu_submit, "gpu_status": gpu_status, "gpu_wait": gpu_wait,
    "gpu_logs": gpu_logs, "gpu_metrics": gpu_metrics, "gpu_cancel": gpu_cancel,
    "gpu_jobs": gpu_jobs, "gpu_targets": gpu_targets, "gpu_plan": gpu_plan,
    "gpu_accounts": gpu_accounts,
}
