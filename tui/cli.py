"""The `gpu` command: submit, watch and manage jobs; `--json` on every report.

Imports stay lazy (rich, textual, yaml load only when used) so that an agent's
`gpu submit --json` starts fast. Nothing here writes to the terminal itself: every line goes
through tui.output (`say`, `markup`, `write`, `ask`, `emit_json`), where text gpu-router did
not write (names, args, paths, errors, logs) is filtered and never read as markup.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable

from core.errors import UserError
from tui.output import ask, emit_json, error, markup, say, write

EPILOG = "Every report takes --json (a documented, stable shape). Docs: README.md"


# -- helpers -------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse echoes what was typed (`unrecognized arguments: ...`): its messages are
    filtered like every other line (subcommand parsers are made of this class too)."""

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        if message:
            write(message, file or sys.stderr)


def _here() -> str | None:
    """The project the command runs in, for `last`: the git work tree holding the current
    folder, or the folder itself if it has a gpu.yaml; None outside any project."""
    from core.config.gitroot import find_root

    cwd = os.getcwd()
    root, in_git = find_root(Path(cwd))
    if in_git:
        return str(root)
    return cwd if os.path.exists(os.path.join(cwd, "gpu.yaml")) else None


def _store():
    """The store, for a command that reads jobs; live jobs that no supervisor drives (a submit
    killed after its commit, a supervisor killed) get one started on the way."""
    from core.engine.daemon import supervise_live
    from core.jobs.store import Store

    store = Store()
    supervise_live(store)
    return store


def _actor(args: argparse.Namespace):
    """Who runs this command (core.engine.actor: a tty is not enough, an agent marker or
    --json makes it an agent's)."""
    from core.engine.actor import current

    return current(json=bool(getattr(args, "json", False)))


