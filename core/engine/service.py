"""The submit path every front end shares: pack, route, price under the rules, record once.

`gpu submit`, the dashboard and the MCP server (`gpu mcp`) all call `submit` (and `prepare`
for a plan), so idempotency, the plan and the holds on it are decided in one place. What a
submit hands on lives beside it: waiting on the job (waiting.py), the guidance an agent
relays (guidance.py), cancelling (cancelling.py), where its files go at home
(jobfiles.py) and its report (jobreport.py).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.config.request import JobRequest
from core.engine.guidance import guidance
from core.engine.jobfiles import ignore_runs
from core.engine.waiting import Tick, wait_job, wait_placed
from core.packaging import runswriter
from core.jobs.states import TERMINAL, State
from core.jobs.store import Job, Store
from core.errors import DiskFull, UserError, disk_full_guard
from core.packaging.bundle import Bundle, build
from core.packaging.filecache import FileHashCache
from core.packaging.listing import begin as begin_listing, list_project
from core.packaging.local_data import list_data
from core.packaging.report import left_out_hint, ship_warnings
from core.packaging import depcheck, depfiles, requirements
from core.planning.plan import build_plan, canonical_bytes, data_hash
from core.planning.router import NoGpuTarget, pinned, route, route_fields

# told (done, total or None, what is happening) while a submit or a plan bundles the project:
# the MCP server turns these into progress notifications
Stage = Callable[[int, "int | None", str], None]


@dataclass
class SubmitResult:
    job: Job
    submitted: bool
    bundle: dict
    guidance: dict

    def to_json(self, verbose: bool = False) -> dict[str, Any]:
        """Exactly {job, guidance, submitted, bundle}: the documented submit result."""
        return {"job": self.job.to_json(verbose), "guidance": self.guidance,
                "submitted": self.submitted, "bundle": self.bundle}


def hold_if_changed(plan: dict, expect_digest: str | None) -> None:
    """A submit that names the digest of the plan it was shown is held when the plan it gets is
    another one (a job's or a sweep's: both digests cover everything a person approves)."""
    if expect_digest is not None and expect_digest != plan["digest"]:
        plan["holds"].insert(0, {"rule": "plan_changed", "reason": (
            f"its plan changed since the plan that was shown (digest {expect_digest[:12]}, "
            f"now {plan['digest'][:12]})")})


def fingerprint(req: JobRequest, bundle_hash: str) -> str:
    doc = req.to_json()  # every field of the request (asdict), so each key below is there
    for key in ("wait_s", "verbose", "request_id"):
        del doc[key]
    for key in ("sweep", "max_parallel"):  # unset (a plain job): the fingerprint it always had
        if doc[key] is None:
            del doc[key]
    doc["bundle_hash"] = bundle_hash
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def prepare(req: JobRequest, *, interactive: bool = False, store: Store | None = None,
            allow_large_project: bool = False, progress: Stage | None = None,
            warn: Callable[[str], None] | None = None) -> tuple[Bundle, dict]:
    """Bundle the project, route it and apply the rules, without creating a job.

    A project that is the home folder or a big folder outside git raises `ProjectTooBroad`
    unless `allow_large_project`: the front asks a person, and refuses an agent. `progress`
    hears how the bundling goes (a cold pack of a big project takes seconds); `warn` hears the
    listing's warnings (a 900 MB file that should be data) before anything is packed, while the
    person can still stop it.
    Its hf:// data sets are resolved in place: afterwards `req.data` names gpu-router's local
    copy of each, pinned to its commit (so the job, its fingerprint and its digest do too)."""
    bundle, data_hashes, cfg, store = pack(req, interactive=interactive, store=store,
                                           allow_large_project=allow_large_project,
                                           progress=progress, warn=warn)
    from core.engine import targets

    plan = place(req, bundle, data_hashes, store, cfg, targets.for_request(req, store, cfg),
                 interactive=interactive)
    _check_deps_here(bundle, plan, cfg)
    return bundle, plan


def _check_deps_here(bundle: Bundle, plan: dict, cfg: Any) -> None:
    """A job routed to this machine: its requirements asked of the index it installs from, so
    a pin the index cannot satisfy is refused now, not after the job took a slot
    (core.packaging.depcheck.check_at_submit: quick when nothing is new); the plan says
    what its environment will download (`plan["environment"]`)."""
    target = cfg.targets.get(plan.get("target"))
    if target is None or target.kind not in ("local", "ssh", "slurm", "pbs"):
        return
    if bundle.deps is None:  # none declared: nothing to ask (read by `pack`, never twice)
        return
    import sys

    from core.runtime import uvenv

    if target.kind != "local":  # a host: the size only, for its Python as last seen
        from core.providers import registry

        provider = registry.build(cfg, only=[target.name])[target.name]
        env = {**os.environ, **{k: str(v) for k, v in (target.options.get("env") or {}).items()}}
        seen = depcheck.size_on_host(bundle.deps, tags=provider.last_host_python(), host=target.name,
                                     gpu=plan.get("gpu") not in (None, "", "cpu"), uv=requirements.home_uv(),
                                     marks_dir=str(paths.home() / "deps-checked"), environ=env)
        plan["environment"] = {**seen, "text": uvenv.download_text(seen)}
        return

    python = target.options.get("python") or getattr(sys, "_base_executable", None) or sys.executable
    seen: dict = {}
    depcheck.check_at_submit(bundle.deps, python=python, version=sys.version, venvs_dir=str(paths.venvs_dir()),
                                 uv=requirements.home_uv(), seen=seen)
    # what the environment will download, said in the plan (outside its digest: the same
    # job is approved whether its packages are cached or not)
    plan["environment"] = {**seen, "text": uvenv.download_text(seen)}


def pack(req: JobRequest, *, interactive: bool = False, store: Store | None = None,
         allow_large_project: bool = False, progress: Stage | None = None,
         warn: Callable[[str], None] | None = None) -> tuple[Bundle, dict[str, str], Any, Store]:
    """The checks and the bundle of `prepare` (see there), without routing: a sweep packs once
    for all its points (core/engine/sweeps.py). Returns the bundle, each data set's hash, the
    user config and the store."""
    read = 0  # progress only grows: files read, then one step more for the planning

    def tell(done: int, total: int | None, text: str) -> None:
        if progress is not None:
            progress(done, total, text)

    def packing(done: int, total: int) -> None:
        nonlocal read
        if done > read or done == 0:  # 0: the reading starts (one huge file says it at once)
            read = done
            tell(done, total + 1, f"bundling: {done}/{total} files read")

    from core.config import user as userconfig
    from core.engine import targets
    from core.secrets.launch import check_available
    from core.secrets.scan import check_env

    begun = begin_listing(Path(req.project_dir), req.ship)  # git reads the tree while the checks run
    try:
        check_env(req.env, plain=set(req.not_secret))
        check_available(req.secrets)
        cfg = userconfig.load()
        pinned(req.provider, targets.kinds(cfg))  # a pin to nothing (colab) is refused before packing
        store = store or Store()
        if store.short_of_space():  # what is left is kept for recording how live jobs end
            raise DiskFull(paths.home())
        with disk_full_guard(paths.home()):  # the bundle and the hash cache are written there
            cache = FileHashCache()
            try:
                tell(0, None, "listing the files that ship")
                listing = list_project(Path(req.project_dir), req.include, ship=req.ship,
                                       allow_large=allow_large_project, cache=cache, begun=begun)
                for text in listing.warnings if warn is not None else ():
                    warn(text)
                bundle = build(listing, cache, progress=packing)
                tell(read + 1, read + 1, f"bundled {bundle.files} files; planning where it runs")
                data_hashes, data_warnings = _data_hashes(req, cache, may_read_secrets=interactive)
            finally:
                cache.close()
        # the dependencies as every target will read them: a nested file that does not ship, a
        # loop, a password in an index URL or a line pip cannot read is said now, not at launch
        bundle.deps = requirements.read_dependencies(depfiles.ListingFiles(listing), bundle.project_rel,
                                                     req.extras)
        project, script, shipped = Path(req.project_dir), req.script or "", set(listing.entries)
        bundle.left_out = _not_data(bundle.left_out, Path(bundle.root), req.data)
        bundle.warnings = bundle.warnings + data_warnings + ship_warnings(
            project, bundle.project_rel, script, req.args, req.is_python_file(), shipped)
        bundle.hint = left_out_hint(project, bundle.project_rel, script, req.is_python_file(),
                                    bundle.left_out, shipped, req.outputs)
        return bundle, data_hashes, cfg, store
    finally:
        if begun is not None:
            begun.close()


def _not_data(left_out: list[dict], root: Path, data: list[Any]) -> list[dict]:
    """The left-out rows less the folders and files given as --data (or `data:`): those are
    not left out, they travel as data (uploaded once per target, at gpu.data_dir()/NAME)."""
    sources = [Path(d.source) for d in data if d.kind == "path"]
    if not sources:
        return left_out

    def carried(item: dict) -> bool:
        path = root / str(item.get("path", "")).rstrip("/")
        return any(path == src or src in path.parents for src in sources)

    return [item for item in left_out if not carried(item)]


def place(req: JobRequest, bundle: Bundle, data_hashes: dict[str, str], store: Store, cfg: Any,
          infos: dict, *, interactive: bool) -> dict:
    """Route a packed request among the probed `infos` and price it under the rules: its plan."""
    from core.engine import targets

    try:
        chosen = route(req, infos, targets.kinds(cfg))
    except NoGpuTarget as exc:
        raise exc.with_offers(_account_offers(req, cfg)) from None
    extra = {"reasons": chosen.reasons, "passed_over": chosen.passed_over,
             **route_fields(chosen, req.checkpoint, req.restart)}
    plan = build_plan(req, bundle, chosen.target, chosen.gpu, data_hashes, extra=extra)
    apply_rules(plan, store, cfg, chosen.info, interactive=interactive, new_start=True)
    return plan


def _data_hashes(req: JobRequest, cache: FileHashCache, *,
                 may_read_secrets: bool = True) -> tuple[dict[str, str], list[str]]:
    """Each data set's content hash, over what may be uploaded, and what was withheld from it.

    An hf:// set is first downloaded here (once per commit) and becomes a local one."""
    hashes: dict[str, str] = {}
    warnings: list[str] = []
    if any(d.kind == "hf" for d in req.data):
        from core.packaging import hfdata  # huggingface_hub only for a job that needs it

        req.data = [hfdata.resolve(d, may_read_token=may_read_secrets) for d in req.data]
    for d in req.data:
        listing = list_data(Path(d.source), d.name, cache) if d.kind == "path" else None
        hashes[d.name] = data_hash(d.source, d.kind, cache, listing)
        if listing is not None:
            warnings += listing.warnings(d.name)
    return hashes, warnings


