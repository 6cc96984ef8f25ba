"""The `gpu` command: its argument parser, `main` (where errors become messages and exit
statuses), and the commands for targets, secrets, the dashboard, the bundle, MCP and the daemon;
submitting and approving are in tui/cli/submit.py, watching jobs in tui/cli/jobs.py, the other
groups in the other tui/cli/*.py; `--json` on every report.

Imports stay lazy (rich, textual, yaml load only when used) so that an agent's
`gpu submit --json` starts fast. Nothing here writes to the terminal itself: every line goes
through tui.show.output (`say`, `markup`, `write`, `ask`, `emit_json`), where text gpu-router did
not write (names, args, paths, errors, logs) is filtered and never read as markup.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import IO, Any, Callable

from core.errors import UserError
import tui.cli.jobs as cli_jobs
import tui.cli.submit as cli_submit
from tui.cli.common import confirm_broad, open_store
from tui.show.output import emit_json, error, markup, say, write

EPILOG = "Every report takes --json (a documented, stable shape). Docs: README.md"


# -- helpers -------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse echoes what was typed (`unrecognized arguments: ...`): its messages are
    filtered like every other line (subcommand parsers are made of this class too)."""

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        if message:
            write(message, file or sys.stderr)

    def error(self, message: str):  # type: ignore[override]
        """argparse's error, with the nearest command named for a mistyped one (`gpu subit`:
        did you mean `gpu submit`?), for every parser and subparser alike."""
        super().error(message + did_you_mean(message, self.prog))


