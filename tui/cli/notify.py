"""`gpu notify test`: one message to every apprise URL under `notify:` in the user config, and
what each came to; and the `gpu daemon --status` lines of URLs that fail.

    gpu notify test [--json]

The supervisor sends the real messages (core/engine/notify.py); this only checks that each URL
reaches someone. URLs are shown in apprise's privacy form (tokens cut), never whole. Exits 0
when every URL took the message, 1 when one did not, 2 when none is configured. Kept out of
tui/cli/parser.py, which only hooks it in.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from core.errors import UserError
from tui.show.output import emit_json, markup, say

EXAMPLE = ("notify:\n  - ntfy://ntfy.sh/my-gpu-jobs\n"
           "  - {url: json://127.0.0.1:8080/hook, events: [approval_wait, failed]}")


def add_notify_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add("notify", cmd_notify, "notifications to you (apprise URLs under notify: in your config): "
                                  "`gpu notify test` sends one message to each",
            usage="gpu notify test [--json]")
    p.epilog = ("The supervisor tells each URL when a job waits for your approval, ends, fails, is "
                "stopped by a rule or is cancelled (per-URL events: docs/notifications.md).")
    sub = p.add_subparsers(dest="notify_action", metavar="ACTION")
    tp = sub.add_parser("test", prog="gpu notify test",
                        help="send one test message to every configured URL and say how each went",
                        description="send one test message to every apprise URL under notify: in your "
                                    "config (whatever events it asks for) and say, per URL, whether it "
                                    "arrived; exit 1 when one did not")
    tp.add_argument("--json", action="store_true", help="print {sent: [{url, ok, tries, error}], seconds}")
    tp.set_defaults(func=cmd_test)


def cmd_notify(args: argparse.Namespace) -> int:
    raise UserError("gpu notify needs an action", fix="gpu notify test")


def cmd_test(args: argparse.Namespace) -> int:
    from core import paths
    from core.config import user as userconfig
    from core.engine import notify

    urls = userconfig.load().notify
    if not urls:
        raise UserError("no notify URLs in your config", where=str(paths.user_config_file()),
                        fix=f"add apprise URLs, for example:\n{EXAMPLE}")
    started = time.perf_counter()
    outcomes = notify.test_all(urls)
    seconds = round(time.perf_counter() - started, 3)
    if args.json:
        emit_json({"sent": [o.to_json() for o in outcomes], "seconds": seconds})
    else:
        for o in outcomes:
            if o.ok:
                say(markup("[green]sent[/]    {url}", url=o.url))
            else:
                say(markup("[red]failed[/]  {url}: {error} ({tries} tries)", url=o.url, error=o.error or "",
                           tries=o.tries))
    return 0 if all(o.ok for o in outcomes) else 1


def status_doc() -> dict:
    """`notify` of `gpu daemon --status --json`: {urls, failing: [{url, error, since, missed, job}]}.
    An invalid config is the config's problem, said by every other command: none here."""
    from core.config import user as userconfig
    from core.engine import notify

    try:
        urls = userconfig.load().notify
    except UserError:
        return {"urls": 0, "failing": []}
    return {"urls": len(urls), "failing": notify.failing(urls) if urls else []}


def status_lines(doc: dict) -> list:
    """One line per failing URL, for `gpu daemon --status`."""
    out = []
    for f in doc["failing"]:
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(f["since"])) if f.get("since") else "?"
        out.append(markup("notify: [red]{url} failing[/] since {since}: {error} ({missed} not delivered; "
                          "gpu notify test tries it again)", url=f["url"], since=since,
                          error=f.get("error") or "", missed=f.get("missed", 1)))
    return out
