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
    from core.engine.store import Store

    return Store()


def _interactive(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


def _confirm_broad(args: argparse.Namespace, run: Callable[[bool], Any]) -> Any:
    """Run `run(allow_large)`; a project that is the home folder or a big folder outside git
    is shown to a person at a terminal, who says y to ship it; an agent gets the error."""
    from core.packaging.bundle import ProjectTooBroad

    allow = bool(getattr(args, "allow_large_project", False))
    try:
        return run(allow)
    except ProjectTooBroad as exc:
        if allow or not _interactive(args):
            raise
        print(f"{exc.where}: {exc.what}", file=sys.stderr)
        answer = input(f"{exc.question} [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise UserError("nothing was shipped: you answered no", where=exc.where, fix=exc.fix) from None
        return run(True)


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
    from core.config.request import build_request
    from core.engine.service import submit

    req = build_request(args.project_dir or os.getcwd(), _request_overrides(args))
    interactive = _interactive(args)
    result = _confirm_broad(args, lambda allow: submit(
        req, actor=_actor(interactive), interactive=interactive, allow_large_project=allow))
    if args.json:
        _emit_json(result.to_json(verbose=req.verbose))
        return 0
    if interactive and result.submitted and result.guidance.get("needs_approval"):
        return _ask_at_submit(result)
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


def _actor(interactive: bool) -> str:
    from core.engine.approvals import who

    return who("terminal") if interactive else "agent (no terminal)"


def _ask_at_submit(result) -> int:
    """A person at a terminal is shown the plan once; their yes approves that digest."""
    from core.engine.approvals import approve, deny, who
    from tui.render import bundle_panel, plan_panel

    job = result.job
    _print(f"[bold]job {job.short_id}[/] ({job.name}) needs your approval before it runs:")
    _print(plan_panel(job.plan, result.bundle))
    _print(bundle_panel(result.bundle))
    answer = input(f"Approve job {job.short_id}? [y = approve, n = deny, enter = decide later] ").strip().lower()
    store = _store()
    if answer in ("y", "yes"):
        job = approve(store, job.id, digest=job.digest, actor=who("terminal, at submit"))
        _print(f"approved: job [bold]{job.short_id}[/] will run.  follow: [bold]gpu logs -f {job.short_id}[/]")
    elif answer in ("n", "no"):
        deny(store, job.id, actor=who("terminal, at submit"))
        _print(f"denied: job {job.short_id} will not run")
    else:
        _print(f"job {job.short_id} waits: [bold]gpu approve {job.short_id}[/] or [bold]gpu deny {job.short_id}[/]")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from core.config.request import build_request
    from core.engine.service import prepare

    req = build_request(args.project_dir or os.getcwd(), _request_overrides(args))
    bundle, plan = _confirm_broad(args, lambda allow: prepare(
        req, interactive=_interactive(args), allow_large_project=allow))
    if args.json:
        _emit_json({"plan": plan, "bundle": bundle.summary(), "needs_approval": bool(plan["holds"])})
        return 0
    from tui.render import bundle_panel, plan_panel

    _print(plan_panel(plan))
    _print(bundle_panel(bundle.summary()))
    return 0


def _confirm_on_terminal(job, verb: str) -> None:
    """A typed confirmation from a person; an agent without a terminal is refused."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError(f"{verb} needs a person at a terminal",
                        fix=f"a person runs `gpu {verb} {job.short_id}` in a terminal, or presses "
                            f"`a` on the job in `gpu dash`")
    typed = input(f"Type the job id ({job.short_id}) to {verb} it: ").strip()
    if typed != job.short_id:
        raise UserError(f"you typed {typed!r}, not {job.short_id}: nothing was changed")


def cmd_approve(args: argparse.Namespace) -> int:
    from core.engine.approvals import approve, who
    from core.engine.states import State

    store = _store()
    job = store.resolve(args.id)
    if job.state != State.AWAITING_APPROVAL:
        raise UserError(f"job {job.short_id} is {job.state.value}, not awaiting approval",
                        fix="see `gpu jobs --state awaiting_approval`")
    if not args.json:
        from tui.render import plan_panel

        _print(f"[bold]job {job.short_id}[/] ({job.name}) waits for approval:")
        _print(plan_panel(job.plan, job.bundle))
    _confirm_on_terminal(job, "approve")
    job = approve(store, job.id, digest=job.digest, actor=who("terminal"))
    if args.json:
        _emit_json({"job": job.to_json()})
    else:
        _print(f"approved plan {job.approved_digest[:12]}: job [bold]{job.short_id}[/] will run")
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    from core.engine.approvals import deny, who

    store = _store()
    job = store.resolve(args.id)
    _confirm_on_terminal(job, "deny")
    job = deny(store, job.id, actor=who("terminal"), reason=args.reason)
    if args.json:
        _emit_json({"job": job.to_json()})
    else:
        _print(f"job [bold]{job.short_id}[/]: {job.state.value}")
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    from core.engine import targets

    infos = targets.infos(_store())
    if args.json:
        _emit_json({"targets": [i.to_json() for i in infos.values()]})
        return 0
    from tui.render import targets_table

    _print(targets_table(list(infos.values())))
    return 0


def cmd_secrets(args: argparse.Namespace) -> int:
    from core.secrets import store as secretstore

    if args.action == "list":
        names = secretstore.names()
        if args.json:
            _emit_json({"secrets": names})
        else:
            _print("\n".join(names) if names else "no secrets yet: gpu secrets set NAME")
        return 0
    if not args.name:
        raise UserError(f"gpu secrets {args.action} needs a NAME", fix=f"gpu secrets {args.action} HF_TOKEN")
    if args.action == "set":
        if sys.stdin.isatty():
            import getpass

            value = getpass.getpass(f"value of {args.name} (hidden): ")
        else:
            value = sys.stdin.read().rstrip("\r\n")
        secretstore.put(args.name, value)
        msg = f"stored {args.name} in the keychain"
    else:
        secretstore.remove(args.name)
        msg = f"removed {args.name} from the keychain"
    if args.json:
        _emit_json({"name": args.name, "action": args.action, "ok": True})
    else:
        _print(msg)
    return 0


def cmd_dash(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("gpu dash needs a terminal", fix="run it in a terminal (also over ssh -t)")
    from tui.dash.app import run

    return run(read_only=args.read_only)


def cmd_bundle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.packaging.bundle import build, list_project

    listing = _confirm_broad(args, lambda allow: list_project(
        Path(args.project_dir or os.getcwd()), args.include or [], allow_large=allow))
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
    from core.engine.states import ACTIVE, State

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
    from core.engine.daemon import running_pid

    store = _store()
    if not args.id:
        from core.engine.states import ACTIVE

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
    if args.json:
        from core.engine.service import guidance

        doc = job.to_json(verbose=args.verbose)
        doc["events"] = [e.to_json() for e in events] if args.verbose else [e.to_json() for e in events[-5:]]
        doc["guidance"] = guidance(job, True)
        _emit_json(doc)
        return 0
    from tui.render import status_panel

    _print(status_panel(job, events, store.metrics_summary(job.id)))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from core.display.sanitize import printable
    from core.engine.service import log_path
    from core.engine.states import TERMINAL

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

    _print(metrics_table(store.metrics_summary(job.id)))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from core.engine.service import cancel

    job = cancel(_store(), args.id, actor="cli")
    if args.json:
        _emit_json({"job": job.to_json()})
        return 0
    from tui.render import state_text

    _print(f"job [bold]{job.short_id}[/]: {state_text(job.state.value)}  {job.reason}")
    return 0


def cmd_daemon(args: argparse.Namespace) -> int:
    from core.engine import daemon, supervisor

    if args.status or args.stop:
        pid = daemon.running_pid()
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
        pid = daemon.ensure_running(wait_s=10)
        if args.json:
            _emit_json({"running": True, "pid": pid})
        else:
            print(f"supervisor running (pid {pid})")
        return 0
    if daemon.running_pid():
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
    _add_allow_large(p)
    p.add_argument("--json", action="store_true", help="print {job, guidance, submitted, bundle} as JSON")


def _add_allow_large(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-large-project", action="store_true",
                   help="ship a project that is your home folder, or a folder outside git with more "
                        "than 5,000 files or 1 GB (otherwise a person is asked and an agent refused); "
                        "credential files are withheld either way")


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

    p = add("plan", cmd_plan, "show where and how a submit would run, what it costs and what holds it",
            usage="gpu plan [SCRIPT] [options] [-- ARGS...]")
    _add_request_options(p)

    p = add("approve", cmd_approve, "approve a held job's plan (a person, at a terminal)")
    p.add_argument("id", help="job id, short id, prefix, or 'last'")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("deny", cmd_deny, "refuse a held job (a person, at a terminal)")
    p.add_argument("id", help="job id, short id, prefix, or 'last'")
    p.add_argument("--reason", help="why, for the record")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("targets", cmd_targets, "the targets: GPUs, availability, quota left, price")
    p.add_argument("--json", action="store_true", help="print {targets: [...]}")
    from tui.cli_targets import (
        add_target_commands,  # list, add ssh|slurm|pbs, rm, trust
    )

    add_target_commands(p, cmd_targets)

    p = add("secrets", cmd_secrets, "keychain secrets for jobs: set NAME (hidden or stdin), list, rm NAME")
    p.add_argument("action", choices=["set", "list", "rm"], help="what to do")
    p.add_argument("name", nargs="?", help="the secret's name, e.g. HF_TOKEN")
    p.add_argument("--json", action="store_true", help="print a JSON result")

    p = add("dash", cmd_dash, "the full-screen dashboard: jobs, targets, logs, charts, approvals")
    p.add_argument("--read-only", action="store_true", help="hide every action that changes something")

    p = add("bundle", cmd_bundle, "show what would ship, without submitting")
    p.add_argument("--list", action="store_true", help="list every file that ships")
    p.add_argument("--include", action="append", metavar="GLOB", help="also ship these git-ignored paths")
    p.add_argument("--project-dir", metavar="DIR", help="the project folder (default: the current one)")
    _add_allow_large(p)
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
        if not argv and sys.stdin.isatty() and sys.stdout.isatty():
            from tui.dash.app import (
                run,  # plain `gpu` on a terminal opens the dashboard
            )

            return run()
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
