"""The `gpu` command: submit, watch and manage jobs; `--json` on every report.

Imports stay lazy (rich, textual, yaml load only when used) so that an agent's
`gpu submit --json` starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

from core.errors import UserError

EPILOG = "Every report takes --json (a documented, stable shape). Docs: README.md"


# -- helpers -------------------------------------------------------------------------------


def _emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


def _print(renderable: Any) -> None:
    from tui.render import console

    console().print(renderable)


def _store():
    from core.store import Store

    return Store()


def _interactive(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


def _request_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "script": args.script, "args": args.args or None, "env": args.env or None,
        "secrets": args.secret or None, "include": args.include or None,
        "data": args.data or None, "hours": args.hours, "gpu": args.gpu,
        "vram_gb": args.vram_gb, "provider": args.provider, "name": args.name,
        "request_id": args.request_id, "smoke": True if args.smoke else None,
        "wait_s": args.wait_s, "verbose": True if args.verbose else None,
    }


# -- commands ------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    from core.config import build_request
    from core.service import submit

    req = build_request(args.project_dir or os.getcwd(), _request_overrides(args))
    result = submit(req, actor="agent" if not _interactive(args) else "cli")
    if args.json:
        _emit_json(result.to_json(verbose=req.verbose))
        return 0
    from tui.render import bundle_panel, state_text

    job = result.job
    verb = "submitted" if result.submitted else "already active, not submitted again:"
    _print(f"[bold]{verb}[/] job [bold]{job.short_id}[/] ({job.name}) on "
           f"[bold]{job.provider}[/]: {state_text(job.state.value)}"
           + (f"  [dim]{job.reason}[/]" if job.reason else ""))
    _print(bundle_panel(result.bundle))
    for key in ("note", "tell_user"):
        if key in result.guidance:
            _print(result.guidance[key])
    _print(f"follow: [bold]{result.guidance['follow']}[/]   outputs: {job.outputs_dir}")
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.bundle import build, list_project

    listing = list_project(Path(args.project_dir or os.getcwd()), args.include or [])
    bundle = build(listing)
    summary = bundle.summary()
    files = sorted(listing.entries) if args.list else None
    if args.json:
        doc = {**summary, "hash": bundle.hash, "root": str(bundle.root)}
        if files is not None:
            doc["list"] = files
        _emit_json(doc)
        return 0
    from tui.render import bundle_panel

    _print(bundle_panel(summary, files))
    _print(f"[dim]root {bundle.root}  hash {bundle.hash[:16]}[/]")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from core.states import ACTIVE, State

    store = _store()
    states = None
    if args.state:
        try:
            states = [State(s) for s in args.state.split(",")]
        except ValueError:
            raise UserError(f"unknown state in {args.state!r}",
                            fix=f"states: {', '.join(s.value for s in State)}") from None
    elif args.active:
        states = list(ACTIVE)
    jobs = store.jobs(states=states, limit=args.limit)
    if args.json:
        _emit_json({"jobs": [j.to_json() for j in jobs]})
        return 0
    if not jobs:
        _print("no jobs yet: submit one with [bold]gpu submit SCRIPT --hours H[/]")
        return 0
    from tui.render import jobs_table

    _print(jobs_table(jobs))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from core.supervisor import running_pid

    store = _store()
    if not args.id:
        from core.states import ACTIVE

        jobs = store.jobs(states=ACTIVE)
        pid = running_pid()
        if args.json:
            _emit_json({"supervisor": {"running": pid is not None, "pid": pid},
                        "jobs": [j.to_json() for j in jobs]})
            return 0
        from tui.render import jobs_table

        _print(f"supervisor: {'running (pid %d)' % pid if pid else 'not running (starts on demand)'}")
        _print(jobs_table(jobs) if jobs else "no live jobs (see all with [bold]gpu jobs[/])")
        return 0
    job = store.resolve(args.id)
    events = store.events(job.id)
    metrics = store.metrics(job.id)
    if args.json:
        from core.service import guidance

        doc = job.to_json(verbose=args.verbose)
        doc["events"] = [e.to_json() for e in events] if args.verbose else [e.to_json() for e in events[-5:]]
        doc["guidance"] = guidance(job, True)
        _emit_json(doc)
        return 0
    from tui.render import status_panel

    _print(status_panel(job, events, metrics))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from core.sanitize import printable
    from core.service import log_path
    from core.states import TERMINAL

    store = _store()
    job = store.resolve(args.id)
    path = log_path(job)
    out = sys.stdout
    data = path.read_bytes() if path.exists() else b""
    if args.tail is not None:
        data = b"\n".join(data.split(b"\n")[-(args.tail + 1):])
    if args.json:
        _emit_json({"job": job.short_id, "state": job.state.value, "log": printable(data)})
        return 0
    out.write(printable(data))
    out.flush()
    if not args.follow:
        return 0
    offset = path.stat().st_size if path.exists() else 0
    pending = b""
    try:
        while True:
            chunk = b""
            if path.exists():
                size = path.stat().st_size
                if size < offset:  # truncated or replaced: start again
                    offset = 0
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        chunk = f.read(size - offset)
                    offset += len(chunk)
            if chunk:
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut:
                    out.write(printable(pending[:cut]))
                    out.flush()
                    pending = pending[cut:]
                continue
            job = store.get(job.id)
            if job.state in TERMINAL:
                if pending:
                    out.write(printable(pending) + "\n")
                out.write(f"-- job {job.short_id} {job.state.value}: {printable(job.reason)}\n")
                return 0 if job.state.value == "done" else 1
            time.sleep(0.2)
    except KeyboardInterrupt:
        return 130


def cmd_metrics(args: argparse.Namespace) -> int:
    store = _store()
    job = store.resolve(args.id)
    metrics = store.metrics(job.id, args.key)
    if args.json:
        _emit_json({
            "job": job.short_id,
            "metrics": {k: {"last": s[-1][1], "min": min(v for _, v, _ in s),
                            "max": max(v for _, v, _ in s), "points": len(s),
                            "series": [{"step": st, "value": v, "ts": ts} for st, v, ts in s]}
                        for k, s in metrics.items()}})
        return 0
    if not metrics:
        _print(f"job {job.short_id} has logged no metrics yet (the job calls gpu.log(step=..., loss=...))")
        return 0
    from tui.render import metrics_table

    _print(metrics_table(metrics))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from core.service import cancel

    job = cancel(_store(), args.id, actor="cli")
    if args.json:
        _emit_json({"job": job.to_json()})
        return 0
    from tui.render import state_text

    _print(f"job [bold]{job.short_id}[/]: {state_text(job.state.value)}  {job.reason}")
    return 0


def cmd_daemon(args: argparse.Namespace) -> int:
    from core import supervisor

    if args.status or args.stop:
        pid = supervisor.running_pid()
        if args.stop and pid:
            import signal

            os.kill(pid, signal.SIGTERM)
        doc = {"running": pid is not None, "pid": pid, "stopped": bool(args.stop and pid)}
        if args.json:
            _emit_json(doc)
        else:
            print(f"supervisor {'pid %d %s' % (pid, 'stopping' if args.stop else 'running') if pid else 'not running'}")
        return 0
    if args.detach:
        pid = supervisor.ensure_running(wait_s=10)
        if args.json:
            _emit_json({"running": True, "pid": pid})
        else:
            print(f"supervisor running (pid {pid})")
        return 0
    if supervisor.running_pid():
        print("a supervisor already runs for this user (gpu daemon --status)", file=sys.stderr)
        return 0
    return supervisor.main()


# -- the parser ----------------------------------------------------------------------------


def _add_request_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", nargs="?", help="script to run, relative to the project (e.g. train.py); "
                   "a non-.py value runs as a command line. Default: gpu.yaml's script")
    p.add_argument("args", nargs="*", help="arguments for the script (put them after --)")
    p.add_argument("--env", action="append", metavar="K=V", help="a non-secret environment variable (repeatable)")
    p.add_argument("--secret", action="append", metavar="NAME", help="a keychain secret the job reads (repeatable)")
    p.add_argument("--include", action="append", metavar="GLOB", help="ship git-ignored paths too (repeatable)")
    p.add_argument("--data", action="append", metavar="NAME=PATH", help="a data set, readable at gpu.data_dir()/NAME (repeatable)")
    p.add_argument("--hours", type=float, help="honest wall-clock estimate in hours (e.g. 0.25)")
    p.add_argument("--gpu", help="GPU type constraint, e.g. T4")
    p.add_argument("--vram-gb", type=float, help="GB of GPU memory the job needs")
    p.add_argument("--provider", help="pin one target (e.g. local)")
    p.add_argument("--name", help="short job name for humans")
    p.add_argument("--request-id", help="idempotency key: the same id returns the same job")
    p.add_argument("--smoke", action="store_true", help="a quick smoke test on this machine")
    p.add_argument("--wait-s", type=float, help="seconds to wait for the job to be placed (default 10)")
    p.add_argument("--verbose", action="store_true", help="full documents in --json output")
    p.add_argument("--project-dir", metavar="DIR", help="the project folder (default: the current one)")
    p.add_argument("--json", action="store_true", help="print {job, guidance, submitted, bundle} as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu", description="Run GPU jobs wherever free or cheap GPUs are, and keep them running.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"gpu-router {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, epilog=EPILOG, **kw)
        p.set_defaults(func=fn)
        return p

    p = add("submit", cmd_submit, "package the project and run a script on a target; returns at once",
            usage="gpu submit [SCRIPT] [options] [-- ARGS...]")
    _add_request_options(p)

    p = add("bundle", cmd_bundle, "show what would ship, without submitting")
    p.add_argument("--list", action="store_true", help="list every file that ships")
    p.add_argument("--include", action="append", metavar="GLOB", help="also ship these git-ignored paths")
    p.add_argument("--project-dir", metavar="DIR", help="the project folder (default: the current one)")
    p.add_argument("--json", action="store_true", help="print {files, bytes, left_out, hint, warnings, hash, root[, list]}")

    p = add("jobs", cmd_jobs, "list jobs, newest first")
    p.add_argument("--state", help="only these states, comma-separated")
    p.add_argument("--active", action="store_true", help="only jobs that have not ended")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="print {jobs: [...]}")

    p = add("status", cmd_status, "one job in detail, or the live jobs and the supervisor")
    p.add_argument("id", nargs="?", help="job id, short id, prefix, or 'last'")
    p.add_argument("--verbose", action="store_true", help="full documents and every event")
    p.add_argument("--json", action="store_true", help="print the job object with events and guidance")

    p = add("logs", cmd_logs, "print a job's log (output is shown as plain printable text)")
    p.add_argument("id", help="job id, short id, prefix, or 'last'")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    p.add_argument("--json", action="store_true", help="print {job, state, log}")

    p = add("metrics", cmd_metrics, "a job's metrics: last, min and max per key")
    p.add_argument("id", help="job id, short id, prefix, or 'last'")
    p.add_argument("--key", help="only this metric")
    p.add_argument("--json", action="store_true", help="print every series point too")

    p = add("cancel", cmd_cancel, "stop a job (its whole process group) and record it cancelled")
    p.add_argument("id", help="job id, short id, prefix, or 'last'")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("daemon", cmd_daemon, "run the supervisor (started on demand by submit; one per user)")
    p.add_argument("--detach", action="store_true", help="start it in the background and return")
    p.add_argument("--status", action="store_true", help="say whether it runs")
    p.add_argument("--stop", action="store_true", help="stop it (jobs keep running; a new one re-adopts them)")
    p.add_argument("--json", action="store_true", help="print {running, pid}")
    return parser


def _version() -> str:
    from core import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    extra: list[str] = []
    if "--" in argv:  # everything after -- belongs to the script, even with no SCRIPT given
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = parser.parse_args(argv)
    if extra:
        if not hasattr(args, "args"):
            parser.error("arguments after -- are only for submit and plan")
        args.args = [*(args.args or []), *extra]
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UserError as exc:
        if getattr(args, "json", False):
            _emit_json(exc.to_json())
        print(f"error: {exc.message()}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
