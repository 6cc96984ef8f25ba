"""The dashboard's targets pane: each target's GPU, status, quota, price and jobs, then each
GPU cloud account's cheapest offer, balance and a few of the user's instances there.

Its own module because everything in it is provider text read by a worker (the app's
load_targets, tui/dash/feed.py): each cell is filtered here, in one place.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.show.output import markup, renderable, safe
from tui.show.render import duration, money


class TargetsTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "none"
        self.can_focus = False
        for key, label in (("name", "TARGET"), ("kind", "KIND"), ("gpu", "GPU"), ("status", "STATUS"),
                           ("quota", "QUOTA"), ("price", "$/H"), ("jobs", "JOBS")):
            self.add_column(label, key=key)

    ACCOUNT_INSTANCES = 2  # instance rows shown per account: the pane is a few rows high

    def show(self, infos: list, accounts: list | None = None, now: float | None = None) -> None:
        self.clear()
        for i in infos:
            quota = []
            if i.quota_hours_left is not None:
                quota.append(f"{i.quota_hours_left:.1f}h")
            if i.credits_left is not None:
                quota.append(f"${i.credits_left:.0f}")
            gpu = i.gpu_label + (f" {i.vram_gb:g}G" if i.gpus else "")
            status = Text("ok", style="green") if i.available else Text(safe(i.why_unavailable or "off"), style="red")
            self.add_row(Text(safe(i.name)), renderable(i.kind), Text(safe(gpu)), status,
                         " ".join(quota) or "-", money(i.price_per_hour),
                         markup("{running}/{most}", running=i.running, most=i.max_jobs), key=i.name)
        for a in accounts or []:
            self._account_rows(a)

    def _account_rows(self, a: dict) -> None:
        """One row per GPU cloud account (its cheapest offer now, its balance, how many of the
        user's instances run there), then a few of those instances. All of it is provider text:
        each cell is filtered."""
        offers = sorted((o for o in a.get("offers") or [] if o.get("available") != 0),
                        key=lambda o: o["price_per_hour"])
        best = offers[0] if offers else None
        gpu = (f"{best['gpu']}" + (f" {best['vram_gb']:g}G" if best.get("vram_gb") else "")) if best else "-"
        state = a.get("state")
        if state in ("fresh", "cached"):
            status = Text("ok", style="green")
        elif state == "stale":
            status = Text(safe(f"stale {duration(a.get('age_s'))}", single_line=True), style="yellow")
        else:
            status = Text(safe(a.get("error") or state or "?", single_line=True), style="red")
        bal = (a.get("account") or {}).get("balance")
        instances = a.get("instances") or []
        self.add_row(Text(safe(a["provider"], single_line=True)), "account", Text(safe(gpu, single_line=True)),
                     status, Text(f"${bal:.0f}") if isinstance(bal, (int, float)) else "-",
                     money(best["price_per_hour"]) if best else "-", Text(f"{len(instances)} run"),
                     key=f"account:{a['provider']}")
        for inst in instances[: self.ACCOUNT_INSTANCES]:
            cost = inst.get("cost_so_far")
            self.add_row(Text(safe(f" └ {inst.get('name') or inst['id']}", single_line=True)), "instance",
                         Text(safe(inst.get("gpu") or "?", single_line=True)),
                         Text(safe(inst.get("status") or "?", single_line=True)),
                         Text(f"{money(cost)} so far") if cost is not None else "-",
                         money(inst.get("price_per_hour")), "",
                         key=f"instance:{a['provider']}:{inst['id']}")
