"""`gpu jobs`, `status`, `logs` (and following one), `grep`, `metrics`, `cancel`, `resume` and
`fetch`: watching, stopping and resuming jobs and bringing their files home.
"""

from __future__ import annotations

import argparse
import sys
import time

from tui.cli.common import here, open_store
from tui.show.output import emit_json, markup, say, write


def cmd_jobs(args: argparse.Namespace) -> int:
    from core.engine.reports import jobs_doc, parse_states
    from core.jobs.states import ACTIVE

    store = open_store()
    states = parse_states(args.state) if args.state else list(ACTIVE) if args.active else None
    if args.json:
        emit_json(jobs_doc(store, states=states, limit=args.limit))
        return 0
    jobs = store.jobs(states=states, limit=args.limit)
    if not jobs:
        from core.jobs.states import State

        total = sum(store.count_by_provider(list(State)).values()) if states is not None else 0
        if total:  # none of the states asked for, but jobs there are
            which = "active" if args.active and not args.state else ", ".join(s.value for s in states)
            say(markup("no {which} jobs ({total} in all: [bold]gpu jobs[/])", which=which, total=total))
        else:
            say(markup("no jobs yet: submit one with [bold]gpu submit SCRIPT --hours H[/]"))
        return 0
    from core.engine.reports import groups_of
    from tui.show.render import jobs_table

    say(jobs_table(jobs, groups=groups_of(store, jobs)))  # a sweep: one row
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from core.engine.daemon import running_pid

    store = open_store()
    if not args.id:
        from core.jobs.states import ACTIVE

        pid = running_pid()
        if args.json:
            from core.engine.reports import live_doc

            emit_json(live_doc(store, pid))
            return 0
        jobs = store.jobs(states=ACTIVE)
        from tui.show.render import jobs_table

        say(f"supervisor: {'running (pid %d)' % pid if pid else 'not running (starts on demand)'}")
        say(jobs_table(jobs) if jobs else markup("no live jobs (see all with [bold]gpu jobs[/])"))
        return 0
    job = store.resolve_any(args.id, here())
    if not hasattr(job, "state"):  # a sweep's group
        return _group_status(store, job, args)
    if args.json:
        from core.engine.reports import status_doc

        emit_json(status_doc(store, job, verbose=args.verbose))
        return 0
    from core.packaging.checkpoints import summary
    from core.engine.jobreport import mirroring_paused
    from core.planning.usage import estimate_and_actual
    from tui.show.render import status_panel

    from core.engine.reports import journey

    events = store.events(job.id)
    say(status_panel(job, events, store.metrics_summary(job.id), verbose=args.verbose,
                     usage=estimate_and_actual(store, job), checkpoint=summary(job.id),
                     mirroring=mirroring_paused(store, job),
                     journey=journey(store, job, iso=False) if args.verbose else None))
    return 0


def _one_job(store, ref: str, command: str):
    """The job `ref` names; a sweep's id is answered with its points (a log, a job's files,
    are a point's)."""
    found = store.resolve_any(ref, here())
    if hasattr(found, "state"):
        return found
    from core.errors import UserError

    points = [j.short_id for j in store.group_jobs(found.id)]
    raise UserError(f"{ref} is sweep {found.short_id}, of {len(points)} points: `gpu {command}` "
                    "reads one point", fix=f"give one of its points: {', '.join(points[:20])}"
                    + (" ..." if len(points) > 20 else "") + f" (`gpu status {found.short_id}` lists them)")


def _jobs_of(store, ref: str) -> list:
    """The job `ref` names, or every point of the sweep it names."""
    found = store.resolve_any(ref, here())
    return [found] if hasattr(found, "state") else store.group_jobs(found.id)


def _group_status(store, group, args: argparse.Namespace) -> int:
    """`gpu status GROUP`: counts per state, progress, each point, the best by --metric."""
    from core.engine.sweeps import status_doc

    doc = status_doc(store, group, metric=args.metric, mode="max" if args.max else "min")
    if args.json:
        emit_json(doc)
        return 0
    g = doc["group"]
    counts = ", ".join(f"{n} {state}" for state, n in sorted(g["states"].items()))
    say(markup("sweep [bold]{short}[/] ({name}): {n} points, {done} ended ({pct}%): {counts}",
               short=g["short_id"], name=g["name"], n=g["points"], done=g["done"],
               pct=f"{g['progress'] * 100:.0f}", counts=counts))
    from core.config.sweep import label

    for j in doc["jobs"]:
        say(markup("  {short}  {state:<18} {point}  {provider}", short=j["short_id"], state=j["state"],
                   point=label(j.get("point") or {}), provider=j.get("provider") or ""))
    best = doc.get("best")
    if args.metric:
        say(markup("best by {key} ({mode}): {job} {point} = {value}", key=args.metric,
                   mode="max" if args.max else "min", job=best["job"], point=label(best["point"]),
                   value=f"{best['value']:g}") if best else f"no point has logged {args.metric} yet")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from core.engine.jobfiles import log_path
    from tui.show.output import safe

    store = open_store()
    job = _one_job(store, args.id or "last", "logs")
    path = log_path(job)
    if args.id is None and not args.json:  # say whose log this is; stdout stays the log alone
        write(f"gpu logs: job {job.short_id} ({job.name}), the newest; "
              f"gpu logs ID for another\n", sys.stderr)
    if args.follow and not args.json:
        return _follow_log(store, job, path, args.tail)
    from core.engine.reports import log_tail, logs_doc

    if args.json:
        doc = logs_doc(job, args.tail)
        emit_json({**doc, "log": safe(doc["log"])})
        return 0
    write(log_tail(job, args.tail))
    return 0


