"""Every door into running, judged in one place against the job's whole history.

A job reaches a target through several doors: its submit; a resume (`gpu resume`, compute_job
resume, a sweep's resume); a retry on an exit code, or a requeue on the same target
(jobmoves._resume); a migration or a re-route (`replan`); a person's approval; and last the
supervisor's launch (jobsteps._launch), which every other door leads to. The approval rules
(core/planning/policy.py) were once judged at submit, on the latest plan alone, and an agent
walked round every hold: it cancelled a held job and resumed it (it ran, and an overrun's offer
of doubled hours rode along as if approved); a person's no to an overrun hold was stored as a
cancel, which resumes; a held sweep cancelled and resumed ran point by point, each under a limit
its totals were over.

`judge` is the one judgment. Beside the rules on the plan (`service.apply_rules`) it reads the
job's history (`past`: its events, its approvals and denials, its hours used):

- a person's deny is final: every door refuses the job (`denied_refusal`);
- a hold left without a person's yes (the job cancelled while held) stands: the next door holds
  again for that reason, saying when it was held and how it was left;
- the hours a person approved (the request's, then each approval's plan) are the hours a plan
  carries; an offer nobody approved is never carried, and a job that already ran past them
  x overrun_factor is held as an overrun again, offering one estimate more (`offer`);
- a sweep's point is judged with its group's totals: the other live points and, for a sweep's
  resume, every point resumed with it (`group_holds`).

A person's own acts stay theirs: their approval records the hours it grants (approvals.py), and
a resume by a person at a terminal is no yes either: a standing hold waits for `gpu approve`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError
from core.jobs.states import ACTIVE, State
from core.jobs.store import Event, Job, Store

SUBMIT, RESUME, SWEEP_RESUME = "submit", "resume", "sweep resume"
RETRY, REQUEUE, MIGRATION = "retry", "requeue", "migration"
APPROVAL, LAUNCH = "approval", "launch"
DOORS = (SUBMIT, RESUME, SWEEP_RESUME, RETRY, REQUEUE, MIGRATION, APPROVAL, LAUNCH)
NEW_WORK = (SUBMIT, RESUME, SWEEP_RESUME, RETRY)
HELD = State.AWAITING_APPROVAL.value


@dataclass
class Past:
    """What a job's history says to the next door (see `past`)."""
    denied: Event | None = None  # a person's (or anyone's) no: final
    standing: list[dict] = field(default_factory=list)  # the holds of a hold left without a yes
    standing_kind: str | None = None
    held: Event | None = None  # when that hold began
    left: Event | None = None  # how it was left (a cancel), None while it still waits
    original: float | None = None  # one estimate: the request's hours
    granted: float | None = None  # the hours a person approved, or the rules passed at submit
    used: float = 0.0  # hours its attempts ran

    def overran(self, factor: float) -> bool:
        """Past its granted hours x overrun_factor: the watch would stop it at once."""
        return bool(self.granted) and self.used > float(self.granted) * factor


def _kind(data: dict) -> str:
    if data.get("kind"):
        return str(data["kind"])
    if data.get("group"):
        return "group"
    if any(h.get("rule") == "overrun" for h in data.get("holds") or []):
        return "overrun"
    return "rules"


def past(store: Store, job: Job) -> Past:
    """Read the job's events once: its denial, the hold that stands, the hours granted.

    Granted hours start as the request's own estimate (what the submit judged) and become, at
    each approval, the hours of the plan the person approved (`hours` in the approval's data;
    an older overrun approval without it added one estimate, as its offer said)."""
    from core.planning.usage import job_hours

    original = job.plan.get("original_hours") or job.request.get("hours")
    out = Past(original=original, granted=original)
    for e in store.events(job.id):
        data = e.data or {}
        if data.get("decision") == "deny":
            out.denied = e
        if e.dst == HELD:
            out.standing, out.standing_kind = list(data.get("holds") or []), _kind(data)
            out.held, out.left = e, None
        elif e.src == HELD and e.dst:
            if data.get("decision") == "approve":
                if data.get("hours") is not None:
                    out.granted = float(data["hours"])
                elif data.get("hold") == "overrun" and original:
                    out.granted = float(out.granted or 0) + float(original)
                out.standing, out.standing_kind, out.held, out.left = [], None, None, None
            else:  # cancelled, failed: left without a yes, so it stands
                out.left = e
    out.used = job_hours(store, job.id)
    return out


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def denied_refusal(job: Job, denial: Event) -> UserError:
    """A denied job at any door: refused, saying who refused it and when."""
    return UserError(f"job {job.short_id} was denied by {denial.actor} at {_when(denial.ts)}: a "
                     "person's no is final, and this would run what they refused",
                     fix="submit it again; a person then approves or denies the new plan")


