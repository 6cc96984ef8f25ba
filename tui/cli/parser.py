"""The `gpu` parser, assembled in one place: every command, its arguments and its help, each
command's function from its group's module (tui/cli/submit.py, jobs.py, targets.py, ...).

Only the command a run names gets its parser built (`_LazyCommands`), and the command modules
other than submit's and jobs' are imported as the parser is assembled, so an agent's
`gpu submit --json` starts fast. Every line argparse prints goes through tui.show.output
(`_Parser`), where text gpu-router did not write is filtered and never read as markup.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import IO, Any, Callable

import tui.cli.jobs as cli_jobs
import tui.cli.submit as cli_submit
from tui.show.output import write

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

    from tui.cli.targets import add_target_commands, cmd_targets  # list, add ssh|slurm|pbs, rm, trust

    p = add("targets", cmd_targets, "the targets: GPUs, availability, quota left, price")
    p.add_argument("--json", action="store_true", help="print {targets: [...]}")
    add_target_commands(p, cmd_targets)

    from tui.cli.accounts import add_accounts_command

    add_accounts_command(add)  # gpu accounts [list | add PROVIDER | rm PROVIDER]
    from tui.cli.cost import add_cost_command

    add_cost_command(add)  # gpu cost [--since 7d] [--by target|day|job]
    from tui.cli.notify import add_notify_command

    add_notify_command(add)  # gpu notify test

    from tui.cli.bundle import cmd_bundle
    from tui.cli.fronts import cmd_dash
    from tui.cli.secrets import cmd_secrets

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

    from tui.cli.daemon import cmd_daemon
    from tui.cli.fronts import cmd_mcp, mcp_config

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
