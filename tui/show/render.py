"""Human output of the CLI: rich tables and panels, imported only when a human reads.

Every value shown comes from a job, a user, a config or a remote host, so each one enters
through tui.show.output: `markup()` for styled lines, `renderable()` for table cells and group
lines (a str there would be parsed as markup by Rich and by Textual, which renders these too).
"""

from __future__ import annotations

import time
from typing import Any

from tui.show.output import joined, markup, renderable

STATE_STYLE = {
    "queued": "dim", "routing": "cyan", "awaiting_approval": "bold yellow",
    "provisioning": "cyan", "running": "bold green", "checkpointing": "green",
    "migrating": "magenta", "done": "green", "failed": "bold red", "cancelled": "dim red",
    "denied": "red",
}


def state_text(state: str) -> Any:
    """A job state, styled; a Text that markup() templates take as a styled field."""
    from rich.text import Text

    return Text(state, style=STATE_STYLE.get(state, ""))


def _row(table: Any, *cells: object) -> None:
    table.add_row(*(renderable(c) for c in cells))


def _group(*parts: object) -> Any:
    from rich.console import Group

    return Group(*(renderable(p) for p in parts))


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def local_time(ts: float | str | None) -> str:
    """A journey's time, local, as the events table shows it."""
    if not isinstance(ts, (int, float)):
        return ts or "-"
    return time.strftime("%m-%d %H:%M:%S", time.localtime(ts))


def elapsed(job) -> float | None:
    if job.started_at is None:
        return None
    return (job.ended_at or time.time()) - job.started_at


def sweep_elapsed(points: list) -> float | None:
    """A sweep's time: from its first point's start to its last point's end (now while one
    is live); None before any point started."""
    started = [p.started_at for p in points if p.started_at is not None]
    if not started:
        return None
    live = any(p.ended_at is None for p in points if p.started_at is not None)
    end = time.time() if live else max(p.ended_at or 0.0 for p in points)
    return max(0.0, end - min(started))


JOB_COLUMNS = ("ID", "NAME", "STATE", "TARGET", "ELAPSED", "HOURS", "LAST METRIC", "AGE")
# which columns stay as the terminal narrows: the id always, whole; then the state, the name...
JOB_PRIORITY = ("ID", "STATE", "NAME", "TARGET", "ELAPSED", "AGE", "LAST METRIC", "HOURS")
GAP = 2


def fit_columns(headers: tuple[str, ...], rows: list[list[str]], width: int,
                priority: tuple[str, ...], shrink: str | None = None) -> list[str]:
    """The columns that fit `width` whole, in priority order (the first always kept); `shrink`
    may be cut to fit once every other chosen column is whole. Rich would otherwise cut or drop
    any column, the id included, when a table is wider than the terminal."""
    natural = {h: max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)}
    chosen, used = [], 0
    for h in priority:
        need = (natural[h] if h != shrink else min(natural[h], 8)) + GAP  # every column pads right
        if chosen and used + need > width:
            continue
        chosen.append(h)
        used += need
    return [h for h in headers if h in chosen]


def jobs_table(jobs: list, width: int | None = None, groups: dict | None = None) -> Any:
    """The jobs, one line each; short ids are never cut, whatever the width, piped or not.
    The points of a sweep in `groups` (reports.groups_of) fold into one row for their group,
    where its newest point would be: its id, point count, states counted and targets."""
    from rich.table import Table
    from rich.text import Text

    from tui.show.output import console, safe

    now = time.time()
    rows = []
    shown_jobs: list = []
    folded: set[str] = set()
    for job in jobs:
        if groups and job.group_id in groups:
            if job.group_id in folded:
                continue
            folded.add(job.group_id)
            group, points = groups[job.group_id]
            counts: dict[str, int] = {}
            for p in points:
                counts[p.state.value] = counts.get(p.state.value, 0) + 1
            summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            hours = group.spec.get("hours")
            rows.append([group.short_id, safe(f"{group.name} (sweep of {len(points)})", single_line=True),
                         summary, safe(",".join(group.spec.get("targets", {})) or "-", single_line=True),
                         duration(sweep_elapsed(points)), f"{hours:g}" if hours else "-", "", duration(now - group.created_at) + " ago"])
            shown_jobs.append(Text(summary))
            continue
        metric = sorted(((k, v) for k, v in job.last_metric.items() if not k.startswith("_")),
                        key=lambda kv: kv[0].startswith("gpu/"))  # the job's own before the samples
        last = ", ".join(f"{safe(k, single_line=True)}={v:.4g}" for k, v in metric[:2])
        hours = job.request.get("hours")
        rows.append([job.short_id, safe(job.name, single_line=True), state_text(job.state.value).plain,
                     safe(job.provider or "-", single_line=True), duration(elapsed(job)),
                     f"{hours:g}" if hours else "-", last, duration(now - job.created_at) + " ago"])
        shown_jobs.append(job)
    shown = fit_columns(JOB_COLUMNS, rows, width or console().width, JOB_PRIORITY, shrink="NAME")
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP, 0, 0))
    for col in shown:
        table.add_column(col, no_wrap=True, overflow="ellipsis",
                         min_width=8 if col == "ID" else None)
    index = [JOB_COLUMNS.index(c) for c in shown]
    for job, row in zip(shown_jobs, rows):
        cells: list[object] = [row[i] for i in index]
        if "STATE" in shown:
            cells[shown.index("STATE")] = job if isinstance(job, Text) else state_text(job.state.value)
        _row(table, *cells)
    return table


