"""`main`: run one `gpu` command, the one place its errors become messages and exit statuses.

Nothing here writes to the terminal itself: every line goes through tui.show.output.
"""

from __future__ import annotations

import argparse
import os
import sys

from core.errors import UserError
from tui.cli.parser import parse
from tui.show.output import emit_json, error


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
            from tui.cli.fronts import run_dashboard  # plain `gpu` on a terminal opens the dashboard

            return run_dashboard()
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
