"""Sweeps: one request run at many points, as one job group decided once.

Every point is an ordinary job (retried, moved and brought home to runs/<id>/ like any other);
the group (the store's `groups` row) holds what is decided once for all of them:

- one bundle (packed once) and one plan: each point routed in turn among the targets probed
  once, each placed point taking a slot there, so the points spread over the targets that fit;
- one digest over every point's plan digest and max_parallel: a person approves exactly that,
  and a changed sweep is a new group, held again;
- the approval rules (core/planning/policy.py) judged on the group's totals (hours and price
  of all its points), so a hundred cheap points cannot slip under a limit one by one; an
  agent's sweep is held once, with one tell_user that names the group, its points and totals;
- idempotency: the same sweep while a point of it is live, or the same request_id, returns
  the group with `submitted: false`.

The supervisor starts at most `max_parallel` points of a group at once (supervisor.tick).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.config.request import JobRequest
from core.config.sweep import label, point_request
from core.display.sanitize import printable_doc
from core.errors import NotFound, UserError
from core.jobs.states import ACTIVE, TERMINAL, State
from core.jobs.store import Group, Job, Store
from core.planning.plan import canonical_bytes


@dataclass
class GroupResult:
    group: Group
    jobs: list[Job]
    submitted: bool
    bundle: dict
    guidance: dict

    def to_json(self, verbose: bool = False) -> dict[str, Any]:
        """{group, jobs, guidance, submitted, bundle}: the documented result of a sweep's submit."""
        return {"group": group_json(self.group, self.jobs),
                "jobs": [j.to_json(verbose) for j in self.jobs], "guidance": self.guidance,
                "submitted": self.submitted, "bundle": self.bundle}


def group_json(group: Group, jobs: list[Job]) -> dict[str, Any]:
    """The group object: its fields, and its points' states counted."""
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state.value] = counts.get(j.state.value, 0) + 1
    ended = sum(1 for j in jobs if j.state in TERMINAL)
    return {**group.to_json(), "states": counts, "done": ended,
            "progress": round(ended / len(jobs), 4) if jobs else 0.0}


def group_digest(point_digests: list[str], max_parallel: int | None) -> str:
    """sha256 over every point's plan digest, in order, and max_parallel."""
    return hashlib.sha256(canonical_bytes({"points": point_digests,
                                           "max_parallel": max_parallel})).hexdigest()


def plan_group(req: JobRequest, *, interactive: bool, store: Store,
               allow_large_project: bool = False, progress: Any = None,
               warn: Callable[[str], None] | None = None) -> tuple[Any, list[JobRequest], list[dict], dict]:
    """Pack once, route each point among the targets probed once, judge the totals.

    Returns the bundle, each point's request and plan, and the group's plan (points, where
    each runs, total hours and price, the holds, the digest)."""
    from core.engine import targets
    from core.engine.service import pack, place
    from core.planning.policy import evaluate, rule_hours
    from core.planning.usage import agent_day, weekly_spend

    assert req.sweep
    first = point_request(req, req.sweep[0], number=1)  # each point checked as built (sweep.check_point)
    bundle, data_hashes, cfg, store = pack(first, interactive=interactive, store=store,
                                           allow_large_project=allow_large_project,
                                           progress=progress, warn=warn)
    req.data = first.data  # hf:// data resolved once, for every point
    infos = targets.for_request(first, store, cfg)
    reqs, plans = [], []
    for n, point in enumerate(req.sweep, start=1):
        preq = point_request(req, point, number=n)
        plan = place(preq, bundle, data_hashes, store, cfg, infos, interactive=interactive)
        plan["point"] = point
        info = infos.get(plan["target"])
        if info is not None:
            info.waiting += 1  # the point takes a slot there: the next may go elsewhere
        reqs.append(preq)
        plans.append(plan)
    where: dict[str, int] = {}
    for plan in plans:
        where[plan["target"]] = where.get(plan["target"], 0) + 1
    hours_each = [rule_hours(p.get("hours"), bool(p.get("smoke")), cfg.rules) for p in plans]
    total_hours = None if any(h is None for h in hours_each) else round(sum(hours_each), 4)
    total_price = round(sum(p.get("estimated_price") or 0 for p in plans), 4)
    holds: list[dict] = []
    spent = weekly_spend(store)
    day = None if interactive else agent_day(store)  # the points together against the agent's day
    for name in where:  # the totals against each target the group uses (its sandbox, quota)
        for h in evaluate(hours=total_hours, secrets=list(req.secrets), price=total_price,
                          info=infos[name], rules=cfg.rules, weekly_spend=spent,
                          interactive=interactive, smoke=req.smoke, day=day, not_secret=list(req.not_secret)):
            doc = h.to_json()
            if doc not in holds and not any(x["rule"] == doc["rule"] and name not in doc["reason"]
                                            and x["reason"] == doc["reason"] for x in holds):
                holds.append(doc)
    if not interactive and total_hours is not None:  # say whose totals the hold is about
        for h in holds:
            h["reason"] = f"the sweep's {len(plans)} points together: {h['reason']}"
    group_plan = {"points": list(req.sweep), "targets": where, "hours": total_hours,
                  "estimated_price": total_price, "holds": holds,
                  "submitted_by": "person" if interactive else "agent",
                  "command": plans[0]["command"], "max_parallel": req.max_parallel}
    group_plan["digest"] = group_digest([p["digest"] for p in plans], req.max_parallel)
    return bundle, reqs, plans, group_plan


