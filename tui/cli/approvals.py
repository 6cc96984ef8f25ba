"""`gpu approvals pin`: the optional approval PIN that `gpu approve` and the dashboard ask for.

    gpu approvals pin set       # asks twice, hidden; a person at a terminal only
    gpu approvals pin clear     # needs the current PIN
    gpu approvals pin status [--json]

Setting and clearing are a person's acts like approving: an agent that set a PIN would lock the
person out, one that cleared it would undo it. The PIN is typed at a terminal only (never an
argument, never stdin from a pipe), so it is not in argv, a shell history or an agent's
transcript. Kept out of tui/cli/parser.py, which only hooks this in.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from core.errors import UserError


def add_approvals_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("approvals", cmd_approvals, "the approval PIN: gpu approvals pin set | clear | status")
    p.usage = "gpu approvals [pin {set,clear,status}] [--json]"
    p.add_argument("--json", action="store_true", help="print {pin: {set, scheme, n, r, p}}")
    sub = p.add_subparsers(dest="approvals_what", metavar="WHAT")
    pp = sub.add_parser("pin", prog="gpu approvals pin",
                        help="an approval PIN that `gpu approve` and the dashboard ask for",
                        description="set, clear or show the approval PIN (only its salted scrypt "
                                    "hash is kept, in your user config)")
    pp.add_argument("action", choices=["set", "clear", "status"],
                    help="set: ask for a new PIN twice (a person at a terminal); clear: remove it "
                         "(asks for it first); status: whether one is set")
    pp.add_argument("--json", action="store_true",
                    help="status: print {pin: {set, scheme, n, r, p}}; set and clear refuse it "
                         "(a PIN is typed by a person)")
    pp.set_defaults(func=cmd_pin)


def cmd_approvals(args: argparse.Namespace) -> int:
    """Plain `gpu approvals`: the PIN's status."""
    args.action = "status"
    return cmd_pin(args)


def cmd_pin(args: argparse.Namespace) -> int:
    from core.engine import pin
    from tui.show.output import emit_json, markup, say

    if args.action == "status":
        doc = pin.status()
        if args.json:
            emit_json({"pin": doc})
        elif doc["set"]:
            say(markup("an approval PIN is set (scrypt n={n}): `gpu approve` and the dashboard ask for it",
                       n=doc["n"]))
        else:
            say(markup("no approval PIN is set: [bold]gpu approvals pin set[/] adds one"))
        return 0
    _require_person(f"gpu approvals pin {args.action}", args)
    if args.action == "set":
        if pin.stored() is not None:
            _ask_current(pin, "to change it")
        first = _ask("new approval PIN (hidden): ")
        pin.check_strength(first)
        if _ask("the same PIN again (hidden): ") != first:
            raise UserError("the two PINs differ: nothing was changed", fix="gpu approvals pin set")
        where = pin.save(first)
        say(markup("approval PIN set (its salted scrypt hash is in {where}); `gpu approve` and the "
                   "dashboard now ask for it", where=where))
        return 0
    if pin.stored() is None:
        say("no approval PIN is set: nothing to clear")
        return 0
    _ask_current(pin, "to clear it")
    where = pin.clear()
    say(markup("approval PIN cleared from {where}", where=where))
    return 0


def _require_person(command: str, args: argparse.Namespace) -> None:
    from core.engine.actor import current
    from core.engine.pin import refuse_in_job

    refuse_in_job(f"`{command}`")  # a job's process first: it says which fact showed it

    actor = current(json=args.json)
    if not actor.is_person:
        raise UserError(f"{command} needs a person at a terminal, and this run is an agent's: {actor.why}",
                        fix=f"a person runs `{command}` in a terminal of their own"
                            + (f", whose environment has no {actor.marker}" if actor.marker else ""))


def _ask(prompt: str) -> str:
    from tui.show.output import ask_hidden

    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # _require_person said so already
        raise UserError("a PIN is only read at a terminal", fix="run it in a terminal")
    return ask_hidden(prompt)


def _ask_current(pin, why: str) -> None:
    pin.require(_ask(f"the current approval PIN, {why} (hidden): "), where="gpu approvals pin",
                undone="nothing was changed")
