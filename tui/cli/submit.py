"""`gpu submit`, `gpu plan`, `gpu approve` and `gpu deny`: a job asked for, shown, and said
yes or no to by a person at a terminal (their approval PIN, or the typed job id).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.errors import UserError
from tui.cli.common import (
    actor_of,
    confirm_broad,
    here,
    interactive,
    open_store,
    project_and_script,
)
from tui.show.output import Packing, ask, emit_json, markup, say


def request_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "script": args.script, "args": args.args or None, "env": args.env or None,
        "secrets": args.secret or None, "include": args.include or None,
        "not_secret": getattr(args, "not_secret", None) or None,
        "outputs": args.output or None,
        "data": args.data or None, "hours": args.hours, "gpu": args.gpu,
        "vram_gb": args.vram_gb, "provider": args.provider, "name": args.name,
        "request_id": args.request_id, "smoke": True if args.smoke else None,
        "wait_s": args.wait_s, "verbose": True if args.verbose else None,
        "sweep": _sweep_argument(args), "max_parallel": getattr(args, "max_parallel", None),
    }


def _sweep_argument(args: argparse.Namespace) -> Any:
    """--sweep KEY=V1,V2 (a grid) or --sweep-list FILE (points), None without either."""
    from core.config import sweep

    flags, listed = getattr(args, "sweep", None), getattr(args, "sweep_list", None)
    if flags and listed:
        raise UserError("--sweep and --sweep-list were both given", where="argument --sweep-list",
                        fix="give the grid with --sweep, or every point in the --sweep-list file")
    if flags:
        return sweep.from_flags(flags)
    if listed:
        return sweep.read_list(listed)
    return None


def cmd_submit(args: argparse.Namespace) -> int:
    from core.config.request import build_request
    from core.engine.sweeps import submit  # a sweep as one group, else one job

    project, args.script = project_and_script(args)
    req = build_request(project, request_overrides(args))
    actor = actor_of(args)
    interactive = actor.is_person

    def run(allow: bool):  # the bar stops before confirm_broad asks about a broad folder
        with Packing(bar=not args.json) as packing:
            return submit(req, actor=actor.label("terminal" if interactive else "cli"),
                          interactive=interactive, allow_large_project=allow, progress=packing.stage,
                          warn=None if args.json else packing.warn)

    result = confirm_broad(args, run)
    if args.json:
        emit_json(result.to_json(verbose=req.verbose))
        return 0
    if req.sweep:
        return _said_group(result, actor, interactive)
    if interactive and result.submitted and result.guidance.get("needs_approval"):
        return _ask_at_submit(result, actor)
    from tui.show.render import bundle_panel, state_text

    job = result.job
    verb = "submitted" if result.submitted else "already active, not submitted again:"
    say(markup("[bold]{verb}[/] job [bold]{short}[/] ({name}) on [bold]{target}[/]: {state}"
               + ("  [dim]{reason}[/]" if job.reason else ""),
               verb=verb, short=job.short_id, name=job.name, target=job.provider,
               state=state_text(job.state.value), reason=job.reason))
    say(bundle_panel(result.bundle))
    for key in ("note", "tell_user"):
        if key in result.guidance:
            say(result.guidance[key])
    say(markup("follow: [bold]{follow}[/]   outputs: {outputs}",
               follow=result.guidance["follow"], outputs=job.outputs_dir))
    return 0


def _ask_at_submit(result, actor) -> int:
    """A person at a terminal is shown the plan once; their yes (and their approval PIN, if
    one is set) approves that digest."""
    from core.engine.approvals import approve, deny, require_person
    from tui.show.render import bundle_panel, plan_panel

    require_person(actor, result.job.short_id, store=open_store(), job=result.job)  # never reached by an agent

    job = result.job
    say(markup("[bold]job {short}[/] ({name}) needs your approval before it runs:",
               short=job.short_id, name=job.name))
    say(plan_panel(job.plan, result.bundle))
    from core.engine.accounts import elsewhere
    from tui.show.render import elsewhere_panel

    req = job.request
    other = elsewhere(req.get("gpu"), req.get("vram_gb"), req.get("hours"))
    if other is not None:  # what it would cost elsewhere, before the person says yes
        say(elsewhere_panel(other))
    say(bundle_panel(result.bundle))
    answer = ask(markup("Approve job {short}? \\[y = approve, n = deny, enter = decide later] ",
                        short=job.short_id)).strip().lower()
    store = open_store()
    if answer in ("y", "yes"):
        checked = _pin_at_terminal(job, "terminal, at submit", actor)
        job = approve(store, job.id, digest=job.digest, actor=actor.label("terminal, at submit"),
                      pin_checked=checked)
        say(markup("approved: job [bold]{short}[/] will run.  follow: [bold]gpu logs -f {short}[/]",
                   short=job.short_id))
    elif answer in ("n", "no"):
        deny(store, job.id, actor=actor.label("terminal, at submit"))
        say(markup("denied: job {short} will not run", short=job.short_id))
    else:
        say(markup("job {short} waits: [bold]gpu approve {short}[/] or [bold]gpu deny {short}[/]",
                   short=job.short_id))
    return 0


def _said_group(result, actor, interactive: bool) -> int:
    """A sweep submitted: the group, where its points run, and what holds it."""
    from tui.show.render import bundle_panel

    group, doc = result.group, result.to_json()["group"]
    verb = "submitted" if result.submitted else "already active, not submitted again:"
    where = ", ".join(f"{k} ({v})" for k, v in doc["targets"].items())
    say(markup("[bold]{verb}[/] sweep [bold]{short}[/] ({name}): {n} points on {where}",
               verb=verb, short=group.short_id, name=group.name, n=doc["points"], where=where))
    say(bundle_panel(result.bundle))
    for key in ("note", "tell_user"):
        if key in result.guidance:
            say(result.guidance[key])
    if interactive and result.submitted and result.guidance.get("needs_approval"):
        return _approve_group_here(group, actor, "terminal, at submit")
    say(markup("follow: [bold]{follow}[/]", follow=result.guidance["follow"]))
    return 0


def _approve_group_here(group, actor, where: str) -> int:
    """A person approves (or denies) a whole sweep: the typed group id, or their PIN."""
    from core.engine.approvals import require_person
    from core.engine.sweeps import approve_group, held_points

    store = open_store()
    points = held_points(store, group)
    require_person(actor, group.short_id, store=store, job=points[0] if points else None)
    if not points:
        raise UserError(f"sweep {group.short_id} has no point awaiting approval ({group.approval})",
                        fix=f"see `gpu status {group.short_id}`")
    spec = group.spec
    say(markup("[bold]sweep {short}[/] ({name}): {n} points, {hours} h in all, ${price} estimated, on {where}",
               short=group.short_id, name=group.name, n=len(spec.get("points", [])),
               hours=f"{spec['hours']:g}" if spec.get("hours") is not None else "?",
               price=f"{spec.get('estimated_price') or 0:.2f}",
               where=", ".join(f"{k} ({v})" for k, v in spec.get("targets", {}).items())))
    from core.config.sweep import label

    for n, point in enumerate(spec.get("points", [])[:20], start=1):
        say(markup("  {n}. {label}", n=n, label=label(point)))
    if len(spec.get("points", [])) > 20:
        say(f"  ... and {len(spec['points']) - 20} more")
    checked = _approve_on_terminal(group, actor)  # a group has a short_id like a job
    jobs = approve_group(store, group, digest=group.digest, actor=actor.label(where), pin_checked=checked)
    say(markup("approved sweep {short} (plan {digest}): {n} points will run",
               short=group.short_id, digest=group.digest[:12], n=len(jobs)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from core.config.request import build_request
    from core.engine.service import prepare

    project, args.script = project_and_script(args)
    req = build_request(project, request_overrides(args), command="gpu plan")
    if req.sweep:  # the group's plan: each point's target, the totals, what holds it
        from core.engine.sweeps import preview

        doc = confirm_broad(args, lambda allow: preview(req, interactive=interactive(args),
                                                         allow_large_project=allow))
        if args.json:
            emit_json(doc)
            return 0
        g = doc["group"]
        say(markup("sweep of {n} points on {where}: {hours} h in all, ${price} estimated{held}",
                   n=len(doc["points"]), where=", ".join(f"{k} ({v})" for k, v in g["targets"].items()),
                   hours=f"{g['hours']:g}" if g.get("hours") is not None else "?",
                   price=f"{g.get('estimated_price') or 0:.2f}",
                   held="; held: " + "; ".join(h["reason"] for h in g["holds"]) if g["holds"] else ""))
        return 0

    def run(allow: bool):  # the bar stops before confirm_broad asks about a broad folder
        with Packing(bar=not args.json) as packing:
            return prepare(req, interactive=interactive(args), allow_large_project=allow,
                           progress=packing.stage, warn=None if args.json else packing.warn)

    bundle, plan = confirm_broad(args, run)
    from core.engine.accounts import elsewhere

    other = elsewhere(req.gpu, req.vram_gb, req.hours)  # None (and nothing read) without accounts
    if args.json:
        from core.engine.reports import plan_doc

        emit_json(plan_doc(bundle.summary(), plan, other))
        return 0
    from tui.show.render import bundle_panel, elsewhere_panel, plan_panel

    say(plan_panel(plan))
    if other is not None:
        say(elsewhere_panel(other))
    say(bundle_panel(bundle.summary()))
    return 0


def _pin_at_terminal(job, where: str, actor=None) -> bool:
    """With an approval PIN set, ask for it (hidden) and check it; True when one was. Only a
    person at a terminal gets here (require_person), so the PIN is never read from a pipe."""
    from core.engine.approvals import pin_is_set, require_pin
    from tui.show.output import ask_hidden

    if not pin_is_set():
        return False
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("the approval PIN is only read at a terminal", fix="run it in a terminal")
    entered = ask_hidden(f"approval PIN for job {job.short_id} (hidden): ")
    return require_pin(entered, where=f"gpu approve {job.short_id} ({where})", store=open_store(),
                       job=job if hasattr(job, "state") else None,  # a group keeps no events
                       actor=actor.label(where) if actor is not None else "")


def _approve_on_terminal(job, actor) -> bool:
    """A person's deliberate yes: their approval PIN if one is set, else the typed job id.
    An agent is refused before anything is asked. True when a PIN was checked."""
    from core.engine.approvals import pin_is_set, require_person

    require_person(actor, job.short_id)
    if pin_is_set():
        return _pin_at_terminal(job, "terminal", actor)
    _confirm_on_terminal(job, "approve")
    return False


def _confirm_on_terminal(job, verb: str) -> None:
    """A typed confirmation at a terminal; without one, refused."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError(f"{verb} needs a person at a terminal",
                        fix=f"a person runs `gpu {verb} {job.short_id}` in a terminal, or presses "
                            f"`{'a' if verb == 'approve' else 'd'}` on the job in `gpu dash`")
    typed = ask(markup("Type the job id ({short}) to {verb} it: ", short=job.short_id, verb=verb)).strip()
    if typed != job.short_id:
        raise UserError(f"you typed {typed!r}, not {job.short_id}: nothing was changed")