def _follow_log(store, job, path, tail: int | None) -> int:
    """Print complete lines as they come (the dashboard's Follower: truncation and rotation
    handled, each line filtered), then gpu-router's own line saying how the job ended."""
    from core.display.logtail import Follower
    from core.jobs.states import TERMINAL

    follower = Follower(path)
    said = _say_waiting(job, None)  # before its first line: what the job waits for heads the log
    if tail is not None:
        _write_lines(follower.start(tail))
    try:
        while True:
            lines, _ = follower.read()
            if lines:
                _write_lines(lines)
                continue
            job = store.get(job.id)
            said = _say_waiting(job, said)
            if job.state in TERMINAL:
                while lines := follower.read()[0]:  # what was written just before it ended
                    _write_lines(lines)
                if follower.pending:
                    from core.display.logtail import fold_returns

                    write(fold_returns(follower.pending) + b"\n")
                write(f"-- job {job.short_id} {job.state.value}: {job.reason}\n")
                return 0 if job.state.value == "done" else 1
            time.sleep(0.2)
    except KeyboardInterrupt:
        return 130


def _say_waiting(job, said: tuple | None) -> tuple | None:
    """While a followed job is not running, say once per change what it waits for: a person's
    approval (the rule, and how to give it), or a slot or a queue (why)."""
    from core.jobs.states import TERMINAL, State

    if job.state in (State.RUNNING, State.CHECKPOINTING) or job.state in TERMINAL:
        return None
    now = (job.state, job.reason)
    if now == said:
        return said
    if job.state == State.AWAITING_APPROVAL:
        write(f"-- job {job.short_id} waits for a person's approval: {job.reason or 'held'}\n"
              f"-- to approve it: gpu approve {job.short_id} (or press a on it in gpu dash); "
              f"to refuse: gpu deny {job.short_id}; following until it runs...\n")
    else:
        write(f"-- job {job.short_id} is {job.state.value}" + (f": {job.reason}" if job.reason else "")
              + "; following until it runs...\n")
    return now


def _write_lines(lines: list[str]) -> None:
    if lines:
        write("\n".join(lines) + "\n")


def cmd_grep(args: argparse.Namespace) -> int:
    """`gpu grep PATTERN [ID...]`: each hit as `SHORT_ID:LINE: text`, like grep -n over files;
    exit 0 with hits, 1 without (as grep), so a script can test for a pattern; `--json`
    exits 0 either way (the document says what was found)."""
    from core.engine.loggrep import grep_logs

    store = open_store()
    jobs = [j for ref in args.ids for j in _jobs_of(store, ref)] if args.ids else None
    doc = grep_logs(store, args.pattern, jobs, max_hits=args.max, ignore_case=args.ignore_case)
    if args.json:
        emit_json(doc)
        return 0
    for hit in doc["hits"]:
        write(f"{hit['job']}:{hit['line']}: {hit['text']}\n")
    if doc["stopped"]:
        write(f"gpu grep: {doc['stopped']}\n", sys.stderr)
    elif not doc["hits"]:
        write(f"gpu grep: no line matches in {doc['jobs_searched']} job log"
              f"{'s' * (doc['jobs_searched'] != 1)}\n", sys.stderr)
    return 0 if doc["hits"] else 1


def cmd_metrics(args: argparse.Namespace) -> int:
    from core.engine.reports import metrics_doc

    store = open_store()
    job = store.resolve_any(args.id, here())
    if not hasattr(job, "state"):  # a sweep: one line per point
        return _group_metrics(store, job, args)
    doc = metrics_doc(store, job, args.key)  # an unknown --key is an error here
    if args.json:
        emit_json(doc)
        return 0
    summary = store.metrics_summary(job.id)
    if not doc["metrics"]:
        say(f"job {job.short_id} has logged no metrics yet (the job calls gpu.log(step=..., loss=...))")
        return 0
    from tui.show.render import metrics_table

    say(metrics_table({k: v for k, v in summary.items() if not args.key or k == args.key}))
    return 0