def _account_offers(req: JobRequest, cfg) -> str:
    """The user's GPU cloud accounts' offers that fit a request no target can serve, as one
    sentence ("" without accounts: nothing is read then). gpu-router reads those accounts but
    does not run jobs there itself, so the way to use an offer is to rent it and add it over ssh."""
    from core.engine.accounts import elsewhere

    try:
        doc = elsewhere(req.gpu, req.vram_gb, req.hours, cfg=cfg)
    except UserError:
        return ""
    if not doc:
        return ""
    best = doc.get("cheapest")
    if not best:
        asked = " ".join(x for x in (req.gpu, f"{req.vram_gb:g} GB" if req.vram_gb else None) if x)
        read = ", ".join(str(a.get("title") or a.get("provider")) for a in doc.get("accounts") or [])
        return f"Your accounts ({read}) offer no {asked} now"
    where = f" ({best['region']})" if best.get("region") else ""
    cost = f", about ${best['estimated_cost']:.2f} for {best['hours']:g} h" if best.get("estimated_cost") is not None else ""
    return (f"Your accounts offer {doc['matched']} match{'es' if doc['matched'] != 1 else ''}: the cheapest is "
            f"{best['gpu']} on {best['provider']}{where} at ${best['price_per_hour']:.2f}/h{cost} "
            "(`gpu accounts` lists them; rent one there and add it with `gpu targets add ssh`)")


