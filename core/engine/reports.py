"""The documents every report returns: `gpu ... --json` and the MCP tools build them here.

One function per report, so the CLI's `--json` shapes (documented and stable) and what an
agent gets over MCP cannot drift apart: the MCP tools return the same documents, with a few
fields an agent needs on top (elapsed against the estimate, cost, a log chunk by offset).
Nothing here writes to a terminal or filters text for one; the fronts do that.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from core.display.logtail import fold_returns
from core.engine.guidance import guidance
from core.engine.jobfiles import log_path
from core.engine.jobreport import end_warnings, job_report
from core.engine.service import SubmitResult
from core.jobs.states import ACTIVE, TERMINAL, State
from core.jobs.records import _iso
from core.jobs.store import Job, Store
from core.errors import UserError
from core.planning.usage import job_cost

LOG_CHUNK = 64 * 1024  # what one read of a log by offset returns at most (an agent's context)
MAX_LOG_CHUNK = 1 << 20
ARTIFACTS_CAP = 1000  # files listed by `artifacts` (a job may write many thousands)


def parse_states(text: str) -> list[State]:
    """`running,done` as states; a clear error naming the ones there are."""
    try:
        return [State(s.strip()) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"unknown state in {text!r}",
                        fix=f"states: {', '.join(s.value for s in State)}") from None


def jobs_doc(store: Store, *, states: list[State] | None = None, active: bool = False,
             limit: int | None = 50) -> dict[str, Any]:
    """`gpu jobs --json`: {jobs: [...]}, newest first; with sweeps among them also
    {groups: [...]}: each group (counts per state, progress) with its points' short ids."""
    if states is None and active:
        states = list(ACTIVE)
    jobs = store.jobs(states=states, limit=limit)
    doc: dict[str, Any] = {"jobs": [j.to_json() for j in jobs]}
    groups = groups_of(store, jobs)
    if groups:
        from core.engine.sweeps import group_json

        doc["groups"] = [{**group_json(g, points), "jobs": [p.short_id for p in points]}
                         for g, points in groups.values()]
    return doc


def groups_of(store: Store, jobs: list) -> dict[str, tuple[Any, list]]:
    """The groups (sweeps) the `jobs` belong to, each with all of its points, by group id."""
    ids = list(dict.fromkeys(j.group_id for j in jobs if j.group_id))
    return {g.id: (g, store.group_jobs(g.id)) for g in store.groups(ids)} if ids else {}


def live_doc(store: Store, supervisor_pid: int | None) -> dict[str, Any]:
    """`gpu status --json` without a job: the supervisor and the live jobs."""
    return {"supervisor": {"running": supervisor_pid is not None, "pid": supervisor_pid},
            "jobs": [j.to_json() for j in store.jobs(states=ACTIVE)]}


OUTCOME_TAIL_LINES = 40  # the log lines a result carries when its job ended within the grace


def submit_doc(store: Store, result: SubmitResult, *, verbose: bool = False,
               tail_lines: int = OUTCOME_TAIL_LINES) -> dict[str, Any]:
    """A submit's result, {job, guidance, submitted, bundle} (the contract's shape): a job that
    already ended (it settled within the grace, `submit(settle=True)`) carries its outcome,
    `exit_code`, the last `tail_lines` lines of its log as `job.log_tail` and the declared
    artifacts it did not write as `job.missing_artifacts` (`missing_artifacts`), so the agent
    needs no second call; with `verbose`, the job carries every event as `job.events`."""
    doc = result.to_json(verbose=verbose)
    if not hasattr(result, "job"):  # a sweep's group: {group, jobs, guidance, submitted, bundle}
        return doc
    job = result.job
    if verbose:
        doc["job"]["events"] = [e.to_json() for e in store.events(job.id)]
    if job.state in TERMINAL:
        doc["job"]["exit_code"] = job.exit_code
        doc["job"]["log_tail"] = log_tail(job, tail_lines)
        missing = missing_artifacts(job)
        if missing:  # as `gpu status` names them: declared, not written
            doc["job"]["missing_artifacts"] = missing
    return doc


