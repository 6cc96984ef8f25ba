"""`gpu accounts`: the user's GPU cloud accounts, read-only (list, add PROVIDER, rm PROVIDER).

    gpu accounts [list] [--refresh] [--json]
    gpu accounts add PROVIDER [--key-stdin] [--base-url URL] [--timeout-s S] [--no-probe] [--json]
    gpu accounts rm PROVIDER [--json]

The API key is typed hidden at a terminal or piped on standard input (`--key-stdin`), never an
argument (a command line is visible to every process on the machine), and goes only to the
keychain. Everything a provider wrote (GPU names, regions, instance names, errors) is shown
through tui.show.output's filter. Kept out of tui/cli/parser.py, which only hooks these in.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from core.errors import UserError
from tui.show.output import emit_json, markup, renderable, safe, say

PROVIDERS = ("tensorpool", "lambda", "primeintellect", "vast", "runpod")


def add_accounts_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("accounts", cmd_list, "your GPU cloud accounts, read-only: balance, GPUs on offer now "
                                  "with price and count, your running instances and their cost so far",
            usage="gpu accounts [list | add PROVIDER | rm PROVIDER] [--json]")
    p.add_argument("--refresh", action="store_true", help="read every account now, past the 60 s cache")
    p.add_argument("--json", action="store_true", help="print {accounts: [...], read_at}")
    sub = p.add_subparsers(dest="accounts_action", metavar="ACTION")

    lp = sub.add_parser("list", prog="gpu accounts list", help="the accounts (the same as plain `gpu accounts`)",
                        description="every account: balance, offers now, running instances, each figure with its age")
    lp.add_argument("--refresh", action="store_true", help="read every account now, past the 60 s cache")
    lp.add_argument("--json", action="store_true", help="print {accounts: [...], read_at}")
    lp.set_defaults(func=cmd_list)

    ap = sub.add_parser("add", prog="gpu accounts add",
                        help="store a provider's API key in the keychain and read the account once",
                        description="store PROVIDER's API key in the keychain (typed hidden, or --key-stdin) "
                                    "and read the account once; a key the provider refuses is not stored. "
                                    "gpu-router only ever reads an account: it creates and deletes nothing there.")
    ap.add_argument("provider", choices=PROVIDERS)
    ap.add_argument("--key-stdin", action="store_true", help="read the API key from standard input")
    ap.add_argument("--base-url", metavar="URL", help="the provider's API at another address (https; http only to this machine)")
    ap.add_argument("--timeout-s", type=float, metavar="S", help="seconds a read may take (default 3, at most 30)")
    ap.add_argument("--no-probe", action="store_true", help="store the key without reading the account")
    ap.add_argument("--json", action="store_true", help="print {provider, saved_to, keychain, probe}")
    ap.set_defaults(func=cmd_add)

    rp = sub.add_parser("rm", prog="gpu accounts rm", help="forget an account: its key, its config entry, its cache",
                        description="delete PROVIDER's key from the keychain and its entry from your config")
    rp.add_argument("provider", choices=PROVIDERS)
    rp.add_argument("--json", action="store_true", help="print {removed, key_deleted, saved_to}")
    rp.set_defaults(func=cmd_rm)


def _key(args: argparse.Namespace) -> str:
    if args.key_stdin:
        key = sys.stdin.read(1 << 13).strip()
        if not key:
            raise UserError("nothing on standard input",
                            fix=f"pipe the key in: gpu accounts add {args.provider} --key-stdin < key.txt")
        return key
    if sys.stdin.isatty():
        from tui.show.output import ask_hidden

        return ask_hidden(f"{args.provider} API key (not shown): ")
    raise UserError("no terminal to type the key at",
                    fix=f"gpu accounts add {args.provider} --key-stdin < key.txt")


def cmd_add(args: argparse.Namespace) -> int:
    from core.engine import accounts

    path, probe = accounts.add(args.provider, _key(args), base_url=args.base_url,
                               timeout_s=args.timeout_s, probe=not args.no_probe)
    if args.json:
        emit_json({"provider": args.provider, "saved_to": path,
                   "keychain": f"{accounts.KEY_PREFIX}{args.provider}", "probe": probe})
        return 0
    say(markup("stored the [bold]{p}[/] API key in the keychain ({name}); listed it in {path}",
               p=args.provider, name=f"{accounts.KEY_PREFIX}{args.provider}", path=path))
    if probe is not None:
        for part in account_lines(probe):
            say(part)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from core.engine import accounts

    doc = accounts.remove(args.provider)
    if args.json:
        emit_json(doc)
    else:
        say(markup("forgot the [bold]{p}[/] account (key deleted from the keychain: {k})",
                   p=args.provider, k="yes" if doc["key_deleted"] else "there was none"))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from core.engine import accounts

    doc = accounts.snapshot(refresh=bool(getattr(args, "refresh", False)))
    refused = accounts.refused(doc)
    if args.json:
        emit_json(doc)
        return 2 if refused else 0
    if not doc["accounts"]:
        say("no accounts yet: gpu accounts add runpod (or tensorpool, lambda, primeintellect, vast)")
        return 0
    for a in doc["accounts"]:
        for part in account_lines(a):
            say(part)
    if refused:
        names = ", ".join(a["title"] for a in refused)
        raise UserError(f"{names} refused the stored API key (expired or revoked?)",
                        fix="; ".join(f"gpu accounts add {a['provider']}" for a in refused))
    return 0


def age(seconds: float | None) -> str:
    if seconds is None:
        return "never read"
    if seconds < 90:
        return f"read {seconds:.0f} s ago"
    if seconds < 5400:
        return f"read {seconds / 60:.0f} min ago"
    return f"read {seconds / 3600:.1f} h ago"


STATE_STYLE = {"fresh": "green", "cached": "green", "stale": "yellow", "failed": "red", "no_key": "red"}
# each state as words a person reads after the figures (or instead of them, where none are known)
STATE_WORDS = {"fresh": "up to date", "cached": "up to date", "stale": "the last read failed: older figures",
               "failed": "could not be read", "no_key": "no API key stored"}


def heading(a: dict[str, Any]) -> Any:
    """An account's first line as a sentence: `RunPod (runpod): balance $12.00, read 2 min ago
    (up to date)`, or `Lambda (lambda): no API key stored` where nothing was ever read (the
    codes and fragments it used to read as: "no balance never read no_key")."""
    from rich.text import Text

    acct = a.get("account")
    words = STATE_WORDS.get(a["state"], a["state"])
    state = Text(safe(words, single_line=True), style=STATE_STYLE.get(a["state"], ""))
    title, p = a.get("title", a["provider"]), a["provider"]
    if not acct:  # never read (no key, or the first read failed): no figures to show
        seen = f", last {age(a['age_s'])}" if a.get("age_s") is not None else ""
        return markup("[bold]{title}[/] ({p}): {state}{seen}", title=title, p=p, state=state, seen=seen)
    bal = acct.get("balance")
    balance = (f"balance ${bal:.2f}" if isinstance(bal, (int, float))
               else acct.get("balance_note") or "its API gives no balance")
    spend = acct.get("spend_per_hour")
    return markup("[bold]{title}[/] ({p}): {balance}{spend}, [dim]{age}[/] ({state})", title=title, p=p,
                  balance=balance, spend=f", spending ${spend:.2f}/h" if spend else "",
                  age=age(a.get("age_s")), state=state)


def account_lines(a: dict[str, Any], offers: int = 8) -> list[Any]:
    """One account: a heading with its balance and how old the figures are, its cheapest offers
    and its instances. Every value a provider wrote passes `safe` on its own."""
    from rich.table import Table

    out: list[Any] = [heading(a)]
    if a.get("error"):
        out.append(markup("  [red]{error}[/]", error=a["error"]))
    if a.get("fix"):
        out.append(markup("  fix: {fix}", fix=a["fix"]))
    unavailable = a.get("unavailable") or []
    if unavailable:
        out.append(markup("  [dim]not in its public API: {parts}[/]", parts=", ".join(unavailable)))
    rows = sorted((o for o in a.get("offers") or [] if o.get("available") != 0),
                  key=lambda o: o["price_per_hour"])
    if rows:
        t = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 2))
        for col in ("GPU", "VRAM", "GPUS", "$/H", "FREE", "WHERE"):
            t.add_column(col, no_wrap=True)
        for o in rows[:offers]:
            t.add_row(*(renderable(safe(c, single_line=True)) for c in (
                o["gpu"], f"{o['vram_gb']:g} GB" if o.get("vram_gb") else "-", o.get("gpu_count", 1),
                f"{o['price_per_hour']:.2f}", o["available"] if o.get("available") is not None else (o.get("stock") or "?"),
                o.get("region") or "-")))
        out.append(t)
        if len(rows) > offers:
            out.append(markup("  [dim]{n} more offers: gpu accounts --json[/]", n=len(rows) - offers))
    instances = a.get("instances") or []
    if instances:
        t = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 2))
        for col in ("INSTANCE", "NAME", "GPU", "STATUS", "$/H", "COST SO FAR"):
            t.add_column(col, no_wrap=True)
        for i in instances:
            t.add_row(*(renderable(safe(c, single_line=True)) for c in (
                i["id"], i.get("name") or "-", f"{i.get('gpu_count', 1)}x {i.get('gpu') or '?'}", i["status"],
                f"{i['price_per_hour']:.2f}" if i.get("price_per_hour") is not None else "-",
                f"${i['cost_so_far']:.2f}" if i.get("cost_so_far") is not None else "not given")))
        out.append(t)
    return out