def cmd_approve(args: argparse.Namespace) -> int:
    from core.engine.approvals import approve, require_person
    from core.jobs.states import State

    actor = actor_of(args)
    store = open_store()
    job = store.resolve_any(args.id, here())
    if not hasattr(job, "state"):  # a sweep's group: every point held with it, at once
        return _approve_group_here(job, actor, "terminal")
    # a job's process, then an agent, is refused before it is shown or asked anything
    require_person(actor, job.short_id, store=store, job=job)
    if job.state != State.AWAITING_APPROVAL:
        raise UserError(f"job {job.short_id} is {job.state.value}, not awaiting approval",
                        fix="see `gpu jobs --state awaiting_approval`")
    from tui.show.render import plan_panel

    say(markup("[bold]job {short}[/] ({name}) waits for approval:", short=job.short_id, name=job.name))
    say(plan_panel(job.plan, job.bundle))
    checked = _approve_on_terminal(job, actor)
    job = approve(store, job.id, digest=job.digest, actor=actor.label("terminal"), pin_checked=checked)
    say(markup("approved plan {digest}: job [bold]{short}[/] will run",
               digest=job.approved_digest[:12], short=job.short_id))
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    from core.engine.approvals import deny, require_not_job

    store = open_store()
    job = store.resolve_any(args.id, here())
    if not hasattr(job, "state"):  # a sweep's group: every point held with it
        from core.engine.sweeps import deny_group, held_points

        points = held_points(store, job)
        if points:
            require_not_job("denial", store=store, job=points[0], undone="nothing was denied")
        _confirm_on_terminal(job, "deny")
        jobs = deny_group(store, job, actor=actor_of(args).label("terminal"), reason=args.reason)
        if args.json:
            emit_json({"group": job.to_json(), "jobs": [j.to_json() for j in jobs]})
        else:
            say(markup("sweep [bold]{short}[/]: {n} points denied", short=job.short_id, n=len(jobs)))
        return 0
    require_not_job("denial", store=store, job=job, undone="nothing was denied")  # before any prompt
    _confirm_on_terminal(job, "deny")
    # a no spends nothing: an agent at a pty may give it, and is recorded as the agent it is
    job = deny(store, job.id, actor=actor_of(args).label("terminal"), reason=args.reason)
    if args.json:
        emit_json({"job": job.to_json()})
    else:
        say(markup("job [bold]{short}[/]: {state}", short=job.short_id, state=job.state.value))
    return 0
