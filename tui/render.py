"""Human output of the CLI: rich tables and panels, imported only when a human reads."""

from __future__ import annotations

import time
from typing import Any

from core.display.sanitize import markup_safe, printable

STATE_STYLE = {
    "queued": "dim", "routing": "cyan", "awaiting_approval": "bold yellow",
    "provisioning": "cyan", "running": "bold green", "checkpointing": "green",
    "migrating": "magenta", "done": "green", "failed": "bold red", "cancelled": "dim red",
    "denied": "red",
}


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def state_text(state: str) -> str:
    mark = "⏸ " if state == "awaiting_approval" else ""
    return f"[{STATE_STYLE.get(state, '')}]{mark}{state}[/]"


def _label_grid(rows: list[tuple[str, Any]], **columns: Any) -> Any:
    """A two-column grid of label and value; a value is plain text unless it is a rich Text.

    Values here are paths, GPU names and commands that come from users and targets: one
    folder named `proj [/x]` would otherwise be read as markup and stop the whole command.
    """
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", **columns)
    grid.add_column()
    for label, value in rows:
        grid.add_row(label, value if isinstance(value, Text) else Text(printable(str(value))))
    return grid


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


def elapsed(job) -> float | None:
    if job.started_at is None:
        return None
    return (job.ended_at or time.time()) - job.started_at


def jobs_table(jobs: list) -> Any:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("ID", "NAME", "STATE", "TARGET", "ELAPSED", "HOURS", "LAST METRIC", "AGE"):
        table.add_column(col, no_wrap=True)
    now = time.time()
    for job in jobs:
        metric = {k: v for k, v in job.last_metric.items() if not k.startswith("_")}
        last = ", ".join(f"{k}={v:.4g}" for k, v in list(metric.items())[:2]) if metric else ""
        hours = job.request.get("hours")
        table.add_row(job.short_id, markup_safe(job.name), state_text(job.state.value),
                      markup_safe(job.provider or "-"), duration(elapsed(job)),
                      f"{hours:g}" if hours else "-", markup_safe(last),
                      duration(now - job.created_at) + " ago")
    return table


def status_panel(job, events: list, metrics: dict) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    state = Text.from_markup(state_text(job.state.value))
    if job.reason:
        state.append("  " + printable(job.reason))
    rows: list[tuple[str, Any]] = [
        ("job", f"{job.short_id}  ({job.id})"),
        ("name", job.name),
        ("state", state),
        ("target", f"{job.provider or '-'}  ({job.plan.get('gpu', '-')})"),
        ("command", " ".join(job.plan.get("command", []))),
        ("hours", f"{job.request.get('hours') or '-'} estimated, {duration(elapsed(job))} elapsed"),
        ("attempt", str(job.attempt)),
        ("bundle", f"{job.bundle.get('files', 0)} files, {human_bytes(job.bundle.get('bytes', 0))}"),
        ("outputs", job.outputs_dir),
        ("digest", job.digest or "-"),
    ]
    if job.exit_code is not None:
        rows.append(("exit code", str(job.exit_code)))
    parts: list[Any] = [_label_grid(rows)]
    if metrics:
        parts.append("")
        parts.append(metrics_table(metrics))
    ev = Table(box=None, header_style="bold", pad_edge=False, title=None)
    ev.add_column("TIME", no_wrap=True)
    ev.add_column("CHANGE", no_wrap=True)
    ev.add_column("REASON")
    for e in events[-12:]:
        change = f"{e.src or ''} -> {e.dst}" if e.dst else "note"
        ev.add_row(time.strftime("%H:%M:%S", time.localtime(e.ts)), change, markup_safe(e.reason))
    parts += ["", ev]
    return Group(*parts)


