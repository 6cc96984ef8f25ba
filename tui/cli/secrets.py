"""`gpu secrets`: set, list and remove the keychain secrets a job may read (`--secret NAME`).

A value is read hidden at a terminal, else from stdin; it is never printed back.
"""

from __future__ import annotations

import argparse
import sys

from core.errors import UserError
from tui.show.output import emit_json, say


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
