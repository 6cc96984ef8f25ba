"""The `gpu` command line: one module per command group, the parser assembled in parser.py.

parser.py builds the parser (every command, its arguments and help) from the groups: submit.py
(submit, plan, approve, deny), approvals.py (the approval PIN), jobs.py (jobs, status, logs,
grep, metrics, cancel, resume, fetch), targets.py, accounts.py, cost.py, notify.py, storage.py
(gc), secrets.py, bundle.py, daemon.py, and fronts.py (`gpu dash`, `gpu mcp`); common.py holds
what several groups share (the store, the project, a broad project's question); run.py holds
`main`, the one place a command's errors become messages and exit statuses.

`main` and `build_parser` are named here, where tests, docs and the warm server reach them
(`from tui.cli import main`). Modules here may import core's public modules (never
core.providers or core.transport), tui.show (the terminal and the rendering every front
shares) and each other; never another front (tui.mcp, tui.dash, tui.warm), but for the doors
tests/project/test_import_rules.py names: fronts.py starts the dashboard and the MCP server, daemon.py
shows and stops the warm server.
"""

from tui.cli.parser import _command_of, build_parser, parse
from tui.cli.run import main

__all__ = ["_command_of", "build_parser", "main", "parse"]