def _interactive(args: argparse.Namespace) -> bool:
    """A person at a terminal, who may be asked; an agent never is."""
    return _actor(args).is_person


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
        write(f"{exc.where}: {exc.what}\n", sys.stderr)
        answer = ask(f"{exc.question} [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise UserError("nothing was shipped: you answered no", where=exc.where, fix=exc.fix) from None
        return run(True)


def _request_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "script": args.script, "args": args.args or None, "env": args.env or None,
        "secrets": args.secret or None, "include": args.include or None,
        "outputs": args.output or None,
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
    actor = _actor(args)
    interactive = actor.is_person
    result = _confirm_broad(args, lambda allow: submit(
        req, actor=actor.label("terminal" if interactive else "cli"), interactive=interactive,
        allow_large_project=allow))
    if args.json:
        emit_json(result.to_json(verbose=req.verbose))
        return 0
    if interactive and result.submitted and result.guidance.get("needs_approval"):
        return _ask_at_submit(result, actor)
    from tui.render import bundle_panel, state_text

    job = result.job
    verb = "submitted" if result.submitted else "already active, not submitted again:"
    say(markup("[bold]{verb}[/] job [bold]{short}[/] ({name}) on [bold]{target}[/]: {state}"
               + ("  [dim]{reason}[/]" if job.reason else ""),
               verb=verb, short=job.short_id, name=job.name, target=job.provider,
               state=state_text(job.state.value), reason=job.reason))
    say(bundle_panel(result.bundle))
    for key in ("note", "tell_user"):
        if key in result.guidance:
            say(result.guidance[key])
    say(markup("follow: [bold]{follow}[/]   outputs: {outputs}",
               follow=result.guidance["follow"], outputs=job.outputs_dir))
    return 0


def _ask_at_submit(result, actor) -> int:
    """A person at a terminal is shown the plan once; their yes (and their approval PIN, if
    one is set) approves that digest."""
    from core.engine.approvals import approve, deny, require_person
    from tui.render import bundle_panel, plan_panel

    require_person(actor, result.job.short_id, store=_store(), job=result.job)  # never reached by an agent

    job = result.job
    say(markup("[bold]job {short}[/] ({name}) needs your approval before it runs:",
               short=job.short_id, name=job.name))
    say(plan_panel(job.plan, result.bundle))
    from core.engine.accounts import elsewhere
    from tui.render import elsewhere_panel

    req = job.request
    other = elsewhere(req.get("gpu"), req.get("vram_gb"), req.get("hours"))
    if other is not None:  # what it would cost elsewhere, before the person says yes
        say(elsewhere_panel(other))
    say(bundle_panel(result.bundle))
    answer = ask(markup("Approve job {short}? \\[y = approve, n = deny, enter = decide later] ",
                        short=job.short_id)).strip().lower()
    store = _store()
    if answer in ("y", "yes"):
        checked = _pin_at_terminal(job, "terminal, at submit", actor)
        job = approve(store, job.id, digest=job.digest, actor=actor.label("terminal, at submit"),
                      pin_checked=checked)
        say(markup("approved: job [bold]{short}[/] will run.  follow: [bold]gpu logs -f {short}[/]",
                   short=job.short_id))
    elif answer in ("n", "no"):
        deny(store, job.id, actor=actor.label("terminal, at submit"))
        say(markup("denied: job {short} will not run", short=job.short_id))
    else:
        say(markup("job {short} waits: [bold]gpu approve {short}[/] or [bold]gpu deny {short}[/]",
                   short=job.short_id))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from core.config.request import build_request
    from core.engine.service import prepare

    req = build_request(args.project_dir or os.getcwd(), _request_overrides(args))
    bundle, plan = _confirm_broad(args, lambda allow: prepare(
        req, interactive=_interactive(args), allow_large_project=allow))
    from core.engine.accounts import elsewhere

    other = elsewhere(req.gpu, req.vram_gb, req.hours)  # None (and nothing read) without accounts
    if args.json:
        from core.engine.reports import plan_doc

        emit_json(plan_doc(bundle.summary(), plan, other))
        return 0
    from tui.render import bundle_panel, elsewhere_panel, plan_panel

    say(plan_panel(plan))
    if other is not None:
        say(elsewhere_panel(other))
    say(bundle_panel(bundle.summary()))
    return 0


def _pin_at_terminal(job, where: str, actor=None) -> bool:
    """With an approval PIN set, ask for it (hidden) and check it; True when one was. Only a
    person at a terminal gets here (require_person), so the PIN is never read from a pipe."""
    from core.engine.approvals import pin_is_set, require_pin
    from tui.output import ask_hidden

    if not pin_is_set():
        return False
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("the approval PIN is only read at a terminal", fix="run it in a terminal")
    entered = ask_hidden(f"approval PIN for job {job.short_id} (hidden): ")
    return require_pin(entered, where=f"gpu approve {job.short_id} ({where})", store=_store(), job=job,
                       actor=actor.label(where) if actor is not None else "")


def _approve_on_terminal(job, actor) -> bool:
    """A person's deliberate yes: their approval PIN if one is set, else the typed job id.
    An agent is refused before anything is asked. True when a PIN was checked."""
    from core.engine.approvals import pin_is_set, require_person

    require_person(actor, job.short_id)
    if pin_is_set():
        return _pin_at_terminal(job, "terminal", actor)
    _confirm_on_terminal(job, "approve")
    return False


def _confirm_on_terminal(job, verb: str) -> None:
    """A typed confirmation at a terminal; without one, refused."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError(f"{verb} needs a person at a terminal",
                        fix=f"a person runs `gpu {verb} {job.short_id}` in a terminal, or presses "
                            f"`{'a' if verb == 'approve' else 'd'}` on the job in `gpu dash`")
    typed = ask(markup("Type the job id ({short}) to {verb} it: ", short=job.short_id, verb=verb)).strip()
    if typed != job.short_id:
        raise UserError(f"you typed {typed!r}, not {job.short_id}: nothing was changed")


def cmd_approve(args: argparse.Namespace) -> int:
    from core.engine.approvals import approve, require_person
    from core.jobs.states import State

    actor = _actor(args)
    store = _store()
    job = store.resolve(args.id, _here())
    # a job's process, then an agent, is refused before it is shown or asked anything
    require_person(actor, job.short_id, store=store, job=job)
    if job.state != State.AWAITING_APPROVAL:
        raise UserError(f"job {job.short_id} is {job.state.value}, not awaiting approval",
                        fix="see `gpu jobs --state awaiting_approval`")
    from tui.render import plan_panel

    say(markup("[bold]job {short}[/] ({name}) waits for approval:", short=job.short_id, name=job.name))
    say(plan_panel(job.plan, job.bundle))
    checked = _approve_on_terminal(job, actor)
    job = approve(store, job.id, digest=job.digest, actor=actor.label("terminal"), pin_checked=checked)
    say(markup("approved plan {digest}: job [bold]{short}[/] will run",
               digest=job.approved_digest[:12], short=job.short_id))
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    from core.engine.approvals import deny, require_not_job

    store = _store()
    job = store.resolve(args.id, _here())
    require_not_job("denial", store=store, job=job, undone="nothing was denied")  # before any prompt
    _confirm_on_terminal(job, "deny")
    # a no spends nothing: an agent at a pty may give it, and is recorded as the agent it is
    job = deny(store, job.id, actor=_actor(args).label("terminal"), reason=args.reason)
    if args.json:
        emit_json({"job": job.to_json()})
    else:
        say(markup("job [bold]{short}[/]: {state}", short=job.short_id, state=job.state.value))
    return 0


def cmd_targets(args: argparse.Namespace) -> int:
    if args.json:
        from core.engine.reports import targets_doc

        emit_json(targets_doc(_store()))
        return 0
    from core.engine import targets
    from tui.render import targets_table

    infos = targets.infos(_store())
    say(targets_table(list(infos.values())))
    return 0


def cmd_secrets(args: argparse.Namespace) -> int:
    from core.secrets import store as secretstore

    if args.action == "list":
        names = secretstore.names()
        if args.json:
            emit_json({"secrets": names})
        else:
            say("\n".join(names) if names else "no secrets yet: gpu secrets set NAME")
        return 0
    if not args.name:
        raise UserError(f"gpu secrets {args.action} needs a NAME", fix=f"gpu secrets {args.action} HF_TOKEN")
    if args.action == "set":
        if sys.stdin.isatty():
            from tui.output import ask_hidden

            value = ask_hidden(f"value of {args.name} (hidden): ")
        else:
            value = sys.stdin.read().rstrip("\r\n")
        secretstore.put(args.name, value)
        msg = f"stored {args.name} in the keychain"
    else:
        secretstore.remove(args.name)
        msg = f"removed {args.name} from the keychain"
    if args.json:
        emit_json({"name": args.name, "action": args.action, "ok": True})
    else:
        say(msg)
    return 0


def cmd_dash(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("gpu dash needs a terminal", fix="run it in a terminal (also over ssh -t)")
    from tui.dash.app import run

    return run(read_only=args.read_only)


def cmd_bundle(args: argparse.Namespace) -> int:
    from core.config.request import read_project_file, resolve_project
    from core.packaging.bundle import build, list_project

    from core import paths
    from core.errors import disk_full_guard

    project = resolve_project(args.project_dir or os.getcwd())
    values = read_project_file(project)[0]  # checked as a submit checks it
    include = [*values.get("include", []), *(args.include or [])]
    ship = values.get("ship", "repo")
    with disk_full_guard(paths.home()):  # the hash cache lives there: a full disk is said
        listing = _confirm_broad(args, lambda allow: list_project(project, include, ship=ship,
                                                                  allow_large=allow))
        bundle = build(listing, dry_run=True)  # a look: nothing is packed or stored
    from core.config.request import is_python_file
    from core.packaging.report import left_out_hint

    script = values.get("script") or ""
    bundle.hint = left_out_hint(project, bundle.project_rel, script, is_python_file(script, project),
                                bundle.left_out, set(listing.entries), values.get("outputs") or [])
    summary = bundle.summary()
    files = sorted(listing.entries) if args.list else None
    if args.json:
        doc = {**summary, "hash": bundle.hash, "root": str(bundle.root)}
        if files is not None:
            doc["list"] = files
        emit_json(doc)
        return 0
    from tui.render import bundle_panel

    say(bundle_panel(summary, files))
    say(markup("[dim]root {root}  hash {hash}[/]", root=bundle.root, hash=bundle.hash[:16]))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from core.engine.reports import jobs_doc, parse_states
    from core.jobs.states import ACTIVE

    store = _store()
    states = parse_states(args.state) if args.state else list(ACTIVE) if args.active else None
    if args.json:
        emit_json(jobs_doc(store, states=states, limit=args.limit))
        return 0
    jobs = store.jobs(states=states, limit=args.limit)
    if not jobs:
        say(markup("no jobs yet: submit one with [bold]gpu submit SCRIPT --hours H[/]"))
        return 0
    from tui.render import jobs_table

    say(jobs_table(jobs))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from core.engine.daemon import running_pid

    store = _store()
    if not args.id:
        from core.jobs.states import ACTIVE

        pid = running_pid()
        if args.json:
            from core.engine.reports import live_doc

            emit_json(live_doc(store, pid))
            return 0
        jobs = store.jobs(states=ACTIVE)
        from tui.render import jobs_table

        say(f"supervisor: {'running (pid %d)' % pid if pid else 'not running (starts on demand)'}")
        say(jobs_table(jobs) if jobs else markup("no live jobs (see all with [bold]gpu jobs[/])"))
        return 0
    job = store.resolve(args.id, _here())
    if args.json:
        from core.engine.reports import status_doc

        emit_json(status_doc(store, job, verbose=args.verbose))
        return 0
    from core.packaging.checkpoints import summary
    from core.engine.service import mirroring_paused
    from core.planning.usage import estimate_and_actual
    from tui.render import status_panel

    events = store.events(job.id)
    say(status_panel(job, events, store.metrics_summary(job.id), verbose=args.verbose,
                     usage=estimate_and_actual(store, job), checkpoint=summary(job.id),
                     mirroring=mirroring_paused(store, job)))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from core.engine.service import log_path
    from tui.output import safe

    store = _store()
    job = store.resolve(args.id, _here())
    path = log_path(job)
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
    if tail is not None:
        _write_lines(follower.start(tail))
    said = None
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
                    write(follower.pending + b"\n")
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


def cmd_metrics(args: argparse.Namespace) -> int:
    from core.engine.reports import metrics_doc

    store = _store()
    job = store.resolve(args.id, _here())
    doc = metrics_doc(store, job, args.key)  # an unknown --key is an error here
    if args.json:
        emit_json(doc)
        return 0
    summary = store.metrics_summary(job.id)
    if not doc["metrics"]:
        say(f"job {job.short_id} has logged no metrics yet (the job calls gpu.log(step=..., loss=...))")
        return 0
    from tui.render import metrics_table

    say(metrics_table({k: v for k, v in summary.items() if not args.key or k == args.key}))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from core.engine.service import cancel

    store = _store()
    job = cancel(store, store.resolve(args.id, _here()).id, actor="cli")
    if args.json:
        from core.engine.reports import job_only

        emit_json(job_only(job))
        return 0
    from tui.render import state_text

    say(markup("job [bold]{short}[/]: {state}  {reason}", short=job.short_id,
               state=state_text(job.state.value), reason=job.reason))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from core.engine.fetch import fetch
    from tui.render import human_bytes

    store = _store()
    doc = fetch(store, store.resolve(args.id, _here()).id, args.paths)
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


MCP_CONFIG = '{"mcpServers": {"gpu-router": {"command": "gpu", "args": ["mcp"]}}}'


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the MCP tools on stdin/stdout (the SDK loads only here, so no other command pays
    for its import). Started at a terminal by hand, it says what it is for on stderr first."""
    if sys.stdin.isatty():
        write(f"gpu mcp speaks the Model Context Protocol on stdin/stdout; an MCP client starts "
              f"it. Client configuration: {MCP_CONFIG}\n", sys.stderr)
    from tui.mcp_server import serve

    return serve()


def cmd_daemon(args: argparse.Namespace) -> int:
    from core.engine import daemon, supervisor

    if args.status or args.stop:
        pid = daemon.running_pid()
        if args.stop and pid:
            import signal

            os.kill(pid, signal.SIGTERM)
        from core import paths
        from core.engine import looplag, strays

        doc = {"running": pid is not None, "pid": pid, "stopped": bool(args.stop and pid)}
        lag = looplag.read(paths.home() / "supervisor-lag.json")
        if lag and lag.get("pid") == pid:
            doc["loop_lag"] = lag  # how late its event loop ran (p50/p99/max, stalls over 100 ms)
        doc["strays"] = strays.pending(_store())  # copies left on lost targets, to be stopped
        if args.json:
            emit_json(doc)
        else:
            say(f"supervisor {'pid %d %s' % (pid, 'stopping' if args.stop else 'running') if pid else 'not running'}")
            if "loop_lag" in doc:
                say(f"event loop lag: p50 {lag['p50_ms']:.1f} ms, p99 {lag['p99_ms']:.1f} ms, max "
                    f"{lag['max_ms']:.1f} ms over {lag['samples']} samples; "
                    f"{lag['stalls_over_100ms']} stalls over 100 ms")
                last = lag.get("last_minute")
                if last:
                    say(f"  in the last minute: p50 {last['p50_ms']:.1f} ms, p99 {last['p99_ms']:.1f} ms, "
                        f"max {last['max_ms']:.1f} ms")
            for s in doc["strays"]:
                say(f"attempt {s['attempt']} of job {s['job'][:8]} left on {s['target']} when it moved: "
                    + ("stop sent, confirming" if s["stop_sent"] else
                       f"{s['target']} not answering; next look in {s['next_look_in_s']:.0f} s"))
        return 0
    if args.detach:
        pid = daemon.ensure_running(wait_s=10)
        if args.json:
            emit_json({"running": True, "pid": pid})
        else:
            say(f"supervisor running (pid {pid})")
        return 0
    if daemon.running_pid():
        write("a supervisor already runs for this user (gpu daemon --status)\n", sys.stderr)
        return 0
    return supervisor.main()


# -- the parser ----------------------------------------------------------------------------


def _count(text: str) -> int:
    """An argparse type: a whole number of 0 or more (argparse turns the error into exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


def _add_request_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", nargs="?", help="script to run, relative to the project (e.g. train.py); "
                   "a non-.py value runs as a command line. Default: gpu.yaml's script")
    p.add_argument("args", nargs="*", help="arguments for the script (put them after --)")
    p.add_argument("--env", action="append", metavar="K=V", help="a non-secret environment variable (repeatable)")
    p.add_argument("--secret", action="append", metavar="NAME", help="a keychain secret the job reads (repeatable)")
    p.add_argument("--include", action="append", metavar="GLOB", help="ship git-ignored paths too (repeatable)")
    p.add_argument("--output", action="append", metavar="GLOB",
                   help="bring these paths home to runs/<id>/ too, relative to the job's folder, "
                        "e.g. outputs/ (repeatable; added to gpu.yaml's outputs)")
    p.add_argument("--data", action="append", metavar="NAME=PATH",
                   help="a data set, readable at gpu.data_dir()/NAME (repeatable): NAME=PATH, or "
                        "[NAME=]hf://datasets/OWNER/NAME[@REVISION][/PATH], pinned to its commit "
                        "and downloaded here at submit")
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
    parser = _Parser(
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

    p = add("approve", cmd_approve, "approve a held job's plan (a person, at a terminal; asks for the "
                                     "approval PIN if one is set)")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("--json", action="store_true",
                   help="always refused with {error, where, fix}: machine output is an agent's, "
                        "and an agent never approves")

    from tui.cli_approvals import add_approvals_command

    add_approvals_command(add)

    p = add("deny", cmd_deny, "refuse a held job (a person, at a terminal)")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("--reason", help="why, for the record")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("targets", cmd_targets, "the targets: GPUs, availability, quota left, price")
    p.add_argument("--json", action="store_true", help="print {targets: [...]}")
    from tui.cli_targets import (
        add_target_commands,  # list, add ssh|slurm|pbs, rm, trust
    )

    add_target_commands(p, cmd_targets)

    from tui.cli_accounts import add_accounts_command

    add_accounts_command(add)  # gpu accounts [list | add PROVIDER | rm PROVIDER]

    p = add("secrets", cmd_secrets, "keychain secrets for jobs: set NAME (hidden or stdin), list, rm NAME")
    p.add_argument("action", choices=["set", "list", "rm"], help="what to do")
    p.add_argument("name", nargs="?", help="the secret's name, e.g. HF_TOKEN")
    p.add_argument("--json", action="store_true", help="print a JSON result")

    p = add("dash", cmd_dash, "the full-screen dashboard: jobs, targets, logs, charts, approvals")
    p.add_argument("--read-only", action="store_true", help="hide every action that changes something")

    p = add("bundle", cmd_bundle, "show what would ship (gpu.yaml's include counts), without submitting or writing anything")
    p.add_argument("--list", action="store_true", help="list every file that ships")
    p.add_argument("--include", action="append", metavar="GLOB", help="also ship these git-ignored paths")
    p.add_argument("--project-dir", metavar="DIR", help="the project folder (default: the current one)")
    _add_allow_large(p)
    p.add_argument("--json", action="store_true", help="print {files, bytes, left_out, hint, warnings, hash, root[, list]}")

    p = add("jobs", cmd_jobs, "list jobs, newest first")
    p.add_argument("--state", help="only these states, comma-separated")
    p.add_argument("--active", action="store_true", help="only jobs that have not ended")
    p.add_argument("--limit", type=_count, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="print {jobs: [...]}")

    p = add("status", cmd_status, "one job in detail, or the live jobs and the supervisor")
    p.add_argument("id", nargs="?", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("--verbose", action="store_true", help="full documents and every event")
    p.add_argument("--json", action="store_true", help="print the job object with events and guidance")

    p = add("logs", cmd_logs, "print a job's log (output is shown as plain printable text)")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    p.add_argument("--json", action="store_true", help="print {job, state, log}")

    p = add("metrics", cmd_metrics, "a job's metrics: last, min and max per key")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("--key", help="only this metric")
    p.add_argument("--json", action="store_true", help="print every series point too")

    p = add("cancel", cmd_cancel, "stop a job (every process it started, however detached) and record it cancelled")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("fetch", cmd_fetch, "bring files a job wrote in its working folder (and did not declare "
                                "as outputs) home into runs/<id>/, from any target")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job)")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="files or folders relative to the job's working folder, e.g. outputs/ model.pkl")
    p.add_argument("--json", action="store_true", help="print {job, target, dest, files, bytes, missing, refused, capped, notes}")

    from tui.cli_storage import add_gc_command

    add_gc_command(add, EPILOG)

    p = add("mcp", cmd_mcp, "serve gpu-router to AI agents over MCP on stdin/stdout (gpu_submit, gpu_wait, "
            "gpu_status, ..., compute_job); no tool approves")
    p.epilog = (f"MCP client configuration: {MCP_CONFIG}. Every call is an agent's: the approval "
                f"rules apply in full. {EPILOG}")

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
    """Run one command; the one place its errors become messages and exit statuses.

    A `UserError` says what, where and what to do, and exits 2. Anything else is a bug in
    gpu-router: one line names it and the log file that holds its traceback, and the status is
    1; GPU_ROUTER_DEBUG=1 lets the traceback through instead.
    """
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
    try:
        return _run(parser, args, bare=not argv)
    except UserError as exc:
        if getattr(args, "json", False):
            emit_json(exc.to_json())
        error(exc.message())
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`gpu jobs | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush too
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("GPU_ROUTER_DEBUG") == "1":
            raise
        return _internal_error(exc, args)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, *, bare: bool) -> int:
    if not getattr(args, "func", None):
        if bare and sys.stdin.isatty() and sys.stdout.isatty():
            from tui.dash.app import (
                run,  # plain `gpu` on a terminal opens the dashboard
            )

            return run()
        parser.print_help()
        return 0
    return args.func(args)


def _internal_error(exc: BaseException, args: argparse.Namespace) -> int:
    """One line for a bug, its traceback in the log; status 1."""
    from core.errors import clip
    from tui.errlog import log_traceback

    where = log_traceback(exc, getattr(args, "command", None))
    detail = " ".join(str(exc).split())  # one line, whatever the exception says
    what = f"internal error: {type(exc).__name__}" + (f": {clip(detail, 200)}" if detail else "")
    fix = f"see {where}; GPU_ROUTER_DEBUG=1 shows the traceback here"
    if getattr(args, "json", False):
        emit_json({"error": what, "where": None, "fix": fix})
    error(f"{what}, {fix}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