def group_totals(group_plan: dict) -> dict[str, Any]:
    """The numbers a person is told about a held sweep: its points, where they run, their
    hours and price together. No text of the job's (name, command, values) is in it."""
    return {"points": len(group_plan["points"]), "targets": dict(group_plan["targets"]),
            "hours": group_plan.get("hours"), "estimated_price": group_plan.get("estimated_price") or 0}


def tell_user(short: str, name: str, group_plan: dict) -> str:
    """The one paragraph an agent relays about a held sweep: the group, its point count, totals."""
    from core.planning.policy import plain_paragraph

    n = len(group_plan["points"])
    hours = group_plan.get("hours")
    price = group_plan.get("estimated_price") or 0
    cost = (f"{hours:g} hours in all" if hours is not None else "no time estimate") + (
        ", free (no charge on these targets)" if not price else f", estimated ${price:.2f} in all")
    where = ", ".join(f"{k} ({v})" for k, v in group_plan["targets"].items())
    command = " ".join(group_plan.get("command") or [])
    why = "; ".join(h["reason"] for h in group_plan["holds"]) or "a rule in your config"
    return plain_paragraph(
        f"gpu-router sweep {short} ({name}) of {n} points is waiting for your approval: it would "
        f"run `{command}` at each point on {where}, {cost}. It is held because {why}. To approve "
        f"all {n} points, run `gpu approve {short}` in a terminal or press `a` on the group in "
        f"`gpu dash`; to refuse them, run `gpu deny {short}`.")


def submit(req: JobRequest, **kwargs: Any) -> Any:
    """What every front calls to submit: a request with a sweep as a group (`submit_group`),
    any other as one job (core.engine.service.submit, with the same keywords)."""
    if req.sweep:
        known = ("actor", "interactive", "store", "start_supervisor", "allow_large_project",
                 "front", "progress", "warn", "expect_digest")
        return submit_group(req, **{k: v for k, v in kwargs.items() if k in known})
    from core.engine.service import submit as submit_job

    return submit_job(req, **kwargs)


def submit_group(req: JobRequest, *, actor: str = "cli", interactive: bool = False,
                 store: Store | None = None, start_supervisor: bool = True,
                 allow_large_project: bool = False, front: str = "cli",
                 progress: Any = None, warn: Callable[[str], None] | None = None,
                 expect_digest: str | None = None) -> GroupResult:
    """Record the group and its points (once), holding them all where the rules say so."""
    from core.engine.jobfiles import ignore_runs
    from core.engine.service import fingerprint, hold_if_changed, needs_supervisor

    store = store or Store()
    bundle, reqs, plans, gplan = plan_group(req, interactive=interactive, store=store,
                                            allow_large_project=allow_large_project,
                                            progress=progress, warn=warn)
    hold_if_changed(gplan, expect_digest)
    fp = fingerprint(req, bundle.hash)
    summary = bundle.summary()
    group, jobs, submitted = _insert_once(store, req, reqs, plans, gplan, bundle, fp, summary, actor)
    try:
        ignore_runs(Path(req.project_dir) / "runs")
    except OSError:
        pass
    if submitted and start_supervisor and jobs and needs_supervisor(jobs[0]):
        from core.engine.daemon import ensure_running

        ensure_running()
    return GroupResult(group=group, jobs=jobs, submitted=submitted, bundle=summary,
                       guidance=guidance(group, jobs, submitted, front))