@dataclass
class Verdict:
    """What a door decided: the holds a person must say yes to (none: it goes on), of which
    kind (rules | overrun | group), and the plan to hold or run."""
    holds: list[dict]
    kind: str
    plan: dict

    @property
    def held(self) -> bool:
        return bool(self.holds)


def offer(plan: dict, history: Past) -> dict:
    """An overrun's plan: the granted hours and one estimate more, for a person's yes; the price
    is that estimate's. The digest is new, so only an approval of this offer runs it."""
    from core.planning.plan import digest

    original = float(history.original or history.granted or 0)
    out = {**plan, "original_hours": original,
           "hours": round(float(history.granted or original) + original, 6)}
    out["estimated_price"] = round(original * float(out.get("price_per_hour") or 0), 4)
    out["digest"] = digest(out)
    return out


def overrun_hold(history: Past, *, stopped: bool = False) -> dict:
    """The overrun hold's reason, with its history: how far past, and a hold left before."""
    original = float(history.original or history.granted or 0)
    what = ("was stopped after saving a checkpoint" if stopped else
            "a resume would run it past them again")
    text = (f"it ran {history.used:.3g} h, well past its {float(history.granted or 0):g} h estimate, "
            f"and {what}; approving resumes it from its checkpoint for up to {original:g} more hours")
    if not stopped and history.held is not None and history.left is not None:
        text += f" ({_left_text(history)})"
    return {"rule": "overrun", "reason": text}


def _left_text(history: Past) -> str:
    assert history.held is not None and history.left is not None
    how = history.left.dst or "left"
    return (f"it was held for a person at {_when(history.held.ts)} and {how} by "
            f"{history.left.actor} at {_when(history.left.ts)} without a person's yes")


def _standing(history: Past) -> list[dict]:
    """The holds a cancel did not undo, each saying so."""
    out = []
    for h in history.standing:
        if h.get("rule") in ("overrun", "plan_changed", "agent_day"):
            continue  # an overrun is judged afresh from the hours, an agent's day from the day's
            # starts (a full day yesterday is no hold today); a changed plan is new anyway
        out.append({"rule": h.get("rule", "rules"),
                    "reason": f"{h.get('reason', 'a rule in your config')} ({_left_text(history)})"})
    if not out and any(h.get("rule") != "agent_day" for h in history.standing):
        # an overrun the hours no longer show: held all the same
        out.append({"rule": "held_before", "reason": _left_text(history)})
    return out


def _merge(first: list[dict], more: list[dict]) -> list[dict]:
    out = list(first)
    for h in more:
        if not any(x["rule"] == h["rule"] and x["reason"] == h["reason"] for x in out):
            out.append(h)
    return out


def judge(store: Store, job: Job | None, plan: dict, *, door: str, interactive: bool,
          cfg: Any = None, info: Any = None, together: dict[str, dict] | None = None) -> Verdict:
    """The one judgment at a door into running (see the module's docstring).

    `plan` is the plan the door would run: with `info` (the target it was routed to now) it is
    priced and judged by the rules (service.apply_rules) and, for a sweep's point, with its
    group's totals (`together`: the plans of points resumed with it, by job id); without
    `info` (a retry, a requeue, the launch) its rules' verdict stands as recorded, and only the
    history is judged. A denied job raises UserError. The plan in the verdict never carries
    hours a person did not approve."""
    from core.config import user as userconfig
    from core.engine.service import apply_rules
    from core.planning.plan import digest

    if door not in DOORS:
        raise ValueError(f"unknown door {door!r}")
    cfg = cfg or userconfig.load()
    history = past(store, job) if job is not None else Past()
    if job is not None and history.denied is not None:
        raise denied_refusal(job, history.denied)
    plan = dict(plan)
    granted = history.granted
    if granted is not None and plan.get("hours") is not None and float(plan["hours"]) > float(granted) + 1e-9:
        plan["hours"] = granted  # an offer nobody approved is not carried
        plan["digest"] = digest(plan)
    if info is not None:
        # a resume is new work an agent's rolling day counts; a migration goes on with counted work
        apply_rules(plan, store, cfg, info, interactive=interactive, new_start=door in NEW_WORK)
        if job is not None and job.group_id:
            plan["holds"] = _merge(plan["holds"], group_holds(
                store, job.group_id, {**(together or {}), job.id: plan}, {job.id: info}, cfg,
                interactive=interactive))
        holds = list(plan["holds"])
        fresh = holds and (job is None or job.approved_digest != plan["digest"])
        holds = holds if fresh else []
    else:
        holds = []
    if job is None:
        return Verdict(holds, "rules", plan)
    if history.overran(cfg.rules.overrun_factor):
        plan = offer(plan, history)
        return Verdict([overrun_hold(history), *(h for h in holds if h["rule"] != "overrun")],
                       "overrun", plan)
    if history.standing and history.left is not None:
        kind = "group" if door == SWEEP_RESUME and history.standing_kind == "group" else "rules"
        return Verdict(_merge(_standing(history), holds), kind, plan)
    if info is None and plan.get("holds") and job.approved_digest != plan.get("digest"):
        return Verdict(list(plan["holds"]), plan.get("hold_kind", "rules"), plan)
    return Verdict(holds, "rules", plan)


