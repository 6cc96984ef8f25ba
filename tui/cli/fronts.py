"""The commands that start another front: `gpu dash` (and a bare `gpu` at a terminal) opens the
dashboard, `gpu mcp` serves the MCP tools on stdin/stdout.

Why a module of its own: a front never imports another (tests/project/test_import_rules.py), and these
are the CLI's two doors to tui.dash and tui.mcp, named there. Each is imported only inside the
command that needs it, so no other command pays for textual or the MCP SDK.
"""

from __future__ import annotations

import argparse
import os
import sys

from core.errors import UserError
from tui.show.output import write


def run_dashboard(read_only: bool = False) -> int:
    """The full-screen dashboard, in this process (`gpu dash`, or `gpu` alone at a terminal)."""
    from tui.dash.app import run

    return run(read_only=read_only)


def cmd_dash(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("gpu dash needs a terminal", fix="run it in a terminal (also over ssh -t)")
    return run_dashboard(read_only=args.read_only)


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