_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<typed>[^'\s]*)'? \(choose from (?P<choices>.*)\)")


def did_you_mean(message: str, prog: str) -> str:
    """` (did you mean `gpu submit`?)` for an argparse "invalid choice" close to a choice."""
    import difflib

    m = _INVALID_CHOICE.search(message)
    if not m:
        return ""
    choices = [c.strip().strip("'") for c in m.group("choices").split(",")]
    close = difflib.get_close_matches(m.group("typed"), choices, n=1, cutoff=0.6)
    return f"; did you mean `{prog} {close[0]}`?" if close else ""


def cmd_targets(args: argparse.Namespace) -> int:
    if args.json:
        from core.engine.reports import targets_doc

        emit_json(targets_doc(open_store()))
        return 0
    from core.engine import targets
    from tui.show.render import targets_table

    infos = targets.infos(open_store())
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
            from tui.show.output import ask_hidden

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
    from core.packaging.bundle import build
    from core.packaging.listing import list_project

    from core import paths
    from core.errors import disk_full_guard

    from tui.cli.common import project_and_script

    project = resolve_project(project_and_script(args)[0])
    values = read_project_file(project)[0]  # checked as a submit checks it
    include = [*values.get("include", []), *(args.include or [])]
    ship = values.get("ship", "repo")
    with disk_full_guard(paths.home()):  # the hash cache lives there: a full disk is said
        listing = confirm_broad(args, lambda allow: list_project(project, include, ship=ship,
                                                                  allow_large=allow))
        from tui.show.output import Packing

        with Packing(bar=not args.json) as packing:  # a big project's hashing takes a while
            packing.stage(0, len(listing.entries), "hashing the files that would ship")
            bundle = build(listing, dry_run=True,  # a look: nothing is packed or stored
                           progress=lambda done, total: packing.stage(done, total, f"hashing: {done}/{total} files read"))
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
    from tui.show.render import bundle_panel

    say(bundle_panel(summary, files))
    say(markup("[dim]root {root}  hash {hash}[/]", root=bundle.root, hash=bundle.hash[:16]))
    return 0


# what an MCP client passes the server: a client starts it with a bare environment, so a
# custom home or config set in the shell must travel in `env`, or the agent's jobs land in
# another store than the one `gpu jobs` and the dashboard read
MCP_ENV_VARS = ("GPU_ROUTER_HOME", "GPU_ROUTER_CONFIG")


def mcp_config() -> str:
    """The client configuration for this shell: `env` holds the variables set here."""
    from tui.show.output import json_text

    server: dict = {"command": "gpu", "args": ["mcp"]}
    env = {k: os.environ[k] for k in MCP_ENV_VARS if os.environ.get(k)}
    if env:
        server["env"] = env
    return json_text({"mcpServers": {"gpu-router": server}}, indent=None)


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the MCP tools on stdin/stdout (the SDK loads only here, so no other command pays
    for its import). Started at a terminal by hand, it says what it is for on stderr first."""
    if sys.stdin.isatty():
        write(f"gpu mcp speaks the Model Context Protocol on stdin/stdout; an MCP client starts "
              f"it. Client configuration: {mcp_config()}\n", sys.stderr)
    from tui.mcp.server import serve

    return serve()


def cmd_daemon(args: argparse.Namespace) -> int:
    from core.engine import daemon, supervisor

    if args.status or args.stop:
        pid = daemon.running_pid()
        if args.stop and pid:
            import signal

            os.kill(pid, signal.SIGTERM)
        from tui.warm import wire

        warm = wire.running_pid()
        if args.stop and warm:
            wire.stop(warm)
        from core import paths
        from core.engine import looplag, strays

        doc = {"running": pid is not None, "pid": pid, "stopped": bool(args.stop and pid)}
        lag = looplag.read(paths.home() / "supervisor-lag.json")
        if lag and lag.get("pid") == pid:
            doc["loop_lag"] = lag  # how late its event loop ran (p50/p99/max, stalls over 100 ms)
        from core.jobs.store import Store

        # copies left on lost targets, to be stopped; read without starting a supervisor: a
        # look at whether one runs (or a --stop) must not start one
        doc["strays"] = strays.pending(Store())
        from tui.cli.notify import status_doc, status_lines

        doc["notify"] = status_doc()  # apprise URLs whose last message did not arrive
        doc["warm"] = {"running": warm is not None and not args.stop, "pid": warm}  # tui/warm/server.py
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
            if warm:
                say(f"warm server pid {warm} {'stopping' if args.stop else 'running'} (an agent's "
                    "`gpu submit --json` starts there; GPU_ROUTER_WARM=0 turns it off)")
            for line in status_lines(doc["notify"]):
                say(line)
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


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds from 0 to a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{value:g} is not between 0 and 86400 seconds")
    return value


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
    p.add_argument("--not-secret", action="append", metavar="NAME",
                   help="an --env entry you vouch is not a secret, passed where the secret check would "
                        "refuse it (repeatable; shown in the plan; an agent's job is held for you)")
    p.add_argument("--include", action="append", metavar="GLOB", help="ship git-ignored paths too (repeatable)")
    p.add_argument("--output", action="append", metavar="GLOB",
                   help="bring these paths home to runs/<id>/ too, relative to the job's folder, "
                        "e.g. outputs/ (repeatable; added to gpu.yaml's outputs)")
    p.add_argument("--data", action="append", metavar="NAME=PATH",
                   help="a data set, readable at gpu.data_dir()/NAME (repeatable): NAME=PATH, or "
                        "[NAME=]hf://datasets/OWNER/NAME[@REVISION][/PATH], pinned to its commit "
                        "and downloaded here at submit")
    p.add_argument("--hours", type=float, help="honest wall-clock estimate in hours (e.g. 0.25)")
    p.add_argument("--gpu", help="GPU type constraint, e.g. T4; TYPE:COUNT for several of one type, "
                   "e.g. H100:4 (as gpu.yaml's gpu: H100:4)")
    p.add_argument("--vram-gb", type=float, help="GB of GPU memory the job needs")
    p.add_argument("--provider", help="pin a target kind (e.g. kaggle: gpu-router chooses among "
                   "your kaggle targets) or a target name (e.g. kg); a name wins")
    p.add_argument("--name", help="short job name for humans")
    p.add_argument("--request-id", help="idempotency key: the same id returns the same job")
    p.add_argument("--smoke", action="store_true", help="a quick smoke test on this machine")
    p.add_argument("--sweep", action="append", metavar="KEY=V1,V2",
                   help="run at every value (repeatable: the grid of every combination), one job "
                        "each, as one group approved once; each run reads its value as $KEY, "
                        "gpu.params() and {KEY} in args")
    p.add_argument("--sweep-list", metavar="FILE",
                   help="run at each point of FILE (a YAML list of mappings, or JSON lines), as one group")
    p.add_argument("--max-parallel", type=int, metavar="N",
                   help="a sweep's points that run at once (default: as the targets' free slots allow)")
    p.add_argument("--wait-s", type=float, help="seconds to wait for the job to be placed (default 10)")
    p.add_argument("--verbose", action="store_true", help="full documents in --json output")
    p.add_argument("--project-dir", metavar="DIR", help="the project folder (default: the current one)")
    _add_allow_large(p)
    p.add_argument("--json", action="store_true", help="print {job, guidance, submitted, bundle} as JSON "
                   "(a sweep: {group, jobs, guidance, submitted, bundle})")


def _add_allow_large(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-large-project", action="store_true",
                   help="ship a project that is your home folder, or a folder outside git with more "
                        "than 5,000 files or 1 GB (otherwise a person is asked and an agent refused); "
                        "credential files are withheld either way")


class _Unbuilt:
    """A command's parser left unbuilt because this run parses another command: whatever is
    asked of it (add_argument, set_defaults, add_subparsers, ...) is ignored."""

    def __getattr__(self, name: str) -> Callable[..., "_Unbuilt"]:
        return lambda *args, **kwargs: self


class _LazyCommands(argparse._SubParsersAction):
    """The subcommands, of which only `only` (the command this run names) gets its parser
    built: every other one keeps its name and help line (so `gpu --help`, `invalid choice` and
    did-you-mean read the same) but none of its ~30 arguments. Why: building every command's
    parser was ~30 ms of each `gpu submit`'s start. `only=None` builds them all."""

    only: str | None = None

    def add_parser(self, name: str, **kwargs: Any) -> Any:  # type: ignore[override]
        if self.only is None or name == self.only:
            return super().add_parser(name, **kwargs)
        if "help" in kwargs:
            self._choices_actions.append(self._ChoicesPseudoAction(name, (), kwargs["help"]))
        self._name_parser_map[name] = stub = _Unbuilt()
        return stub


def _command_of(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the top level's only
    options, --version and --help, take no value); None when there is none."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole `gpu` parser; with `only`, just that command's arguments are built (see
    `_LazyCommands`): the rest parse nothing this run."""
    parser = _Parser(
        prog="gpu", description="Run GPU jobs wherever free or cheap GPUs are, and keep them running.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"gpu-router {_version()}")
    parser.register("action", "parsers", _LazyCommands)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.only = only

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, epilog=EPILOG, **kw)
        p.set_defaults(func=fn)
        return p

    p = add("submit", cli_submit.cmd_submit, "package the project and run a script on a target; returns at once",
            usage="gpu submit [SCRIPT] [options] [-- ARGS...]")
    _add_request_options(p)

    p = add("plan", cli_submit.cmd_plan, "show where and how a submit would run, what it costs and what holds it",
            usage="gpu plan [SCRIPT] [options] [-- ARGS...]")
    _add_request_options(p)

    p = add("approve", cli_submit.cmd_approve, "approve a held job's plan (a person, at a terminal; asks for the "
                                     "approval PIN if one is set)")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("--json", action="store_true",
                   help="always refused with {error, where, fix}: machine output is an agent's, "
                        "and an agent never approves")

    from tui.cli.approvals import add_approvals_command

    add_approvals_command(add)

    p = add("deny", cli_submit.cmd_deny, "refuse a held job (a person, at a terminal)")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("--reason", help="why, for the record")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("targets", cmd_targets, "the targets: GPUs, availability, quota left, price")
    p.add_argument("--json", action="store_true", help="print {targets: [...]}")
    from tui.cli.targets import (
        add_target_commands,  # list, add ssh|slurm|pbs, rm, trust
    )

    add_target_commands(p, cmd_targets)

    from tui.cli.accounts import add_accounts_command

    add_accounts_command(add)  # gpu accounts [list | add PROVIDER | rm PROVIDER]
    from tui.cli.cost import add_cost_command

    add_cost_command(add)  # gpu cost [--since 7d] [--by target|day|job]
    from tui.cli.notify import add_notify_command

    add_notify_command(add)  # gpu notify test

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

    p = add("jobs", cli_jobs.cmd_jobs, "list jobs, newest first")
    p.add_argument("--state", help="only these states, comma-separated")
    p.add_argument("--active", action="store_true", help="only jobs that have not ended")
    p.add_argument("--limit", type=_count, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="print {jobs: [...]}")

    p = add("status", cli_jobs.cmd_status, "one job in detail, or the live jobs and the supervisor")
    p.add_argument("id", nargs="?", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id")
    p.add_argument("--verbose", action="store_true", help="full documents and every event")
    p.add_argument("--metric", metavar="KEY", help="a sweep: its best point by this metric's last value")
    p.add_argument("--max", action="store_true", help="with --metric: the highest is best (default: lowest)")
    p.add_argument("--json", action="store_true", help="print the job object with events and guidance "
                   "(a sweep: {group, jobs[, best]})")

    p = add("logs", cli_jobs.cmd_logs, "print a job's log (output is shown as plain printable text)")
    p.add_argument("id", nargs="?", help="job id, short id, prefix, or 'last' (the newest job of the project "
                   "you are in; outside a project, the newest job). Default: last")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    p.add_argument("--json", action="store_true", help="print {job, state, log}")

    p = add("grep", cli_jobs.cmd_grep, "search the logs of every job (or the named ones) for a regular "
            "expression, newest jobs first: job, line number and the line, as gpu logs shows it")
    p.add_argument("pattern", metavar="PATTERN", help="a regular expression in RE2 syntax (linear time: no backreferences or lookaround), e.g. 'loss=nan|Traceback'")
    p.add_argument("ids", nargs="*", metavar="ID", help="only these jobs (id, short id, prefix, or 'last'); "
                   "default: every job")
    p.add_argument("-i", "--ignore-case", action="store_true", help="match upper and lower case alike")
    p.add_argument("--max", type=_count, metavar="N", default=200,
                   help="stop after N hits (default 200), saying where it stopped")
    p.add_argument("--json", action="store_true",
                   help="print {pattern, hits: [{job, line, text}], jobs_searched, truncated, stopped}")

    p = add("metrics", cli_jobs.cmd_metrics, "a job's metrics: last, min and max per key")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("--key", help="only this metric")
    p.add_argument("--json", action="store_true", help="print every series point too")

    p = add("cancel", cli_jobs.cmd_cancel, "stop a job (every process it started, however detached) and record it cancelled")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("--checkpoint", action="store_true",
                   help="ask the job to checkpoint first (gpu.should_checkpoint() turns true), bring "
                        "that checkpoint home, then stop it (gpu resume goes on from it)")
    p.add_argument("--grace", type=_seconds, default=60.0, metavar="S",
                   help="with --checkpoint: stop it after S seconds even if no new checkpoint came home "
                        "(default 60, at most 300; it also ends once the job runs past its hours x "
                        "overrun_factor, and asking again keeps the first grace)")
    p.add_argument("--json", action="store_true", help="print {job}")

    p = add("resume", cli_jobs.cmd_resume, "run an ended job (cancelled, failed) again from its last "
            "checkpoint, as the same job's next attempt: planned again, the approval rules applied again")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("--json", action="store_true", help="print {job, guidance}")

    p = add("fetch", cli_jobs.cmd_fetch, "bring files a job wrote in its working folder (and did not declare "
                                "as outputs) home into runs/<id>/, from any target")
    p.add_argument("id", help="job id, short id, prefix, or 'last' (the newest job of the project you are in; outside a project, the newest job); or a sweep's group id (the whole group)")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="files, folders or globs (quoted, by the rules of --output) relative to the job's "
                        "working folder, e.g. outputs/ model.pkl 'predict*.pdf'")
    p.add_argument("--json", action="store_true", help="print {job, target, dest, files, bytes, missing, refused, capped, notes}")

    from tui.cli.storage import add_gc_command

    add_gc_command(add, EPILOG)

    p = add("mcp", cmd_mcp, "serve gpu-router to AI agents over MCP on stdin/stdout (gpu_submit, gpu_wait, "
            "gpu_status, ..., compute_job); no tool approves")
    p.epilog = (f"MCP client configuration: {mcp_config()} (a client starts the server with a "
                f"bare environment: GPU_ROUTER_HOME and GPU_ROUTER_CONFIG, where you set them, "
                f"go in env). Every call is an agent's: the approval rules apply in full. {EPILOG}")

    p = add("daemon", cmd_daemon, "run the supervisor (started on demand by submit; one per user)")
    p.add_argument("--detach", action="store_true", help="start it in the background and return")
    p.add_argument("--status", action="store_true", help="say whether it runs")
    p.add_argument("--stop", action="store_true", help="stop it (jobs keep running; a new one re-adopts them)")
    p.add_argument("--json", action="store_true", help="print {running, pid, stopped, loop_lag, strays, "
                                                       "notify: {urls, failing}, warm: {running, pid}}")
    return parser


def _version() -> str:
    from core import __version__

    return __version__


def parse(argv: list[str], built: dict[str, argparse.ArgumentParser] | None = None,
          ) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str]]:
    """The parser, its reading of `argv` up to `--`, and the words after `--` (the script's,
    even with no SCRIPT given). A bad word exits 2 with the parser's usage line, as ever.
    `built` holds parsers made before, by the command each is `only` for (the warm server
    builds submit's once, not in every child: ~3 ms of each warm submit)."""
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    command = _command_of(argv)
    parser = (built or {}).get(command or "") or build_parser(only=command)
    return parser, parser.parse_args(argv), extra


def main(argv: list[str] | None = None, parsed: tuple | None = None) -> int:
    """Run one command; the one place its errors become messages and exit statuses.

    A `UserError` says what, where and what to do, and exits 2. Anything else is a bug in
    gpu-router: one line names it and the log file that holds its traceback, and the status is
    1; GPU_ROUTER_DEBUG=1 lets the traceback through instead. `parsed` is `parse(argv)` done
    already (the warm server reads the words before it runs them).
    """
    argv = sys.argv[1:] if argv is None else argv
    parser, args, extra = parsed or parse(argv)
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
    from tui.show.errlog import log_traceback

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