def group_holds(store: Store, group_id: str, plans: dict[str, dict], infos: dict[str, Any], cfg: Any,
                *, interactive: bool) -> list[dict]:
    """The rules on a group's totals: the hours and price of `plans` (points at a door now, by
    job id) together with every other live point of the group, judged against each target the
    door's points go to (`infos`, by job id). Each reason says it is the totals'."""
    from core.planning.policy import evaluate, rule_hours
    from core.planning.usage import weekly_spend

    others = [j for j in store.group_jobs(group_id) if j.state in ACTIVE and j.id not in plans]
    every = [*plans.values(), *(j.plan for j in others)]
    hours_each = [rule_hours(p.get("hours"), bool(p.get("smoke")), cfg.rules) for p in every]
    total_hours = None if any(h is None for h in hours_each) else round(sum(hours_each), 4)
    total_price = round(sum(float(p.get("estimated_price") or 0) for p in every), 4)
    secrets = sorted({s for p in every for s in p.get("secrets") or []})
    spent = weekly_spend(store)
    holds: list[dict] = []
    seen: set[str] = set()
    for jid, info in infos.items():
        if info.name in seen:
            continue
        seen.add(info.name)
        for h in evaluate(hours=total_hours, secrets=secrets, price=total_price, info=info,
                          rules=cfg.rules, weekly_spend=spent, interactive=interactive,
                          smoke=bool(plans[jid].get("smoke"))):
            if h.rule in ("secrets", "not_secret"):
                continue  # a point's own holds it already; totals add nothing to them
            doc = h.to_json()
            doc["reason"] = (f"the sweep's {len(every)} live points together "
                             f"({total_hours if total_hours is not None else '?'} h): {doc['reason']}")
            holds = _merge(holds, [doc])
    return holds if len(every) > 1 else []


def rejudge(store: Store, job: Job, chosen: Any, text: str, door: str = MIGRATION,
            cfg: Any = None) -> Verdict:
    """The plan `job` would have on the route `chosen`, and the holds a person would have to say
    yes to there (`judge`, and a plan changed after a person approved it: `text` says how),
    written nowhere. `replan` writes it; core/engine/reroute.py asks first, and moves a job
    waiting for a slot only where it starts without a hold. A denied job raises UserError."""
    from core.planning.plan import digest
    from core.planning.router import ROUTE_KEYS, route_fields

    plan = {**job.plan, "target": chosen.target, "gpu": chosen.gpu, "reasons": chosen.reasons,
            "passed_over": chosen.passed_over}
    for key in (*ROUTE_KEYS, "holds", "hold_kind", "tell_user"):
        plan.pop(key, None)
    plan.update(route_fields(chosen, job.request.get("checkpoint"), job.request.get("restart") or "never"))
    plan["digest"] = digest(plan)
    verdict = judge(store, job, plan, door=door, cfg=cfg, info=chosen.info,
                    interactive=plan.get("submitted_by") == "person")
    holds = list(verdict.holds)
    if job.approved_digest and job.approved_digest != verdict.plan["digest"]:
        holds.insert(0, {"rule": "plan_changed", "reason": f"its plan changed after it was approved ({text})"})
    return Verdict(holds, verdict.kind, verdict.plan)


def replan(store: Store, job: Job, why: str, exclude: dict[str, str] | None = None,
           door: str = MIGRATION, chosen: Any = None) -> Job:
    """Route a job again (placed but not started, or moving after its session ended) through
    `judge`: a plan that changed needs a new approval, a group's totals and the job's history
    are judged again. `exclude` names targets not to use, with why; `chosen` is a route the
    caller made already (core/engine/reroute.py: a target that can start it now), taken as
    it is."""
    from core.config import user as userconfig
    from core.engine import targets
    from core.engine.service import hold, request_from_json
    from core.planning.router import route

    cfg = userconfig.load()
    if chosen is None:
        req = request_from_json(job.request)
        infos = targets.for_request(req, store, cfg)
        for name, reason in (exclude or {}).items():
            if name in infos:
                infos[name].available = False
                infos[name].why_unavailable = reason
        chosen = route(req, infos, targets.kinds(cfg))
    text = f"{why}: routed again to {chosen.target}"
    verdict = rejudge(store, job, chosen, text, door=door, cfg=cfg)
    plan = verdict.plan
    with store.write():
        job = store.update(job.id, provider=chosen.target, plan=plan, digest=plan["digest"])
        store.add_event(job.id, text, data={"target": chosen.target, "digest": plan["digest"],
                                            "door": door})
        if verdict.holds:
            job = hold(store, job, verdict.holds, kind=verdict.kind)
    return job