def status_panel(job, events: list, metrics: dict, verbose: bool = False,
                 usage: dict | None = None, checkpoint: dict | None = None,
                 mirroring: str | None = None, journey: dict | None = None) -> Any:
    """One job; `verbose` adds every event (not the last 12), every setting, the plan and the
    bundle report. `usage` is `estimate_and_actual`: hours and cost, expected and taken;
    `checkpoint` the last complete checkpoint at home (core.packaging.checkpoints.summary);
    `mirroring` why checkpoints stopped coming home (a full disk at home), if they did."""
    from rich.table import Table

    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    state = state_text(job.state.value)
    rows: list[tuple[str, object]] = [
        ("job", f"{job.short_id}  ({job.id})"),
        ("name", job.name),
        ("state", markup("{state}  {reason}", state=state, reason=job.reason) if job.reason else state),
        ("target", f"{job.provider or '-'}  ({job.plan.get('gpu', '-')})"),
        ("command", joined(job.plan.get("command", []))),
        ("hours", f"{job.request.get('hours') or '-'} estimated, {duration(elapsed(job))} elapsed"),
        ("attempt", str(job.attempt)),
        ("bundle", f"{job.bundle.get('files', 0)} files, {human_bytes(job.bundle.get('bytes', 0))}"),
        ("outputs", job.outputs_dir if not job.handle.get("outputs_kept") else  # runs/<id>/ refused
         f"{job.handle['outputs_kept'].get('dir')}  (kept at home: {job.handle['outputs_kept'].get('why')})"),
        ("digest", job.digest or "-"),
    ]
    if usage:
        rows.append(("usage", took_text(usage)))
    if job.exit_code is not None:
        rows.append(("exit code", str(job.exit_code)))
    if checkpoint:
        rows.append(("checkpoint", f"{checkpoint_text(checkpoint)} from {checkpoint.get('target') or '-'} "
                                   f"(attempt {checkpoint.get('attempt') or '-'})"))
    if mirroring:
        rows.append(("mirroring", mirroring))
    from core.jobs.states import TERMINAL

    ended = (job.handle.get("ended") or {}) if job.state in TERMINAL else {}
    if ended.get("missing_artifacts"):  # declared outputs the job did not write (core.engine.jobreport)
        rows.append(("missing", f"{', '.join(ended['missing_artifacts'])}: declared, not written"))
    if ended.get("no_metrics"):
        rows.append(("metrics", "no metrics were tracked"))
    rows += tracked_rows(job, None if verbose else CONFIG_SHOWN)
    for k, v in rows:
        _row(info, k, v)
    parts: list[Any] = [info]
    if metrics:
        parts += ["", metrics_table(metrics)]
    ev = Table(box=None, header_style="bold", pad_edge=False, title=None)
    ev.add_column("TIME", no_wrap=True)
    ev.add_column("CHANGE", no_wrap=True)
    ev.add_column("REASON")
    for e in events if verbose else events[-12:]:
        change = f"{e.src or ''} -> {e.dst}" if e.dst else "note"
        _row(ev, time.strftime("%H:%M:%S", time.localtime(e.ts)), change, e.reason)
    parts += ["", ev]
    if journey is not None:  # --verbose: each attempt, where and why it moved (reports.journey)
        parts += ["", markup("[bold]journey[/]"), journey_panel(journey, when=local_time)]
    if verbose:
        parts += ["", markup("[bold]plan[/]"), plan_panel(job.plan, state=job.state.value), "",
                  markup("[bold]bundle[/]"),
                  bundle_panel(job.bundle)]
    return _group(*parts)


