"""The approval rules: which plans wait for a person, and what the agent tells them.

One place for every rule. The rules come from the user's config (`userconfig.Rules`), which
can only make them stricter; nothing in a project can loosen them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from core.config.user import Rules
from core.display.sanitize import printable
from core.planning.usage import AgentDay
from core.providers.base import CONTAINER_NOTE, TargetInfo


@dataclass
class Hold:
    rule: str  # agent_hours | agent_money | agent_day | sandbox | secrets | quota | budget_job | budget_week | overrun | everything
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def rule_hours(hours: float | None, smoke: bool, rules: Rules) -> float | None:
    """The hours the rules judge a job by: its own estimate, or for a smoke run without one the
    smoke cap (rules.smoke_max_minutes), since the supervisor stops it there (core.engine.jobwatch)."""
    if hours is None and smoke:
        return rules.smoke_max_minutes / 60
    return hours


def agent_day_hold(day: AgentDay, hours: float | None, price: float, rules: Rules) -> Hold | None:
    """The agent's rolling day (issue 37): each job under an hour and under agent_max_usd runs
    unasked, so twenty small jobs would be a ten-hour job nobody saw. The agent's work of the
    last 24 hours that went on without a person (`day`, core.planning.usage.agent_day) plus this
    start's estimate (`hours` as the rules judge them, `price` for them) may not pass
    approvals.agent_daily_hours or approvals.agent_daily_usd: the start that would pass either
    is itself held, so what runs unasked in any 24 hours stays within both. Pure: every door
    into running (submit, resume, retry, a sweep's points together) asks it with its own
    estimate. A job with no hours estimate counts none here (agent_hours holds it anyway)."""
    add_h = max(0.0, hours or 0.0)
    add_usd = max(0.0, price or 0.0)
    over_h = day.hours + add_h > rules.agent_daily_hours + 1e-9
    over_usd = day.usd + add_usd > rules.agent_daily_usd + 1e-9
    if not (over_h or over_usd):
        return None
    limits = []
    if over_h:
        limits.append(f"the {rules.agent_daily_hours:g}-hour daily limit (approvals.agent_daily_hours)")
    if over_usd:
        limits.append(f"the ${rules.agent_daily_usd:.2f} daily limit (approvals.agent_daily_usd)")
    return Hold("agent_day", f"the work agents started without you in the last 24 hours comes to "
                             f"{day.hours:g} hours and ${day.usd:.2f} ({day.starts} "
                             f"start{'s' * (day.starts != 1)}), and this one's {add_h:g} hours and "
                             f"${add_usd:.2f} would pass {' and '.join(limits)}")


def evaluate(*, hours: float | None, secrets: list[str], price: float, info: TargetInfo,
             rules: Rules, weekly_spend: float, interactive: bool, smoke: bool = False,
             day: AgentDay | None = None, not_secret: list[str] = ()) -> list[Hold]:
    """`interactive` is core.engine.actor's verdict: a person at a terminal, not merely a tty.
    `hours` is the request's own estimate; a smoke run without one counts as its time cap
    (`rule_hours`), and `price` is what the caller estimated for those hours. `day` is the
    agent's rolling day so far (core.planning.usage.agent_day), judged for an agent's job
    (`agent_day_hold`); None where this is no new start of an agent's work (a migration)."""
    holds: list[Hold] = []
    hours = rule_hours(hours, smoke, rules)
    if rules.approve_everything:
        holds.append(Hold("everything", "your config asks for approval of every job"))
    if not interactive and price > rules.agent_max_usd:
        holds.append(Hold("agent_money", f"it was submitted by an agent and its estimated price "
                                         f"${price:.2f} ({info.price_per_hour:g} $/hour on {info.name}) "
                                         f"is over the ${rules.agent_max_usd:.2f} an agent may spend "
                                         f"without you"))
    if not interactive:
        if hours is None:
            holds.append(Hold("agent_hours", "it was submitted by an agent (not a person at a "
                                             "terminal) and gives no hours estimate"))
        elif hours > rules.agent_max_hours:
            holds.append(Hold("agent_hours", f"it was submitted by an agent (not a person at a "
                                             f"terminal) for {hours:g} hours, over the {rules.agent_max_hours:g}-hour "
                                             f"limit for unattended jobs"))
    if not interactive and day is not None:
        over = agent_day_hold(day, hours, price, rules)
        if over is not None:
            holds.append(over)
    if info.unsandboxed_why and not interactive and info.kind in HOST_KINDS:
        if not host_open_to_agents(info):
            holds.append(Hold("sandbox", f"it was submitted by an agent and would run on {info.name}: "
                                         f"{info.unsandboxed_why} (to let agents' jobs run there without "
                                         f"you, set targets.{info.name}.{OPEN_KEY}: true in your config)"))
    elif info.unsandboxed_why and not interactive:
        holds.append(Hold("sandbox", f"it was submitted by an agent and would run on {info.name} "
                                     f"without a sandbox, where it could reach your keychain and "
                                     f"gpu-router's own files ({info.unsandboxed_why})"))
    if secrets:
        holds.append(Hold("secrets", f"it reads {', '.join(sorted(secrets))} from your keychain"))
    if not_secret and not interactive:  # only a person may say a value is not a secret
        holds.append(Hold("not_secret", f"it was submitted by an agent and passes "
                                        f"{', '.join(sorted(not_secret))} in env as not secret "
                                        f"(not_secret), which the secret check would judge; check "
                                        f"the values in the plan before you approve"))
    if info.quota_hours_left is not None:
        need = hours if hours is not None else None
        if need is None or need > rules.quota_fraction * info.quota_hours_left:
            used = f"{need:g} h" if need is not None else "an unknown number of hours"
            holds.append(Hold("quota", f"it would use {used} of the {info.quota_hours_left:g} h "
                                       f"left this week on {info.name} (the limit without approval "
                                       f"is {rules.quota_fraction:.0%} of what is left)"))
    if info.credits_left is not None and price > rules.quota_fraction * info.credits_left:
        holds.append(Hold("quota", f"it would spend ${price:.2f} of the ${info.credits_left:.2f} "
                                   f"of credits left on {info.name}"))
    if rules.budget_per_job is not None and price > rules.budget_per_job:
        holds.append(Hold("budget_job", f"its estimated price ${price:.2f} is over your per-job "
                                        f"budget of ${rules.budget_per_job:.2f}"))
    if rules.budget_weekly is not None and weekly_spend + price > rules.budget_weekly:
        holds.append(Hold("budget_week", f"with ${weekly_spend:.2f} spent in the last 7 days, its "
                                         f"${price:.2f} would pass your weekly budget of "
                                         f"${rules.budget_weekly:.2f}"))
    return holds


HOST_KINDS = ("ssh", "slurm", "pbs")
OPEN_KEY = "agents_without_sandbox"  # targets.NAME.<this>: true (core/providers/remoteprobe.py)


def host_open_to_agents(info: TargetInfo) -> bool:
    """The user config opened this host, which has no sandbox, to agents' jobs (the probe
    records the key beside its verdict: info.details["sandbox"])."""
    box = (info.details or {}).get("sandbox")
    return isinstance(box, dict) and box.get(OPEN_KEY) is True


# a Slurm/PBS job in a container (apptainer binds the home, and the target's root is bound for
# the job) runs in the container's world, whatever bubblewrap the host has (what the plan says
# of it: core.providers.base.CONTAINER_NOTE, shared with the probe)


def as_run(info: TargetInfo, resources: dict) -> TargetInfo:
    """The target as this job would run there: a job in a container on a host (asked by the
    request, which an agent can write, or by the target's own `container`) is not in the
    sandbox, so the plan says so and the rules judge it as run without one."""
    container = resources.get("container") or (info.details or {}).get("container")
    if info.kind in HOST_KINDS and container and not info.unsandboxed_why:
        return replace(info, unsandboxed_why=CONTAINER_NOTE)
    return info


def plan_notes(info: TargetInfo) -> list[str]:
    """What a plan says about where its job would run, beside why the target was chosen: on a
    host without a sandbox, that a job there runs as the person's account and can reach other
    jobs (and whether agents' jobs run there without a person)."""
    if info.kind not in HOST_KINDS or not info.unsandboxed_why:
        return []
    opened = (f"; agents' jobs run there without you (targets.{info.name}.{OPEN_KEY})"
              if host_open_to_agents(info) else "")
    return [f"{info.name}: {info.unsandboxed_why}{opened}"]


def describe_cost(plan: dict) -> str:
    hours = plan.get("hours")
    price = plan.get("price_per_hour") or 0
    time_part = f"for {hours:g} hours" if hours else "with no time estimate"
    if price == 0:
        money = "free (no charge on this target)"
    else:
        money = f"estimated ${plan.get('estimated_price', 0):.2f} at ${price:.2f}/hour"
    return f"{time_part}, {money}"


def tell_user(job_short_id: str, job_name: str, plan: dict, holds: list[dict]) -> str:
    """One plain paragraph an agent relays word for word, safe to print as it is: each value
    is filtered on its own, so none can hide the words that follow it."""
    command = " ".join(plain_paragraph(a) for a in plan.get("command", []))
    why = "; ".join(plain_paragraph(h["reason"]) for h in holds) or "a rule in your config"
    name, target, gpu = (plain_paragraph(str(v)) for v in (job_name, plan.get("target"), plan.get("gpu")))
    return plain_paragraph(
        f"gpu-router job {job_short_id} ({name}) is waiting for your approval: it would run "
        f"`{command}` on {target} ({gpu}) {describe_cost(plan)}. "
        f"It is held because {why}. To approve it, run `gpu approve {job_short_id}` in a "
        f"terminal or press `a` on it in `gpu dash`; to refuse it, run `gpu deny {job_short_id}`.")


def plain_paragraph(text: str) -> str:
    """Text relayed to a person (by an agent, a chat, a terminal) as it is: the job's args are
    in it, so no escape, control or bidi character survives, and no newline either, which
    would let an argument start a line of its own that reads like gpu-router's. It holds no
    markup of its own; a front that renders markup must show it as plain text."""
    return printable(text, single_line=True)