def missing_artifacts(job: Job) -> list[str]:
    """The declared artifacts (compute_job's `artifacts`, gpu.yaml's `outputs`) that nothing
    that came home matches, once the job ended; [] while it runs and for one that never ran.

    The rule is `jobreport.end_warnings`, the one `gpu status` shows ("declared, not written"):
    the supervisor reads it at the job's end and keeps it in the handle as `ended`. A result
    read in the moment between the job's end and that reading (a start whose grace saw the
    end) asks the same rule now: the outputs came home before the job was marked ended."""
    if job.state not in TERMINAL:
        return []
    ended = job.handle.get("ended")
    if ended is not None:
        return list(ended.get("missing_artifacts") or [])
    if job.exit_code is None and job.started_at is None and not job.handle.get("launched_at"):
        return []  # held, denied, cancelled or refused before it ran: nothing was to be written
    fields, _ = end_warnings(job, tracked=True)
    return list(fields.get("missing_artifacts") or [])


def wait_doc(store: Store, job: Job, start: State, *, until: str, waited_s: float,
             verbose: bool = False, front: str = "gpu", log_lines: int | None = None) -> dict[str, Any]:
    """A wait's answer: the job's status (`agent_status`) and `wait`, what the wait saw:
    from which state to which, whether it moved or ended, what it waited for."""
    doc = agent_status(store, job, verbose=verbose, front=front, log_lines=log_lines)
    doc["wait"] = {"from": start.value, "to": job.state.value, "changed": job.state != start,
                   "ended": job.state in TERMINAL, "until": until, "waited_s": round(waited_s, 2)}
    return doc


def status_doc(store: Store, job: Job, *, verbose: bool = False, front: str = "cli") -> dict[str, Any]:
    """`gpu status ID --json`: the job object, its last events (all with verbose), guidance;
    with verbose, its `journey` too (each attempt, where, why it moved: `journey`)."""
    events = store.events(job.id)
    doc = job_report(store, job, verbose=verbose)
    doc["events"] = [e.to_json() for e in (events if verbose else events[-5:])]
    if verbose:
        doc["journey"] = journey(store, job)
    doc["guidance"] = guidance(job, True, front)
    return doc


def agent_status(store: Store, job: Job, *, verbose: bool = False, front: str = "gpu",
                 log_lines: int | None = None) -> dict[str, Any]:
    """`status_doc` and what an agent weighs before its next step: how long the job has run
    against its estimate, what it cost so far, each metric's last value, and the log's tail."""
    doc = status_doc(store, job, verbose=verbose, front=front)
    hours = job.request.get("hours")
    ran = None if job.started_at is None else max(0.0, (job.ended_at or time.time()) - job.started_at)
    doc["elapsed"] = {"seconds": None if ran is None else round(ran, 1),
                      "estimate_seconds": None if not hours else round(hours * 3600, 1),
                      "fraction_of_estimate": round(ran / (hours * 3600), 3) if ran is not None and hours else None}
    doc["cost"] = {"so_far": round(job_cost(store, job.id), 4),
                   "estimated": job.plan.get("estimated_price"),
                   "price_per_hour": job.plan.get("price_per_hour")}
    doc["metrics"] = store.metrics_summary(job.id)
    doc["outputs_dir"] = job.outputs_dir
    if "missing_artifacts" not in doc:  # ended, and the supervisor has not said so yet
        missing = missing_artifacts(job)
        if missing:
            doc["missing_artifacts"] = missing
    if log_lines:
        doc["log_tail"] = log_tail(job, log_lines)
    return doc


# -- the journey ---------------------------------------------------------------------------

ERROR_TAIL_LINES = 12  # the lines of a failed job's log shown above its journey