def journey_panel(doc: dict, *, when: Any = None) -> Any:
    """A job's journey (core.engine.reports.journey): a failed job's error and its log's last
    lines first, then one row per attempt: where, when, how long, from which target and
    checkpoint it started, how it ended and why. `when` formats a time (the dashboard's
    local clock); the document's ISO strings are shown as they are without it."""
    from rich.table import Table

    parts: list[Any] = []
    if doc.get("error"):
        parts.append(markup("[bold red]error: [/]{error}", error=doc["error"]))
    tail = [_dim_line(line) for line in doc.get("error_tail") or []]
    if tail:  # after the attempts: on 24 rows the attempts stay on the first screen
        tail.insert(0, markup("[dim]the end of its log:[/]"))
    attempts = doc.get("attempts") or []
    if not attempts:
        parts.append(markup("[dim]no attempt yet: it has not been placed on a target[/]"))
        return _group(*parts, *tail)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("#", "TARGET", "STARTED", "RAN", "FROM", "ENDED"):
        table.add_column(col, no_wrap=col in ("#", "TARGET", "STARTED", "RAN"))
    fmt = when or (lambda t: t or "-")
    for a in attempts:
        start, end = a.get("start"), a.get("end")
        ran = (end - start) if isinstance(start, (int, float)) and isinstance(end, (int, float)) else None
        came = []
        if a.get("from_target"):
            came.append(f"moved from {a['from_target']}")
        ck = a.get("checkpoint")
        if ck:
            came.append(f"checkpoint {ck.get('generation', '?')}"
                        + (f" ({human_bytes(ck['bytes'])})" if ck.get("bytes") else ""))
        elif a.get("from_target"):
            came.append("from the beginning")
        ended = a.get("ended")
        end_text = (markup("{how}: {why}", how=state_text(ended) if ended != "moved" else _moved(), why=a.get("why") or "")
                    if ended else markup("[green]still on it[/]"))
        _row(table, str(a.get("attempt")), a.get("target") or "-", fmt(start),
             duration(ran) if ran is not None else "-", ", ".join(came) or "-", end_text)
    parts.append(table)
    return _group(*parts, *tail)


def _moved() -> Any:
    from rich.text import Text

    return Text("moved", style="magenta")


def _dim_line(line: str) -> Any:
    """A line of the job's own log, dim and filtered."""
    from rich.text import Text

    from tui.show.output import safe

    return Text("  " + safe(line, single_line=True), style="dim")


def checkpoint_text(info: dict) -> str:
    """"checkpoint 3, 1.2 MB, 40 s old": the last checkpoint at home."""
    from core.packaging.checkpoints import describe

    return describe(info)


CONFIG_SHOWN = 20  # settings listed by `gpu status` without --verbose


def tracked_rows(job, limit: int | None = None) -> list[tuple[str, str]]:
    """What the job's tracking reported: ("final", "acc=0.9, loss=0.1"), ("config", ...);
    at most `limit` settings (then how many more)."""
    rows = []
    if job.final:
        rows.append(("final", ", ".join(f"{k}={v:.6g}" for k, v in sorted(job.final.items()))))
    if job.config:
        items = sorted(job.config.items())
        shown = items if limit is None else items[:limit]
        more = f" (+{len(items) - len(shown)} more: --verbose)" if len(shown) < len(items) else ""
        rows.append(("config", ", ".join(f"{k}={_setting(v)}" for k, v in shown) + more))
    return rows


def _setting(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_setting(v) for v in value) + "]"
    return str(value)


def _hours(h: float | None) -> str:
    if h is None:
        return "-"
    return f"{h:.2f}" if h >= 0.01 or h == 0 else f"{h:.2g}"


def took_text(usage: dict) -> str:
    """"took 0.02 h of 0.5 h estimated, cost $0.00 of $0.00": `estimate_and_actual` as a line."""
    est, act = usage["estimate"], usage["actual"]
    est_h = "no" if est["hours"] is None else f"{est['hours']:g} h"
    est_cost = "-" if est["cost"] is None else f"${est['cost']:.2f}"
    return (f"took {_hours(act['hours'])} h of {est_h} estimated, "
            f"cost ${act['cost']:.2f} of {est_cost}")


def metrics_table(summary: dict) -> Any:
    """A table of `Store.metrics_summary()`: last, min, max, points and last step per key."""
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("METRIC", "LAST", "MIN", "MAX", "POINTS", "LAST STEP"):
        table.add_column(col, no_wrap=True, justify="left" if col == "METRIC" else "right")
    for key, m in sorted(summary.items()):
        _row(table, key, f"{m['last']:.6g}", f"{m['min']:.6g}", f"{m['max']:.6g}",
             str(m["points"]), str(m["last_step"] if m["last_step"] is not None else "-"))
    return table


