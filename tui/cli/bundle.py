"""`gpu bundle`: what a submit would ship, hashed and listed but never packed or stored.

It reads gpu.yaml as a submit does and asks the same question about a broad project, so the
answer is the one `gpu submit` would act on.
"""

from __future__ import annotations

import argparse

from tui.cli.common import confirm_broad
from tui.show.output import emit_json, markup, say


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