def _insert_once(store: Store, req: JobRequest, reqs: list[JobRequest], plans: list[dict],
                 gplan: dict, bundle: Any, fp: str, summary: dict,
                 actor: str) -> tuple[Group, list[Job], bool]:
    now = time.time()
    with store.write() as db:
        existing = store.find_active_group(request_id=req.request_id, db=db) if req.request_id \
            else store.find_active_group(fingerprint=fp, db=db)
        if existing is not None:
            if req.request_id and existing.fingerprint != fp:
                raise UserError(f"request_id {req.request_id!r} was already used for a different "
                                f"sweep (group {existing.short_id})",
                                fix="use a new request_id for a new sweep, or resubmit the original unchanged")
            return existing, store.group_jobs(existing.id, db=db), False
        job = store.find_active(request_id=req.request_id, db=db) if req.request_id else None
        if job is not None:  # one request_id names one thing: a job's is no sweep's (service.py)
            raise UserError(f"request_id {req.request_id!r} was already used for a different "
                            f"request (job {job.short_id})",
                            fix="use a new request_id for a new sweep, or resubmit the original unchanged")
        group_id = _fresh_id(db, "groups")
        short = group_id[:8]
        counts = None  # each point's (hours, dollars) against the agent's day, if it goes on
        if not gplan["holds"] and gplan.get("submitted_by") == "agent":
            # the points together against the agent's day as it is in this transaction; counted
            # below, once each point exists (core/engine/agentday.py)
            from core.engine import agentday
            from core.engine.service import _rules

            rules = _rules()
            counts = [agentday.estimate(p, rules) for p in plans]
            over = agentday.day_hold(store, counts, rules)
            if over is not None:
                gplan["holds"] = [{**over.to_json(), "reason": f"the sweep's {len(plans)} points "
                                                               f"together: {over.reason}"}]
        held = bool(gplan["holds"])
        name = req.display_name()
        gplan["tell_user"] = tell_user(short, name, gplan) if held else ""
        store.insert_group({"id": group_id, "short_id": short, "name": name, "created_at": now,
                            "project_dir": req.project_dir, "request_id": req.request_id,
                            "fingerprint": fp, "digest": gplan["digest"], "spec": gplan,
                            "max_parallel": req.max_parallel,
                            "approval": "held" if held else "none"}, db)
        from core.engine.service import fingerprint

        for n, (preq, plan) in enumerate(zip(reqs, plans), start=1):
            job_id = _fresh_id(db, "jobs")
            jshort = job_id[:8]
            plan["group"] = {"id": group_id, "short_id": short, "index": n,
                             "max_parallel": req.max_parallel}
            request_doc = preq.to_json()
            for key in ("wait_s", "verbose"):  # to_json is asdict: every field is there
                del request_doc[key]
            row = {"id": job_id, "short_id": jshort, "name": f"{name}[{label(plan['point'])}]"[:120],
                   "provider": plan["target"], "project_dir": preq.project_dir,
                   "outputs_dir": str(Path(preq.project_dir) / "runs" / jshort),
                   "request_id": None, "fingerprint": fingerprint(preq, bundle.hash),
                   "request": request_doc, "plan": plan, "digest": plan["digest"],
                   "bundle_hash": bundle.hash, "group_id": group_id,
                   "bundle": {**summary, "hash": bundle.hash, "root": str(bundle.root),
                              "project_rel": bundle.project_rel}}
            store.insert_job(row, reason=f"submitted by {actor} as point {n} of sweep {short}",
                             actor=actor)
            store.transition(job_id, State.ROUTING, "; ".join(plan["reasons"]), actor=actor,
                             data={"target": plan["target"], "passed_over": plan["passed_over"]})
            if counts is not None and not held:
                agentday.count(store, db, job_id, *counts[n - 1], actor=actor,
                               why=f"point {n} of sweep {short}")
            if held:
                # group_totals: what a notification says of the sweep, in gpu-router's words
                # (tell_user carries its name and command, the job's words: notify.py)
                hplan = {**plan, "holds": gplan["holds"], "hold_kind": "group",
                         "tell_user": gplan["tell_user"], "group_totals": group_totals(gplan)}
                store.transition(job_id, State.AWAITING_APPROVAL,
                                 f"held with its sweep {short} for approval: "
                                 + "; ".join(h["reason"] for h in gplan["holds"]),
                                 actor=actor, data={"holds": gplan["holds"], "group": short},
                                 plan=hplan)
        return store.group(group_id), store.group_jobs(group_id, db=db), True