def apply_rules(plan: dict, store: Store, cfg, info, *, interactive: bool,
                new_start: bool = False) -> dict:
    """Price the plan and record which rules hold it (in the plan, outside its digest).
    `new_start`: this door starts new work (a submit, a resume, a retry), which an agent's
    rolling day judges (core/engine/agentday.py); a migration or a move out of a queue goes on
    with work already counted. The door then counts it, or holds it, inside its write
    transaction (agentday.admit): this is the preview a plan shows."""
    from core.planning.policy import evaluate, rule_hours
    from core.planning.router import estimated_price
    from core.planning.usage import agent_day, weekly_spend

    smoke = bool(plan.get("smoke"))
    price = estimated_price(info, rule_hours(plan.get("hours"), smoke, cfg.rules))
    plan["price_per_hour"] = info.price_per_hour
    plan["estimated_price"] = price
    plan["quota_hours_left"] = info.quota_hours_left
    plan["submitted_by"] = "person" if interactive else "agent"
    holds = evaluate(hours=plan.get("hours"), secrets=plan.get("secrets", []), price=price,
                     info=info, rules=cfg.rules, weekly_spend=weekly_spend(store),
                     interactive=interactive, smoke=smoke, not_secret=plan.get("not_secret", []),
                     day=agent_day(store) if new_start and not interactive else None)
    plan["holds"] = [h.to_json() for h in holds]
    return plan


