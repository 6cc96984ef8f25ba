"""`gpu gc`: what gpu-router caches here and on each target, and freeing it.

    gpu gc [--dry-run] [--all] [--where home|TARGET ...] [--json]

Without --all it frees least-recently-used entries until each location is under its cap
(`storage:` in the user config); --all frees every entry no live job needs. Nothing used in the
last ten minutes, needed by a live job, or holding a running job's environment is ever freed.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable


def add_gc_command(add: Callable[..., argparse.ArgumentParser], epilog: str) -> None:
    p = add("gc", cmd_gc, "show and free cached bundles, venvs and data sets (here and on targets)")
    p.epilog = epilog
    p.add_argument("--dry-run", action="store_true", help="show what would be freed; free nothing")
    p.add_argument("--all", action="store_true",
                   help="free every entry no live job needs, not only what is over the cap")
    p.add_argument("--where", action="append", metavar="LOCATION",
                   help="only this location: home (this machine) or a target's name; repeatable")
    p.add_argument("--json", action="store_true",
                   help="print {locations: [{where, cap_bytes, bytes, entries, evict, evict_bytes, "
                        "freed, error}], seconds, dry_run}")


def cmd_gc(args: argparse.Namespace) -> int:
    from core.engine import storage
    from core.jobs.store import Store
    from tui.show.output import emit_json, markup, say
    from tui.show.render import human_bytes

    started = time.perf_counter()
    locs = storage.collect(Store(), only=args.where, everything=args.all, dry_run=args.dry_run)
    seconds = time.perf_counter() - started
    if args.json:
        emit_json({"locations": [loc.to_json() for loc in locs], "seconds": round(seconds, 3),
                   "dry_run": args.dry_run})
        return 0
    verb = "would free" if args.dry_run else "freed"
    for loc in locs:
        if loc.error:
            say(markup("[bold]{name}[/]: not reachable ({error})", name=loc.where, error=loc.error))
            continue
        cap = f" of a {human_bytes(loc.cap_bytes)} cap" if loc.cap_bytes else ""
        gone = sum(e.bytes for e in loc.evict) if args.dry_run else loc.freed
        say(markup("[bold]{name}[/]: {summary}", name=loc.where,
                   summary=f"{len(loc.entries)} entries, {human_bytes(loc.total)}{cap}; "
                           f"{verb} {len(loc.evict)} ({human_bytes(gone)})"))
        for e in loc.evict[:20]:
            say(f"  {e.kind:<8} {e.key[:16]}  {human_bytes(e.bytes):>9}  last used "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(e.used_at))}")
        if len(loc.evict) > 20:
            say(f"  ... and {len(loc.evict) - 20} more (--json lists them all)")
    say(f"took {seconds:.2f}s")
    return 0