def _fresh_id(db: Any, table: str) -> str:
    for _ in range(5):
        new = os.urandom(16).hex()
        if db.execute(f"SELECT 1 FROM {table} WHERE short_id = ?", (new[:8],)).fetchone() is None:
            break
    return new


def guidance(group: Group, jobs: list[Job], submitted: bool, front: str = "cli") -> dict[str, Any]:
    """What the caller does next about the whole group."""
    short = group.short_id
    held = any(j.state == State.AWAITING_APPROVAL and j.plan.get("hold_kind") == "group" for j in jobs)
    if front == "cli":
        doc: dict[str, Any] = {"follow": f"gpu status {short}", "status": f"gpu status {short}"}
    else:
        from core.engine.guidance import tool_call

        tool = "compute_job" if front == "compute" else "gpu_status"
        args = {"action": "status", "job": short} if front == "compute" else {"job": short}
        doc = {"follow": tool_call(tool, **args), "status": tool_call(tool, **args),
               "next_call": {"tool": tool, "arguments": args}}
    doc["needs_approval"] = held
    if not submitted and any(j.state in ACTIVE for j in jobs):
        doc["note"] = (f"sweep {short} with the same request still has live points: returned it "
                       "instead of starting a second copy")
    elif not submitted:  # its request_id names it, and every point ended: no live point to follow
        doc["note"] = (f"sweep {short} with the same request_id already ended (every point): "
                       "returned it instead of running it again; use a new request_id to run it again")
    if held:
        from core.planning.policy import plain_paragraph

        doc["tell_user"] = plain_paragraph(group.spec.get("tell_user") or "")
        doc["approve"] = f"gpu approve {short}"
    return doc


# -- the group as a unit ---------------------------------------------------------------------


def held_points(store: Store, group: Group) -> list[Job]:
    return [j for j in store.group_jobs(group.id)
            if j.state == State.AWAITING_APPROVAL and j.plan.get("hold_kind") == "group"]


def approve_group(store: Store, group: Group, *, digest: str, actor: str,
                  pin_checked: bool = False) -> list[Job]:
    """Approve exactly the sweep with `digest`: every point held with it goes on, in one
    transaction. A job's process is refused (the check no front can skip)."""
    from core.engine.approvals import _wake, require_not_job

    points = held_points(store, group)
    if not points:
        raise UserError(f"sweep {group.short_id} has no point awaiting approval ({group.approval})",
                        fix=f"see `gpu status {group.short_id}`")
    require_not_job("approval", store=store, job=points[0])
    with store.write():
        group = store.group(group.id)
        if digest != group.digest:
            raise UserError(f"the plan of sweep {group.short_id} changed since it was shown "
                            f"(digest {digest[:12]} is now {group.digest[:12]})",
                            fix=f"review it again with `gpu approve {group.short_id}`")
        out = []
        for job in held_points(store, group):
            out.append(store.transition(
                job.id, State.ROUTING, f"approved with sweep {group.short_id} by {actor} "
                f"(plan {group.digest[:12]})", actor=actor, expect=[State.AWAITING_APPROVAL],
                data={"decision": "approve", "digest": job.digest, "group_digest": group.digest,
                      "hold": "group", "pin": pin_checked, "hours": job.plan.get("hours")},
                approved_digest=job.digest))
        store.set_group(group.id, approval="approved")
    _wake()
    return out


def deny_group(store: Store, group: Group, *, actor: str, reason: str | None = None) -> list[Job]:
    """Refuse every point held with the sweep (`denied`)."""
    from core.engine.approvals import require_not_job

    points = held_points(store, group)
    if not points:
        raise UserError(f"sweep {group.short_id} has no point awaiting approval ({group.approval})",
                        fix=f"see `gpu status {group.short_id}`")
    require_not_job("denial", store=store, job=points[0], undone="nothing was denied")
    text = f"denied with sweep {group.short_id} by {actor}" + (f": {reason}" if reason else "")
    with store.write():
        out = [store.transition(j.id, State.DENIED, text, actor=actor, expect=[State.AWAITING_APPROVAL],
                                data={"decision": "deny", "digest": j.digest, "reason": reason})
               for j in held_points(store, group)]
        store.set_group(group.id, approval="denied")
    return out