def submit(req: JobRequest, *, actor: str = "cli", interactive: bool = False,
           store: Store | None = None, start_supervisor: bool = True,
           allow_large_project: bool = False, front: str = "cli",
           expect_digest: str | None = None, progress: Stage | None = None,
           settle: bool = False, cancelled: Callable[[], bool] | None = None,
           tick: Tick | None = None, purpose: str | None = None,
           warn: Callable[[str], None] | None = None) -> SubmitResult:
    """Record the job (once: see `_insert_once`) and start the supervisor unless it is held.

    `expect_digest` is the digest of a plan the caller was shown (`gpu_plan`, compute_job's
    `plan`): if the plan made now differs, the job is held for a person with that reason and
    never runs on the strength of a plan nobody saw. `front` picks guidance's words.

    `req.wait_s` is a grace: without `settle` (the CLI, MCP's gpu_submit: the submit contract)
    the call waits in it until the job is placed; with `settle` (compute_job's start) until
    the job ends or needs a person, so a job
    that settles within the grace comes back with its outcome instead of `provisioning`
    (see `wait_job`; `cancelled` ends the wait early, `tick` hears it is alive). `purpose`
    (why the job runs, in the caller's words) is recorded as the new job's event before any
    wait, so it comes before the job's outcome in its history."""
    store = store or Store()
    if req.sweep:  # a front's slip: core/engine/sweeps.py submits a sweep, as one group
        raise UserError("a sweep is submitted as a group, not as one job",
                        fix="call core.engine.sweeps.submit, which takes either")
    bundle, plan = prepare(req, interactive=interactive, store=store,
                           allow_large_project=allow_large_project, progress=progress, warn=warn)
    hold_if_changed(plan, expect_digest)
    fp = fingerprint(req, bundle.hash)
    summary = bundle.summary()
    request_doc = req.to_json()
    for key in ("wait_s", "verbose"):
        request_doc.pop(key, None)

    job, submitted = _insert_once(store, req, plan, bundle, fp, summary, request_doc, actor)
    if submitted and purpose:
        store.add_event(job.id, f"purpose: {purpose}", actor=actor, data={"purpose": purpose})
    try:
        ignore_runs(Path(job.outputs_dir).parent)
    except (OSError, runswriter.Refused):
        pass  # a read-only project still runs; its outputs come home (or are kept at home) later
    if submitted and start_supervisor and needs_supervisor(job):
        from core.engine.daemon import ensure_running

        ensure_running()
    if req.wait_s and submitted and settle:
        job = wait_job(store, job.id, until="end", timeout_s=req.wait_s, cancelled=cancelled,
                       tick=tick)
    elif req.wait_s and submitted and job.state == State.ROUTING:
        job = wait_placed(store, job.id, req.wait_s)
    advice = guidance(job, submitted, front)
    left = _left_behind(store, job)
    if left:
        advice["note"] = left
    return SubmitResult(job=job, submitted=submitted, bundle=summary, guidance=advice)


def needs_supervisor(job: Job) -> bool:
    """A job just recorded needs a supervisor: to run it, or, held for a person, to tell that
    person (notify: in the user config; core/engine/notify.py sends from the supervisor)."""
    if job.state != State.AWAITING_APPROVAL:
        return True
    from core.config import user as userconfig

    try:
        return bool(userconfig.load().notify)
    except UserError:
        return False