def metrics_table(summary: dict) -> Any:
    """A table of `Store.metrics_summary()`: last, min, max, points and last step per key."""
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("METRIC", "LAST", "MIN", "MAX", "POINTS", "LAST STEP"):
        table.add_column(col, no_wrap=True, justify="left" if col == "METRIC" else "right")
    for key, m in sorted(summary.items()):
        table.add_row(markup_safe(key), f"{m['last']:.6g}", f"{m['min']:.6g}", f"{m['max']:.6g}",
                      str(m["points"]), str(m["last_step"] if m["last_step"] is not None else "-"))
    return table


def bundle_panel(summary: dict, files: list[str] | None = None) -> Any:
    from rich.console import Group
    from rich.table import Table

    parts: list[Any] = [f"[bold]{summary['files']}[/] files, [bold]{human_bytes(summary['bytes'])}[/] will ship"]
    if files:
        parts += [markup_safe(f"  {f}") for f in files]
    left = summary.get("left_out") or []
    if left:
        table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
        table.add_column("LEFT OUT", no_wrap=True)
        table.add_column("FILES", justify="right")
        table.add_column("SIZE", justify="right")
        table.add_column("WHY")
        for item in left:
            table.add_row(markup_safe(item["path"]), str(item.get("files", "")),
                          human_bytes(item["bytes"]) if "bytes" in item else "",
                          markup_safe(item["reason"]) + (" (partly counted)" if item.get("partial") else ""))
        parts += ["", table, f"[dim]hint: {markup_safe(summary.get('hint', ''))}[/]"]
    for w in summary.get("warnings") or []:
        parts.append(f"[yellow]warning:[/] {markup_safe(w)}")
    return Group(*parts)


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return "free" if value == 0 else f"${value:.2f}"


def plan_panel(plan: dict, bundle: dict | None = None) -> Any:
    from rich.console import Group

    hours = plan.get("hours")
    rows: list[tuple[str, Any]] = [
        ("target", f"{plan.get('target')}  ({plan.get('gpu')})"),
        ("why", "; ".join(plan.get("reasons", []))),
        ("command", " ".join(plan.get("command", []))),
        ("hours", f"{hours:g}" if hours else "no estimate given"),
        ("price", f"{money(plan.get('estimated_price'))}"
                  + (f" (${plan.get('price_per_hour'):.2f}/hour)" if plan.get("price_per_hour") else "")),
    ]
    if plan.get("secrets"):
        rows.append(("secrets", ", ".join(plan["secrets"])))
    if plan.get("env"):
        rows.append(("env", ", ".join(f"{k}={v}" for k, v in plan["env"].items())))
    if plan.get("data"):
        rows.append(("data", ", ".join(f"{k} ({v[:12]})" for k, v in plan["data"].items())))
    if bundle:
        rows.append(("bundle", f"{bundle.get('files', 0)} files, {human_bytes(bundle.get('bytes', 0))}"
                               + (f", {len(bundle['left_out'])} left out" if bundle.get("left_out") else "")))
    rows.append(("digest", plan.get("digest", "-")))
    parts: list[Any] = [_label_grid(rows, min_width=8, no_wrap=True)]
    for name, why in (plan.get("passed_over") or {}).items():
        parts.append(f"[dim]passed over {markup_safe(name)}: {markup_safe(why)}[/]")
    holds = plan.get("holds") or []
    if holds:
        parts.append("[bold yellow]needs a person's approval:[/]")
        parts += [f"  [yellow]•[/] {markup_safe(h['reason'])}" for h in holds]
    else:
        parts.append("[green]no rule holds it: it runs without approval[/]")
    return Group(*parts)


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
        status = "[green]available[/]" if i.available else f"[red]{markup_safe(i.why_unavailable or 'unavailable')}[/]"
        table.add_row(markup_safe(i.name), markup_safe(i.kind), markup_safe(i.gpu_label), f"{i.vram_gb:g} GB" if i.gpus else "-",
                      status, ", ".join(quota) or "unlimited", money(i.price_per_hour),
                      f"{i.running}/{i.max_jobs}")
    return table