def cancel_group(store: Store, group: Group, *, actor: str = "cli", wait_s: float = 15.0,
                 checkpoint: bool = False, grace_s: float | None = None) -> list[Job]:
    """Stop every live point, each as `gpu cancel` stops one job (core.engine.cancelling.cancel):
    those not launched are cancelled at once, the launched are asked to stop; with
    `checkpoint`, every running point is first asked to save, with its grace (bounded as for
    one job). The group's flags were once dropped: its points were stopped at once, unsaved.
    Waits up to `wait_s` (with a checkpoint, the grace and a little more) for all to end."""
    from core.engine.cancelling import CHECKPOINT_GRACE_S, check_grace, record
    from core.engine.daemon import ensure_running

    grace = CHECKPOINT_GRACE_S if grace_s is None else float(grace_s)
    check_grace(grace)
    live = [j for j in store.group_jobs(group.id) if j.state not in TERMINAL]
    if not live:
        raise UserError(f"every point of sweep {group.short_id} already ended", fix="nothing to cancel")
    launched = False
    for job in live:  # every point's cancel recorded before the supervisor acts on any
        try:
            ended, _ = record(store, job.id, actor=f"{actor} (sweep {group.short_id})", wait_s=0,
                              checkpoint=checkpoint, grace_s=grace)
        except UserError:
            continue  # it ended meanwhile
        launched = launched or ended.state not in TERMINAL
    if launched:
        ensure_running()
    if checkpoint:
        wait_s = max(wait_s, grace + 30.0)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        jobs = store.group_jobs(group.id)
        if all(j.state in TERMINAL for j in jobs):
            break
        time.sleep(0.1)
    return store.group_jobs(group.id)


def resume_group(store: Store, group: Group, *, actor: str = "cli",
                 interactive: bool = False) -> list[tuple[Job, str | None]]:
    """Resume each ended point that did not finish (failed, cancelled), judged together: one
    judgment at the door (core/engine/doors.py) over the points resumed now and the points
    still live, so a held sweep cancelled and resumed is held again on its totals (and for the
    hold it was left under), never run point by point under a limit its totals are over. Held
    points wait as one group again (a new group digest; `gpu approve GROUP`). Returns (job, why
    not) for each point tried."""
    from core.engine import doors
    from core.engine.resume import plan_resume, record

    out: list[tuple[Job, str | None]] = []
    planned = []
    for job in store.group_jobs(group.id):
        if job.state not in (State.FAILED, State.CANCELLED):
            continue
        try:
            history = doors.past(store, job)
            if history.denied is not None:
                raise doors.denied_refusal(job, history.denied)
            planned.append(plan_resume(store, job))
        except UserError as exc:
            out.append((job, exc.what))
    if not planned and not out:
        raise UserError(f"sweep {group.short_id} has no failed or cancelled point to resume",
                        fix=f"see `gpu status {group.short_id}`")
    together = {r.job.id: r.plan for r in planned}
    judged = []
    for r in planned:
        try:
            judged.append((r, doors.judge(store, r.job, r.plan, door=doors.SWEEP_RESUME,
                                          interactive=interactive, cfg=r.cfg, info=r.info,
                                          together=together)))
        except UserError as exc:
            out.append((r.job, exc.what))
    holds: list[dict] = []
    for _, v in judged:
        if v.held and v.kind != "overrun":
            holds += [h for h in v.holds if h not in holds]
    held_ids = []
    for r, v in judged:
        if holds and v.kind != "overrun":  # held as one group: a person says yes to all at once
            v = doors.Verdict(holds, "group", v.plan)
        job = record(store, r, v, actor=actor)
        if v.kind == "group" and v.held:
            held_ids.append(job.id)
        out.append((job, None))
    if held_ids:
        _hold_again(store, group, held_ids, holds, actor=actor)
    order = {j.id: n for n, j in enumerate(store.group_jobs(group.id))}
    return sorted(((store.get(j.id), why) for j, why in out), key=lambda t: order.get(t[0].id, 0))


