"""The dashboard's command palette (ctrl+p): for each job, open, details, approve, deny and
cancel, and a filter for each state.

Its own module because a palette provider is a textual Provider, not part of the app: it
calls the app's own entry points (select_job, open_detail, open_approval, open_deny,
open_cancel, apply_filter), so a choice here does exactly what its key does.
"""

from __future__ import annotations

from typing import Callable

from textual.command import Hit, Hits, Provider

from core.jobs.states import ACTIVE, State
from tui.show.output import safe


class JobCommands(Provider):
    """The command palette: approve, deny, cancel, open, filter, for each job."""

    async def search(self, query: str) -> Hits:
        app = self.app  # the DashApp (tui/dash/app.py), whose COMMANDS list this provider
        matcher = self.matcher(query)
        for job in app.index.newest(300):
            options: list[tuple[str, Callable, str]] = [
                (f"open logs of {job.short_id} ({job.name})", lambda j=job: app.select_job(j.id), "select it"),
                (f"show details of {job.short_id} ({job.name})", lambda j=job: app.open_detail(j.id), "the detail screen"),
            ]
            if not app.read_only:
                if job.state == State.AWAITING_APPROVAL:
                    options.append((f"approve job {job.short_id} ({job.name})", lambda j=job: app.open_approval(j.id), "review its plan"))
                    options.append((f"deny job {job.short_id} ({job.name})", lambda j=job: app.open_deny(j.id), "refuse it"))
                if job.state in ACTIVE:
                    options.append((f"cancel job {job.short_id} ({job.name})", lambda j=job: app.open_cancel(j.id), "stop it"))
            for text, fn, help_ in options:
                text = safe(text, single_line=True)
                score = matcher.match(text)
                if score > 0:
                    yield Hit(score, _highlight(matcher, text), fn, text=text, help=help_)
        for state in State:
            text = f"filter: {state.value}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, _highlight(matcher, text), lambda s=state.value: app.apply_filter(s),
                          help="show only these jobs")


def _highlight(matcher, text: str):
    """The matched letters of `text` highlighted; Matcher.highlight would read `text` as
    markup, and a job's name is not gpu-router's markup."""
    from textual.content import Content

    content = Content(text)
    _, offsets = matcher.fuzzy_search.match(matcher.query, text)
    for offset in offsets:
        if not text[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content