def _left_behind(store: Store, job: Job) -> str | None:
    """What the project's previous job wrote that stayed on its target, said at the next
    submit (a person reads it once more; an agent can act on it)."""
    for prev in store.jobs(states=TERMINAL, limit=20):
        if prev.id != job.id and prev.project_dir == job.project_dir:
            stayed = prev.handle.get("stayed")
            return f"the last run of this project ({prev.short_id}) left work behind: {stayed}" if stayed else None
    return None


def _insert_once(store: Store, req: JobRequest, plan: dict, bundle: Bundle, fp: str,
                 summary: dict, request_doc: dict, actor: str) -> tuple[Job, bool]:
    """Insert the job unless the same request_id or an identical live request exists."""
    with store.write() as db:
        existing = store.find_active(request_id=req.request_id, db=db) if req.request_id \
            else store.find_active(fingerprint=fp, db=db)
        if existing is not None:
            if req.request_id and existing.fingerprint != fp:
                raise UserError(
                    f"request_id {req.request_id!r} was already used for a different request "
                    f"(job {existing.short_id})",
                    fix="use a new request_id for a new job, or resubmit the original request unchanged")
            return existing, False
        group = store.find_active_group(request_id=req.request_id, db=db) if req.request_id else None
        if group is not None:  # one request_id names one thing: a sweep's is no job's (sweeps.py)
            raise UserError(
                f"request_id {req.request_id!r} was already used for a different request "
                f"(sweep {group.short_id})",
                fix="use a new request_id for a new job, or resubmit the original request unchanged")
        for _ in range(5):
            job_id = os.urandom(16).hex()  # uuid4's 122 random bits and more, without importing uuid (and platform)
            short = job_id[:8]
            if db.execute("SELECT 1 FROM jobs WHERE short_id = ?", (short,)).fetchone() is None:
                break
        row = {
            "id": job_id, "short_id": short, "name": req.display_name(),
            "provider": plan["target"], "project_dir": req.project_dir,
            "outputs_dir": str(Path(req.project_dir) / "runs" / short),
            "request_id": req.request_id, "fingerprint": fp, "request": request_doc,
            "plan": plan, "digest": plan["digest"], "bundle_hash": bundle.hash,
            "bundle": {**summary, "hash": bundle.hash, "root": str(bundle.root),
                       "project_rel": bundle.project_rel},
        }
        store.insert_job(row, reason=f"submitted by {actor}", actor=actor)
        job = store.transition(job_id, State.ROUTING, "; ".join(plan["reasons"]), actor=actor,
                               data={"target": plan["target"], "passed_over": plan["passed_over"]})
        if not plan["holds"]:  # the agent's day, read and counted in this transaction
            from core.engine import agentday

            plan["holds"] = agentday.admit(store, db, job_id, plan, _rules(), actor=actor, why="submitted")
        if plan["holds"]:
            job = hold(store, job, plan["holds"], kind="rules", actor=actor)
        return job, True


def _rules() -> Any:
    """The user config's rules (read once per change of the file: core.config.yamlfile)."""
    from core.config import user as userconfig

    return userconfig.load().rules


def hold(store: Store, job: Job, holds: list[dict], *, kind: str, actor: str = "supervisor",
         src: State | None = None, **fields: Any) -> Job:
    """Move a job to awaiting_approval, recording the rules that hold it."""
    from core.planning.policy import tell_user

    plan = {**(fields.pop("plan", None) or job.plan), "holds": holds, "hold_kind": kind}
    text = tell_user(job.short_id, job.name, plan, holds)
    plan["tell_user"] = text
    return store.transition(job.id, State.AWAITING_APPROVAL,
                            "held for approval: " + "; ".join(h["reason"] for h in holds),
                            actor=actor, data={"holds": holds, "digest": plan.get("digest"), "kind": kind},
                            plan=plan, digest=plan.get("digest"), **fields)


def request_from_json(doc: dict) -> JobRequest:
    from core.config.request import DataSpec

    fields = {k: v for k, v in doc.items() if k in JobRequest.__dataclass_fields__}
    fields["data"] = [DataSpec(**d) for d in doc.get("data", [])]
    return JobRequest(**fields)