def bundle_panel(summary: dict, files: list[str] | None = None) -> Any:
    from rich.table import Table

    parts: list[Any] = [markup("[bold]{files} [/]files, [bold]{size} [/]will ship",
                               files=summary["files"], size=human_bytes(summary["bytes"]))]
    if files:
        parts += [f"  {f}" for f in files]
    left = summary.get("left_out") or []
    if left:
        table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
        table.add_column("LEFT OUT", no_wrap=True)
        table.add_column("FILES", justify="right")
        table.add_column("SIZE", justify="right")
        table.add_column("WHY")
        for item in left:
            _row(table, item["path"], str(item.get("files", "")),
                 human_bytes(item["bytes"]) if "bytes" in item else "",
                 item["reason"] + (" (partly counted)" if item.get("partial") else ""))
        parts += ["", table]
    if summary.get("hint"):
        parts.append(markup("[bold]hint: [/]{hint}", hint=summary["hint"]))
    for w in summary.get("warnings") or []:
        parts.append(markup("[yellow]warning:[/] {w}", w=w))
    return _group(*parts)


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return "free" if value == 0 else f"${value:.2f}"


def plan_panel(plan: dict, bundle: dict | None = None, state: str | None = None) -> Any:
    """A plan; `state` (a job's) says whether its holds still wait for a person or were answered."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", min_width=8, no_wrap=True)
    grid.add_column()
    hours = plan.get("hours")
    rows: list[tuple[str, object]] = [
        ("target", f"{plan.get('target')}  ({plan.get('gpu')})"),
        ("why", joined(plan.get("reasons", []), "; ")),
        ("command", joined(plan.get("command", []))),
        ("hours", f"{hours:g}" if hours else "no estimate given"),
        ("price", f"{money(plan.get('estimated_price'))}"
                  + (f" (${plan.get('price_per_hour'):.2f}/hour)" if plan.get("price_per_hour") else "")),
    ]
    if plan.get("image"):  # the Modal image's base and extra packages (bound by the digest)
        rows.append(("image", joined([plan["image"]])))
    if plan.get("packages"):
        rows.append(("packages", joined(plan["packages"], ", ")))
    if plan.get("secrets"):
        rows.append(("secrets", joined(plan["secrets"], ", ")))
    if plan.get("not_secret"):  # env a person vouched for: its values are in the env row
        rows.append(("not secret", joined(plan["not_secret"], ", ")))
    if plan.get("env"):
        rows.append(("env", joined((f"{joined([k])}={joined([v])}" for k, v in plan["env"].items()), ", ")))
    if plan.get("data"):
        rows.append(("data", joined((f"{joined([k])} ({joined([v[:12]])})" for k, v in plan["data"].items()), ", ")))
    if plan.get("data_sources"):
        rows.append(("from", joined((f"{joined([k])}: {joined([v])}" for k, v in plan["data_sources"].items()), ", ")))
    if (plan.get("environment") or {}).get("text"):  # what installing its dependencies downloads
        rows.append(("environment", joined([plan["environment"]["text"].removeprefix("environment: ")])))
    if bundle:
        rows.append(("bundle", f"{bundle.get('files', 0)} files, {human_bytes(bundle.get('bytes', 0))}"
                               + (f", {len(bundle['left_out'])} left out" if bundle.get("left_out") else "")))
    rows.append(("digest", plan.get("digest", "-")))
    for k, v in rows:
        _row(grid, k, v)
    parts: list[Any] = [grid]
    for name, why in (plan.get("passed_over") or {}).items():
        parts.append(markup("[dim]passed over {name}: {why}[/]", name=name, why=why))
    holds = plan.get("holds") or []
    if holds and state not in (None, "awaiting_approval"):
        answer = "denied" if state == "denied" else "approved"
        parts.append(markup("[dim]was held for a person's approval, and {answer}:[/]", answer=answer))
        parts += [markup("  [dim]• [/]{reason}", reason=h["reason"]) for h in holds]
    elif holds:
        parts.append(markup("[bold yellow]needs a person's approval:[/]"))
        parts += [markup("  [yellow]• [/]{reason}", reason=h["reason"]) for h in holds]
    else:
        parts.append(markup("[green]no rule holds it: it runs without approval[/]"))
    return _group(*parts)


def elsewhere_panel(doc: dict) -> Any:
    """Beside a plan: the cheapest current offer for the job's GPU and VRAM across the user's
    GPU cloud accounts, what the job would cost there, and how old each account's figures are.
    Informational: it is not part of the plan or its digest."""
    best = doc.get("cheapest")
    parts: list[Any] = []
    if best:
        hours = best.get("hours")
        cost = (markup(", about [bold]${cost:.2f}[/] for {hours:g} h", cost=best["estimated_cost"], hours=hours)
                if best.get("estimated_cost") is not None else markup(" [dim](no hours given: no estimate)[/]"))
        parts.append(markup("[bold]elsewhere now[/]  {gpu}{vram} on {provider}{where} at ${price:.2f}/hour",
                            gpu=best["gpu"], vram=f" {best['vram_gb']:g} GB" if best.get("vram_gb") else "",
                            provider=best["provider"], where=f" ({best['region']})" if best.get("region") else "",
                            price=best["price_per_hour"]) + cost
                     + markup("  [dim]read {age:.0f} s ago[/]", age=best.get("age_s") or 0))
    else:
        req = doc.get("request") or {}
        asked = joined([x for x in (req.get("gpu"), f"{req['vram_gb']:g} GB" if req.get("vram_gb") else None) if x]) or "a GPU"
        parts.append(markup("[bold]elsewhere now[/]  no offer in your accounts matches {asked}", asked=asked))
    for a in doc.get("accounts") or []:
        if a.get("state") in ("stale", "failed", "no_key"):
            seen = f"last read {a['age_s']:.0f} s ago" if a.get("age_s") is not None else "nothing known"
            parts.append(markup("  [yellow]{title}: {state}[/] ({seen}): {error}", title=a.get("title") or a["provider"],
                                state=a["state"], seen=seen, error=a.get("error") or ""))
    return _group(*parts)


# target kinds whose provider keeps a quota: with none read, it is not known, never "unlimited"
QUOTA_KINDS = ("kaggle",)


def quota_unknown(info: Any) -> str:
    """The QUOTA LEFT cell when no quota was read: a Kaggle account has weekly hours that its
    probe (which failed, or has not run) reads; a machine of yours has no quota."""
    return "unknown" if info.kind in QUOTA_KINDS else "unlimited"


def targets_table(infos: list) -> Any:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("TARGET", "KIND", "GPU", "VRAM", "STATUS", "QUOTA LEFT", "PRICE/H", "RUNNING"):
        table.add_column(col, no_wrap=True)
    for i in infos:
        quota = []
        if i.quota_hours_left is not None:
            quota.append(f"{i.quota_hours_left:.1f} h/week")
        if i.credits_left is not None:
            quota.append(f"${i.credits_left:.2f}")
        status = (markup("[green]available[/]") if i.available
                  else markup("[red]{why}[/]", why=i.why_unavailable or "unavailable"))
        _row(table, i.name, i.kind, i.gpu_label, f"{i.vram_gb:g} GB" if i.gpus else "-",
             status, ", ".join(quota) or quota_unknown(i), money(i.price_per_hour), f"{i.running}/{i.max_jobs}")
    notes = [_price_line(i) for i in infos if i.offer_prices]
    notes += [_sandbox_line(i) for i in infos if i.kind in ("ssh", "slurm", "pbs") and i.unsandboxed_why]
    return _group(table, *notes) if notes else table


def _sandbox_line(info: Any) -> Any:
    """A host without a sandbox: what that means, and whether agents' jobs wait for a person."""
    from core.planning.policy import OPEN_KEY, host_open_to_agents

    agents = (f"agents' jobs run there without you ({OPEN_KEY}: true)" if host_open_to_agents(info)
              else f"an agent's job there waits for you (targets.{info.name}.{OPEN_KEY}: true lets it run)")
    return markup("[yellow]{name}:[/] {why}; {agents}", name=info.name, why=info.unsandboxed_why, agents=agents)


def _price_line(info: Any) -> Any:
    """A target that prices each GPU on its own (Modal): the table it prices by, dated."""
    prices = (info.details or {}).get("prices") or {}
    unverified = set(prices.get("unverified") or [])
    listed = ", ".join(f"{gpu}{'*' * (gpu in unverified)} ${price:.2f}" for gpu, price in info.offer_prices.items())
    source = f" ({prices['source']}, as of {prices['as_of']})" if prices.get("source") else ""
    mark = "; * not re-verified" if unverified else ""
    return markup("[dim]{name} per hour{source}{mark}:[/] {listed}", name=info.name, source=source,
                  mark=mark, listed=listed)
