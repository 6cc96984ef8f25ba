"""What a job's row in the dashboard's table says, cell by cell: the columns at each width,
a state's colour, the headline metric or a failure's error in LAST, a sweep folded into one row.

Kept apart from the table widget (tui/dash/jobs_table.py) because these are plain functions of
a Job and the clock: tests and the narrow-screen layout (COMPACT_BELOW, read by the app and the
help screen too) use them without a running app, and the table only turns them into lines.
"""

from __future__ import annotations

from rich.text import Text

from core.jobs.states import State
from tui.show.output import safe
from tui.show.render import STATE_STYLE, duration, money

JOB_COLUMNS = (("id", "ID", 8), ("name", "NAME", 14), ("state", "STATE", 16), ("target", "TARGET", 9),
               ("gpu", "GPU", 11), ("time", "ELAPSED/EST", 11), ("cost", "COST", 7), ("metric", "LAST", 14))
# Below this width the table drops GPU and COST and narrows NAME, so 80 columns fit.
COMPACT_BELOW = 110
COMPACT_COLUMNS = (("id", "ID", 8), ("name", "NAME", 11), ("state", "STATE", 16), ("target", "TARGET", 8),
                   ("time", "ELAPSED/EST", 11), ("metric", "LAST", 12))


def state_cell(state: State) -> Text:
    if state == State.AWAITING_APPROVAL:
        # plain text: the SVG font has no glyph for ⏸ (it drew a box)
        return Text("needs approval", style="bold black on yellow")
    return Text(state.value, style=STATE_STYLE.get(state.value, ""))


LAST_WIDTH = min(w for key, _, w in COMPACT_COLUMNS if key == "metric")


def last_metric_text(last: dict, width: int = LAST_WIDTH) -> str:
    """The job's headline metric (a loss first, gpu-router's own gpu/util and gpu/mem_gb
    samples last) for the LAST column: `loss=0.1234` when it fits, else the value first
    (`0.1234 train/lo…`), so the number is never the part that is cut."""
    items = [(k, v) for k, v in last.items() if not k.startswith("_")]
    items.sort(key=lambda kv: (0 if "loss" in kv[0] else 2 if kv[0].startswith("gpu/") else 1, kv[0]))
    if not items:
        return ""
    k, v = items[0]
    value = f"{v:.4g}"
    text = f"{k}={value}"
    return safe(text if len(text) <= width else f"{value} {k}")


def failure_text(job, width: int = LAST_WIDTH) -> str:
    """A failed job's own error for its row's LAST column, in place of its last metric: what
    a person scanning the table needs of it (`ValueError: b…`); the whole reason is in the
    detail and the log pane's title. The status ("exited with status 1: ") is left out."""
    reason = safe(job.reason or "", single_line=True)
    if reason.startswith("exited with status ") and ": " in reason:
        reason = reason.split(": ", 1)[1]
    return reason if len(reason) <= width else reason[:width - 1] + "…"


def job_cells(job, now: float) -> dict[str, object]:
    hours = job.plan.get("hours")
    elapsed = None
    if job.started_at:
        elapsed = (job.ended_at or now) - job.started_at
    spent = (elapsed or 0) / 3600 * float(job.plan.get("price_per_hour") or 0)
    return {
        "id": job.short_id,  # ours (hex), and the sort key: a plain str
        "name": Text(safe(job.name)),
        "state": state_cell(job.state),
        "target": Text(safe(job.provider or "-")),
        "gpu": Text(safe(str(job.plan.get("gpu") or "-"))),
        "time": f"{duration(elapsed)}/{f'{hours:g}h' if hours else '-'}",
        "cost": money(spent) if job.plan.get("price_per_hour") else "free",
        "metric": (Text(failure_text(job), style="red") if job.state == State.FAILED and job.reason
                   else Text(last_metric_text(job.last_metric))),
    }


def group_cells(head, points: list, now: float) -> dict[str, object]:
    """A sweep folded into one row (drawn where its newest point would be): its name and point
    count, its points counted by state, their targets, their cost so far, the best loss."""
    cells = job_cells(head, now)
    counts: dict[str, int] = {}
    spent = 0.0
    best = None
    for job in points:
        counts[job.state.value] = counts.get(job.state.value, 0) + 1
        if job.started_at:
            spent += ((job.ended_at or now) - job.started_at) / 3600 * float(job.plan.get("price_per_hour") or 0)
        loss = job.last_metric.get("loss")
        if isinstance(loss, (int, float)) and (best is None or loss < best):
            best = loss
    base = head.name.split("[", 1)[0] or head.name
    order = [s.value for s in State]
    summary = " ".join(f"{n} {st.replace('awaiting_approval', 'held')}"
                       for st, n in sorted(counts.items(), key=lambda kv: order.index(kv[0])))
    held = counts.get(State.AWAITING_APPROVAL.value)
    cells.update(id=head.group_id[:8] if head.group_id else cells["id"],  # the sweep's own id, as the CLI's
                 name=Text(safe(f"▸{len(points)}× {base}")),
                 state=Text(summary, style="bold yellow" if held else ""),
                 target=Text(safe(",".join(sorted({j.provider or "-" for j in points})))),
                 time="sweep", cost=money(spent) if spent else cells["cost"],
                 metric=Text(f"best={best:.4g}" if best is not None else ""))  # of loss
    return cells