def journey(store: Store, job: Job, *, tail_lines: int = ERROR_TAIL_LINES,
            iso: bool = True) -> dict[str, Any]:
    """A job's journey, read from its events alone: each attempt, where it ran, when it
    started and ended, how it ended (`moved`, or the job's end state) and why, and from which
    checkpoint it started; for a failed job, the last `tail_lines` lines of its log too.

    The supervisor writes one event per step (core/engine/jobsteps.py, jobmoves.py,
    resume.py); an attempt begins at each move into provisioning (`attempt + 1`) and ends at
    the next move into migrating or an end state. The dashboard's detail screen and `gpu
    status --verbose` (and its --json) show this one document, so they cannot tell two
    stories. Times are ISO 8601 (as in every --json), or epoch seconds with `iso=False` (a
    front that shows local time). Text is as recorded: the fronts filter it for a terminal."""
    attempts: list[dict[str, Any]] = []
    target: str | None = None  # the last target a plan named: where the next attempt goes
    checkpoint: dict | None = None  # the checkpoint a resume or move named for the next attempt
    current: dict[str, Any] | None = None
    for e in store.events(job.id):
        data = e.data or {}
        if data.get("target") or data.get("to"):
            target = str(data.get("to") or data.get("target"))
        if data.get("checkpoint") and e.dst in (State.ROUTING, State.PROVISIONING):
            checkpoint = data["checkpoint"]
        if e.dst == State.PROVISIONING:
            if current is not None and current["end"] is None:  # never closed: a crash between
                current.update(end=e.ts, ended="moved", why=e.reason)
            before = attempts[-1]["target"] if attempts else None
            current = {"attempt": len(attempts) + 1, "target": target or job.provider, "start": e.ts,
                       "running": None, "end": None, "ended": None, "why": None,
                       "from_target": data.get("from") or (before if before != target else None),
                       "checkpoint": _checkpoint_brief(checkpoint), "started_because": e.reason}
            attempts.append(current)
            checkpoint = None
        elif current is None or current["end"] is not None:
            continue  # before the first attempt, or between attempts (routing, a hold)
        elif e.dst is None and data.get("attempt"):
            current["attempt"] = int(data["attempt"])  # "attempt N started on X": its own number
        elif e.dst in (State.RUNNING, State.CHECKPOINTING) and current["running"] is None:
            current["running"] = e.ts
        elif e.dst == State.MIGRATING:
            current.update(end=e.ts, ended="moved", why=e.reason)
        elif e.dst is not None and State(e.dst) in TERMINAL:
            current.update(end=e.ts, ended=str(e.dst), why=e.reason)
    when = _iso if iso else (lambda ts: ts)
    doc: dict[str, Any] = {"job": job.short_id, "state": job.state.value,
                           "attempts": [{**a, "start": when(a["start"]), "running": when(a["running"]),
                                         "end": when(a["end"])} for a in attempts],
                           "moves": sum(1 for a in attempts if a["ended"] == "moved")}
    if job.state == State.FAILED:
        doc["error"] = job.reason
        doc["error_tail"] = [line.decode("utf-8", "replace")
                             for line in log_tail(job, tail_lines).split(b"\n") if line.strip()]
    return doc


def _checkpoint_brief(ckpt: dict | None) -> dict | None:
    """What a person asks of the checkpoint an attempt started from: which, how big, whose."""
    if not ckpt:
        return None
    return {k: ckpt[k] for k in ("generation", "bytes", "target", "attempt") if ckpt.get(k) is not None}


# -- logs ----------------------------------------------------------------------------------


def _read_log(job: Job) -> bytes:
    path = log_path(job)
    return path.read_bytes() if path.exists() else b""


def _tail(data: bytes, lines: int | None) -> bytes:
    """The last `lines` lines, each progress bar folded to its last state (job.log keeps
    every step; a reader wants what a terminal would show)."""
    return fold_returns(data if lines is None else b"\n".join(data.split(b"\n")[-(lines + 1):]))


def log_tail(job: Job, lines: int | None) -> bytes:
    """The whole log, or its last `lines` lines (bytes, progress bars folded: the front
    filters them)."""
    return _tail(_read_log(job), lines)


def logs_doc(job: Job, tail: int | None = None, *, offsets: bool = False) -> dict[str, Any]:
    """`gpu logs ID --json`: {job, state, log} (the log as bytes, progress bars folded to
    their last state: the front filters it).
    With `offsets`, also the log's size as `next_offset`, where a read by offset goes on."""
    data = _read_log(job)
    doc: dict[str, Any] = {"job": job.short_id, "state": job.state.value, "log": _tail(data, tail)}
    if offsets:
        doc["next_offset"] = doc["size"] = len(data)
    return doc


def log_chunk(job: Job, offset: int, max_bytes: int = LOG_CHUNK) -> dict[str, Any]:
    """The log from byte `offset`, at most `max_bytes` and ending at a line's end when more
    follows; `next_offset` is where the next read starts. A log that shrank below `offset`
    (rotated, truncated) is read again from the top and says so."""
    max_bytes = max(1, min(int(max_bytes), MAX_LOG_CHUNK))
    path = log_path(job)
    restarted = False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset > size:
                offset, restarted = 0, True
            f.seek(offset)
            data = f.read(max_bytes)
    except FileNotFoundError:
        size, data = 0, b""
        restarted = offset > 0
        offset = 0
    end = offset + len(data)
    if end < size and b"\n" in data:  # more follows: stop at a whole line
        data = data[:data.rfind(b"\n") + 1]
        end = offset + len(data)
    doc: dict[str, Any] = {"job": job.short_id, "state": job.state.value, "offset": offset,
                           "next_offset": end, "size": size, "more": end < size,
                           "log": fold_returns(data)}  # offsets count job.log's raw bytes
    if restarted:
        doc["restarted"] = "the log is shorter than the offset asked for: read from the start"
    return doc