def _group_metrics(store, group, args: argparse.Namespace) -> int:
    """`gpu metrics GROUP [--key K]`: one line per point (its values, its metrics' last values)."""
    from core.config.sweep import label
    from core.display.sanitize import printable_doc

    rows = []
    for job in store.group_jobs(group.id):
        summary = store.metrics_summary(job.id)
        if args.key:
            summary = {k: v for k, v in summary.items() if k == args.key}
        rows.append({"job": job.short_id, "state": job.state.value, "point": job.plan.get("point") or {},
                     "metrics": summary})
    if args.json:
        emit_json(printable_doc({"group": group.to_json(), "points": rows}))
        return 0
    for r in rows:
        values = "  ".join(f"{k}={v['last']:g} (min {v['min']:g}, max {v['max']:g})"
                           for k, v in r["metrics"].items()) or "no metrics yet"
        say(markup("{job}  {state:<10} {point}  {values}", job=r["job"], state=r["state"],
                   point=label(r["point"]), values=values))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from core.engine.cancelling import cancel

    store = open_store()
    target = store.resolve_any(args.id, here())
    if not hasattr(target, "state"):  # a sweep: every live point
        from core.engine.sweeps import cancel_group

        jobs = cancel_group(store, target, actor="cli", checkpoint=args.checkpoint, grace_s=args.grace)
        if args.json:
            emit_json({"group": target.to_json(), "jobs": [j.to_json() for j in jobs]})
        else:
            for j in jobs:
                say(markup("job [bold]{short}[/]: {state}", short=j.short_id, state=j.state.value))
        return 0
    job = cancel(store, target.id, actor="cli",
                 checkpoint=args.checkpoint, grace_s=args.grace)
    if args.json:
        from core.engine.reports import job_only

        emit_json(job_only(job))
        return 0
    from tui.show.render import state_text

    say(markup("job [bold]{short}[/]: {state}  {reason}", short=job.short_id,
               state=state_text(job.state.value), reason=job.reason))
    if job.handle.get("stayed"):  # what it wrote stays on the target, as for any ended job
        say(markup("[yellow]note:[/] {note}", note=job.handle["stayed"]))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """`gpu resume ID`: an ended job (cancelled, failed) runs again from its checkpoint, as
    its next attempt, planned again under the approval rules for whoever asks."""
    from core.engine.resume import resume
    from tui.cli.common import actor_of

    store = open_store()
    actor = actor_of(args)
    target = store.resolve_any(args.id, here())
    if not hasattr(target, "state"):  # a sweep: its failed and cancelled points
        from core.engine.sweeps import resume_group

        done = resume_group(store, target, actor=actor.label("terminal" if actor.is_person else "cli"),
                            interactive=actor.is_person)
        if args.json:
            emit_json({"group": target.to_json(),
                       "jobs": [{**j.to_json(), **({"not_resumed": why} if why else {})} for j, why in done]})
        else:
            for j, why in done:
                say(markup("job [bold]{short}[/]: {state}  {why}", short=j.short_id, state=j.state.value,
                           why=why or j.reason))
        return 0
    job = resume(store, target.id,
                 actor=actor.label("terminal" if actor.is_person else "cli"), interactive=actor.is_person)
    if args.json:
        from core.engine.reports import job_only
        from core.engine.guidance import guidance

        emit_json({**job_only(job), "guidance": guidance(job, True)})
        return 0
    from tui.show.render import state_text

    say(markup("job [bold]{short}[/]: {state}  {reason}", short=job.short_id,
               state=state_text(job.state.value), reason=job.reason))
    if job.state.value == "awaiting_approval":
        say(markup("a person approves it with [bold]gpu approve {short}[/]", short=job.short_id))
    else:
        say(markup("follow it with [bold]gpu logs -f {short}[/]", short=job.short_id))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from core.engine.fetch import fetch
    from tui.show.render import human_bytes

    store = open_store()
    doc = fetch(store, _one_job(store, args.id, "fetch").id, args.paths)
    if args.json:
        emit_json(doc)
        return 0
    say(markup("[bold]{files}[/] file{s}, {size} from {target} into {dest}", files=doc["files"],
               s="s" * (doc["files"] != 1), size=human_bytes(doc["bytes"]), target=doc["target"],
               dest=doc["dest"]))
    for path in doc["missing"]:
        say(markup("[yellow]not there:[/] {path}", path=path))
    for item in doc["refused"]:
        say(markup("[yellow]not fetched:[/] {path}: {why}", path=item["path"], why=item["why"]))
    if doc["capped"]:
        say(markup("[yellow]stopped at[/] {path}: the target's output caps (max_output_bytes, "
                   "max_output_files) were reached", path=doc["capped"]))
    for note in doc["notes"]:
        say(markup("[yellow]note:[/] {note}", note=note))
    return 0