def _hold_again(store: Store, group: Group, held_ids: list[str], holds: list[dict], *, actor: str) -> None:
    """The resumed points wait as one sweep again: the group's digest over its points' new
    plans, its totals (the held points with the live ones), one tell_user naming the group."""
    from core.planning.policy import rule_hours
    from core.config import user as userconfig

    rules = userconfig.load().rules
    jobs = store.group_jobs(group.id)
    counted = [j for j in jobs if j.state in ACTIVE]
    hours = [rule_hours(j.plan.get("hours"), bool(j.plan.get("smoke")), rules) for j in counted]
    where: dict[str, int] = {}
    for j in counted:
        where[j.plan.get("target") or "?"] = where.get(j.plan.get("target") or "?", 0) + 1
    spec = {**group.spec, "holds": holds, "targets": where,
            "hours": None if any(h is None for h in hours) else round(sum(hours), 4),
            "estimated_price": round(sum(float(j.plan.get("estimated_price") or 0) for j in counted), 4),
            "resumed_by": actor}
    spec["digest"] = group_digest([j.digest or "" for j in jobs], group.max_parallel)
    spec["tell_user"] = tell_user(group.short_id, group.name, spec)
    with store.write():
        for jid in held_ids:
            job = store.get(jid)
            store.update(jid, plan={**job.plan, "hold_kind": "group", "tell_user": spec["tell_user"],
                                    "group_totals": group_totals(spec)})
        store.set_group(group.id, digest=spec["digest"], spec=spec, approval="held")


def best_point(store: Store, jobs: list[Job], key: str, mode: str = "min") -> dict[str, Any] | None:
    """The point whose last value of `key` is lowest (mode min) or highest (max)."""
    scored = []
    for job in jobs:
        summary = store.metrics_summary(job.id).get(key)
        value = summary["last"] if summary else job.final.get(key) if isinstance(job.final.get(key), (int, float)) else None
        if value is not None:
            scored.append((value, job))
    if not scored:
        return None
    value, job = (min if mode == "min" else max)(scored, key=lambda t: t[0])
    return {"job": job.short_id, "point": job.plan.get("point") or {}, "key": key, "value": value,
            "mode": mode, "state": job.state.value}


def status_doc(store: Store, group: Group, *, metric: str | None = None, mode: str = "min") -> dict:
    """`gpu status GROUP --json`: the group (counts per state, progress), each point, the best."""
    jobs = store.group_jobs(group.id)
    doc: dict[str, Any] = {"group": group_json(group, jobs),
                           "jobs": [j.to_json() for j in jobs]}
    if metric:
        doc["best"] = best_point(store, jobs, metric, mode)
    return printable_doc(doc)


def resolve_group(store: Store, ref: str) -> Group | None:
    """The group `ref` names, or None (then it is a job's reference)."""
    try:
        return store.find_group(ref)
    except NotFound:
        return None


def live(jobs: list[Job]) -> list[Job]:
    return [j for j in jobs if j.state in ACTIVE]


def wait_group(store: Store, group: Group, *, until: str = "change", timeout_s: float,
               cancelled: Callable[[], bool] | None = None) -> tuple[list[Job], bool]:
    """Block until a point of the group changes state ("change"), or every point ended or one
    waits for a person ("end"), or `timeout_s` passes; (the points as they are then, whether
    the wait was woken). One indexed read of the store each WAIT_POLL_S, as `wait_job`."""
    from core.engine.waiting import WAIT_POLL_S, WAIT_UNTIL

    if until not in WAIT_UNTIL:
        raise UserError(f"until must be one of {', '.join(WAIT_UNTIL)} (got {until!r})",
                        fix="until=\"end\" waits for every point to end; \"change\" for any change")
    start = {j.id: j.state for j in store.group_jobs(group.id)}
    began = time.monotonic()
    while True:
        jobs = store.group_jobs(group.id)
        if until == "end":
            woken = all(j.state in TERMINAL or j.state == State.AWAITING_APPROVAL for j in jobs)
        else:
            woken = any(start.get(j.id) != j.state for j in jobs)
        left = timeout_s - (time.monotonic() - began)
        if woken or left <= 0 or (cancelled is not None and cancelled()):
            return jobs, woken
        time.sleep(min(WAIT_POLL_S, left))


def preview(req: JobRequest, *, interactive: bool, store: Store | None = None,
            allow_large_project: bool = False, progress: Any = None,
            warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`gpu plan` (gpu_plan, compute_job plan) of a sweep, without submitting: the group's plan
    (points, where each would run, totals, the holds, the digest) and what ships."""
    bundle, _, plans, gplan = plan_group(req, interactive=interactive, store=store or Store(),
                                         allow_large_project=allow_large_project,
                                         progress=progress, warn=warn)
    points = [{"point": p["point"], "target": p["target"], "gpu": p["gpu"], "hours": p.get("hours"),
               "estimated_price": p.get("estimated_price"), "digest": p["digest"]} for p in plans]
    return printable_doc({"group": {k: v for k, v in gplan.items() if k != "points"}, "points": points,
                          "bundle": bundle.summary(), "digest": gplan["digest"],
                          "needs_approval": bool(gplan["holds"])})