# -- metrics, targets, plans, outputs -------------------------------------------------------


def metrics_doc(store: Store, job: Job, key: str | None = None, *, series: bool = True) -> dict[str, Any]:
    """`gpu metrics ID --json`: last, min, max and points per key, and every point (series)."""
    metrics = store.metrics(job.id, key)
    if key and not metrics:
        known = sorted(store.metrics_summary(job.id))
        raise UserError(f"job {job.short_id} has no metric {key!r}",
                        fix=f"its metrics: {', '.join(known)}" if known
                        else "it has logged none yet (the job calls gpu.log(step=..., loss=...))")
    out: dict[str, Any] = {}
    for k, s in metrics.items():
        out[k] = {"last": s[-1][1], "min": min(v for _, v, _ in s), "max": max(v for _, v, _ in s),
                  "points": len(s)}
        if series:
            out[k]["series"] = [{"step": st, "value": v, "ts": ts} for st, v, ts in s]
        else:
            out[k]["last_step"] = s[-1][0]
    return {"job": job.short_id, "metrics": out}


def targets_doc(store: Store) -> dict[str, Any]:
    """`gpu targets --json`: {targets: [...]}, probed now (the providers load only here)."""
    from core.engine import targets

    return {"targets": [i.to_json() for i in targets.infos(store).values()]}


def plan_doc(bundle_summary: dict, plan: dict, elsewhere: dict | None = None) -> dict[str, Any]:
    """`gpu plan --json`: {plan, bundle, needs_approval}; the plan holds its digest. With GPU
    cloud accounts configured, `elsewhere` too (`core.engine.accounts.elsewhere`): the cheapest
    current offer for the job's GPU and VRAM and what it would cost there. It sits beside the
    plan, not in it, so it never changes the digest a person approves."""
    doc = {"plan": plan, "bundle": bundle_summary, "needs_approval": bool(plan["holds"])}
    if elsewhere is not None:
        doc["elsewhere"] = elsewhere
    return doc


def job_only(job: Job) -> dict[str, Any]:
    """`gpu cancel/approve/deny --json`: {job}."""
    return {"job": job.to_json()}


def artifacts_doc(job: Job, cap: int = ARTIFACTS_CAP) -> dict[str, Any]:
    """The files that came home to the job's `runs/<short_id>/`, without following a link.

    They arrive when the job ends (and the log and metrics with them); while it runs the
    folder may not exist yet. A job whose runs/<id>/ was refused (a link, not your folder)
    lists the folder at home its outputs were kept in instead (core/engine/jobfiles.py).
    An ended job's declared artifacts that none of them matches are `missing_artifacts`, and
    `note` says so (`missing_artifacts`, the rule `gpu status` uses)."""
    root = Path((job.handle.get("outputs_kept") or {}).get("dir") or job.outputs_dir)
    files: list[dict[str, Any]] = []
    total = 0
    if root.is_dir() and not root.is_symlink():
        for folder, dirs, names in os.walk(root):  # os.walk does not follow links by default
            dirs.sort()
            for name in sorted(names):
                full = Path(folder) / name
                try:
                    st = full.lstat()
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += 1
                if len(files) < cap:
                    files.append({"path": full.relative_to(root).as_posix(), "bytes": st.st_size})
    doc: dict[str, Any] = {"job": job.short_id, "state": job.state.value,
                           "outputs_dir": str(root), "files": files, "count": total}
    if total > len(files):
        doc["truncated"] = f"{total - len(files)} more files not listed"
    if job.state not in TERMINAL:
        doc["note"] = "outputs come home when the job ends"
    missing = missing_artifacts(job)
    if missing:  # declared, and none of the files above matches them (`gpu status` says the same)
        doc["missing_artifacts"] = missing
        doc["note"] = (f"declared, not written: {', '.join(missing)} (the job wrote nothing "
                       f"that matches {'them' if len(missing) != 1 else 'it'})")
    return doc
