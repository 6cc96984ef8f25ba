"""The operations every front end shares: submit, cancel, and bringing a job home.

`gpu submit`, the dashboard and the MCP server (`gpu mcp`) all call these, so idempotency, the
plan and the guidance an agent relays are decided in one place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.config.request import JobRequest
from core.display.sanitize import printable_doc
from core.packaging import checkpoints, runswriter
from core.jobs.states import LAUNCHED, TERMINAL, State
from core.jobs.records import CANCEL_AFTER_CHECKPOINT
from core.jobs.store import Job, Store
from core.errors import DiskFull, UserError, disk_full_guard
from core.packaging.bundle import Bundle, build
from core.packaging.filecache import FileHashCache
from core.packaging.listing import begin as begin_listing, list_project
from core.packaging.local_data import list_data
from core.packaging.safe_extract import masked_names
from core.packaging.report import left_out_hint, ship_warnings
from core.packaging import depcheck, depfiles, requirements
from core.planning.plan import build_plan, canonical_bytes, data_hash
from core.planning.router import NoGpuTarget, pinned, route
from core.planning.usage import estimate_and_actual

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
    extra = {"reasons": chosen.reasons, "passed_over": chosen.passed_over}
    if chosen.offer:
        extra["offer"] = chosen.offer
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


def wait_placed(store: Store, job_id: str, wait_s: float) -> Job:
    """Wait until the job is placed, needs approval, ends, or waits for a slot."""
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        job = store.get(job_id)
        placed = job.state not in (State.QUEUED, State.ROUTING) or job.reason.startswith("waiting")
        if placed or time.monotonic() >= deadline:
            return job
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


WAIT_UNTIL = ("change", "end")
WAIT_POLL_S = 0.2  # one indexed read of the store each time
WAIT_TICK_S = 5.0  # how often a long wait tells its caller it is alive
# told (seconds waited, the job as it is now) every WAIT_TICK_S of a wait
Tick = Callable[[float, Job], None]


def woken(job: Job, start: State, until: str) -> bool:
    """Whether a wait that began at state `start` is over. "change": the job is in another
    state or ended. "end": the job ended, or it waits for a person's approval (then nothing
    moves until someone acts, and the agent has to tell its person), not every step between."""
    if job.state in TERMINAL:
        return True
    if until == "end":
        return job.state == State.AWAITING_APPROVAL
    return job.state != start


def wait_job(store: Store, job_id: str, *, until: str = "change", timeout_s: float,
             since: State | None = None, cancelled: Callable[[], bool] | None = None,
             tick: Tick | None = None) -> Job:
    """Block until `woken` (from state `since`, default the job's state now), `timeout_s`
    passes or `cancelled()` turns true; return the job as it is then. The supervisor runs as
    its own process and writes the store: this reads it, one row every WAIT_POLL_S."""
    if until not in WAIT_UNTIL:
        raise UserError(f"until must be one of {', '.join(WAIT_UNTIL)} (got {until!r})",
                        fix="until=\"end\" waits for the job to end; \"change\" for any change of state")
    began = told = time.monotonic()
    job = store.get(job_id)
    start = since or job.state
    while not woken(job, start, until):
        now = time.monotonic()
        if now - began >= timeout_s or (cancelled is not None and cancelled()):
            break
        if tick is not None and now - told >= WAIT_TICK_S:
            told = now
            tick(now - began, job)
        time.sleep(min(WAIT_POLL_S, max(0.0, timeout_s - (now - began))))
        job = store.get(job_id)
    return job


def tool_call(tool: str, **arguments: Any) -> str:
    """How guidance names a tool call: `gpu_wait(job="1a2b3c4d")`."""
    return f"{tool}({', '.join(f'{k}={json.dumps(v)}' for k, v in arguments.items())})"


JOB_RESOURCE = "gpu://jobs/"  # + short id: the MCP resource of a job (tui/mcp/watch.py)


FAILURE_READ_MAX = 1 << 20  # the most one read of a log by offset returns (reports.MAX_LOG_CHUNK)
FAILURE_CONTEXT_LINES = 5  # lines read before a traceback's start: what the job did last
FAILURE_LAST_LINES = 40  # lines read of a failure that printed no traceback
FAILURE_MARGIN = 4096  # bytes read past the log's end as it is now: lines written after the end
_TRACEBACK = b"Traceback (most recent call last):"
_CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
_ATTEMPT = re.compile(rb"^\[gpu-router\] attempt \d+: running ")  # the launcher's line (core/runtime/launch.py)


def _failure_read(job: Job) -> dict[str, int]:
    """Where a failed job's log is read so that its error is in that one read: {offset,
    max_bytes} (a read by offset of gpu_logs / compute_job logs), from a few lines before the
    last traceback of its last attempt (a chained traceback from the first of its chain) to
    the log's end; with no traceback, its last FAILURE_LAST_LINES lines. {} without a log."""
    try:
        with open(log_path(job), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            base = max(0, size - FAILURE_READ_MAX)
            f.seek(base)
            data = f.read(size - base)
    except OSError:
        return {}
    if base and b"\n" in data:  # the window began inside a line: from the next whole one
        cut = data.index(b"\n") + 1
        base, data = base + cut, data[cut:]
    lines = data.splitlines(keepends=True)
    if not data.strip():
        return {}
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    floor = max((i for i, line in enumerate(lines) if _ATTEMPT.match(line)), default=0)
    tb = max((i for i in range(floor, len(lines)) if _TRACEBACK in lines[i]), default=None)
    while tb is not None:  # "During handling of the above exception": its cause first
        before = next((i for i in range(tb - 1, floor - 1, -1) if lines[i].strip()), None)
        if before is None or not any(c in lines[before] for c in _CHAINED):
            break
        earlier = max((i for i in range(floor, before) if _TRACEBACK in lines[i]), default=None)
        if earlier is None:
            break
        tb = earlier
    begin = max(floor, len(lines) - FAILURE_LAST_LINES) if tb is None \
        else max(floor, tb - FAILURE_CONTEXT_LINES)
    offset = base + starts[begin]
    return {"offset": offset, "max_bytes": min(FAILURE_READ_MAX, size - offset + FAILURE_MARGIN)}


def _next_calls(job: Job, front: str) -> dict[str, Any]:
    """What an agent calls next: wait on a live job until it ends (it returns then, or when the
    job needs a person: no sleep loop), read the log of one that ended (of a failed one, from
    where its error starts: `_failure_read`), look at one held for a person. `resource` is the job's MCP resource: a client that subscribes to it is told
    when the job's state changes, without calling anything."""
    short = job.short_id
    held = job.state == State.AWAITING_APPROVAL
    failed = job.state == State.FAILED  # its log first, read from where its error starts
    if front == "compute":
        status = ("compute_job", {"action": "wait", "job": short, "timeout_s": 0})
        nxt = status if held else \
            ("compute_job", {"action": "logs", "job": short, **_failure_read(job)}) if failed else \
            ("compute_job", {"action": "artifacts", "job": short}) if job.state in TERMINAL \
            else ("compute_job", {"action": "wait", "job": short, "until": "end"})
    else:
        status = ("gpu_status", {"job": short})
        nxt = status if held else ("gpu_logs", {"job": short, **_failure_read(job)}) if failed \
            else ("gpu_logs", {"job": short}) if job.state in TERMINAL \
            else ("gpu_wait", {"job": short, "until": "end"})
    return {"follow": tool_call(nxt[0], **nxt[1]), "status": tool_call(status[0], **status[1]),
            "next_call": {"tool": nxt[0], "arguments": nxt[1]},
            "resource": JOB_RESOURCE + short, "shell": f"gpu logs -f {short}"}


def guidance(job: Job, submitted: bool, front: str = "cli") -> dict[str, Any]:
    """What the caller does next, in its own front's words: shell commands for the CLI, tool
    calls for an agent over MCP (`front` "gpu" for the gpu_* tools, "compute" for compute_job)."""
    if front == "cli":
        doc: dict[str, Any] = {"follow": f"gpu logs -f {job.short_id}",
                               "status": f"gpu status {job.short_id}"}
    else:
        doc = _next_calls(job, front)
    doc["needs_approval"] = job.state == State.AWAITING_APPROVAL
    slot = job.handle.get("slot_held") or {}  # a target with a free slot would hold it (reroute.py)
    held = slot.get("note") if slot.get("at") == job.provider and job.state == State.ROUTING else None
    queue = job.handle.get("queue_stuck") or held or job.handle.get("queue_note")
    if queue and job.state not in TERMINAL:  # it did not start where it was placed (queuewait.py)
        doc["queue"] = queue
    if not submitted:
        doc["note"] = (f"job {job.short_id} with the same request is still {job.state.value}: "
                       "returned it instead of starting a second copy")
    if job.state == State.AWAITING_APPROVAL:
        from core.planning.policy import plain_paragraph

        # a plan stored by an older version, or the reason, may hold raw text: filter on read
        doc["tell_user"] = plain_paragraph(job.plan.get("tell_user") or job.reason)
        doc["approve"] = f"gpu approve {job.short_id}"
    return doc


# -- cancel --------------------------------------------------------------------------------


CHECKPOINT_GRACE_S = 60.0  # `gpu cancel --checkpoint`: how long the job has to save
# The most a cancel's checkpoint grace may be, at every front. A job asked to save goes on
# running (and costing) meanwhile: a grace of a day was a way round the overrun rule.
MAX_CHECKPOINT_GRACE_S = 300.0


def cancel(store: Store, ref: str, *, actor: str = "cli", wait_s: float = 15.0,
           checkpoint: bool = False, grace_s: float = CHECKPOINT_GRACE_S) -> Job:
    """Stop a job and record it cancelled; waits up to `wait_s` for it to end.

    With `checkpoint`, a running job is first asked to save (the request
    gpu.should_checkpoint() sees when a session nears its end); the supervisor stops it once
    a checkpoint newer than the one home held came home, or after `grace_s` (jobsteps.py
    `_checkpoint_then_cancel`). A job not running yet has nothing to save: it is cancelled.

    The grace is bounded (MAX_CHECKPOINT_GRACE_S, and the overrun rule: the supervisor stops a
    job that runs past its hours x overrun_factor in its grace), and asking again keeps the
    grace first asked for: a repeated request never starts it over."""
    if not 0 <= grace_s <= MAX_CHECKPOINT_GRACE_S:
        raise UserError(f"a checkpoint grace of {grace_s:g} s is out of range: at most "
                        f"{MAX_CHECKPOINT_GRACE_S:g} s", fix=f"pass --grace between 0 and {MAX_CHECKPOINT_GRACE_S:g}")
    job = store.resolve(ref)
    if job.state in TERMINAL:
        raise UserError(f"job {job.short_id} already ended ({job.state.value})",
                        fix="nothing to cancel")
    with store.write():
        job = store.get(job.id)
        if job.state not in LAUNCHED:
            return store.transition(job.id, State.CANCELLED, f"cancelled by {actor}", actor=actor)
        asked = job.handle.get("cancel_checkpoint") or {}
        if checkpoint and (job.cancel_requested or job.cancel_checkpoint):  # being stopped: no fresh grace
            started = float(asked.get("asked_at") or asked.get("at") or time.time())
            kept = (f"the grace asked for at {time.strftime('%H:%M:%S', time.localtime(started))} "
                    f"({float(asked.get('grace_s') or CHECKPOINT_GRACE_S):g} s) is kept, not started over"
                    if job.cancel_checkpoint else "it is already being stopped")
            store.add_event(job.id, f"cancel with a checkpoint asked again by {actor}: {kept}", actor=actor)
            wait_s = max(0.0, min(wait_s, started + float(asked.get("grace_s") or 0) + 30.0 - time.time()))
        elif checkpoint and job.state in (State.RUNNING, State.CHECKPOINTING):
            ckpt = checkpoints.summary(job.id)
            store.update(job.id, cancel_requested=CANCEL_AFTER_CHECKPOINT, handle={**job.handle, "cancel_checkpoint": {
                "by": actor, "at": time.time(), "grace_s": grace_s,
                "home_generation": ckpt["generation"] if ckpt else None}})
            store.add_event(job.id, f"cancel requested by {actor}: asking it to checkpoint first "
                                    f"(stopped once the checkpoint is home, or after {grace_s:g} s)",
                            actor=actor, data={"grace_s": grace_s, "checkpoint": ckpt})
            wait_s = max(wait_s, grace_s + 30.0)
        else:
            store.update(job.id, cancel_requested=1)
            store.add_event(job.id, f"cancel requested by {actor}" + (
                f" ({job.state.value}: not running yet, so nothing to checkpoint)" if checkpoint else ""),
                actor=actor)
    from core.engine.daemon import ensure_running

    ensure_running()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        job = store.get(job.id)
        if job.state in TERMINAL:
            break
        time.sleep(0.1)
    return job


# -- bringing a job home -------------------------------------------------------------------


KEPT_DIR = "outputs-kept"  # jobs/<id>/outputs-kept/: a job's outputs when runs/<id>/ is refused
RUNS_IGNORE = "# gpu-router: job outputs stay out of git\n*\n"


def runs_folder(job: Job) -> Path:
    """The job's `runs/<short_id>/`, made on first use with `runs/.gitignore` holding `*`, both
    through the one writer under runs/ (core/packaging/runswriter.py): runswriter.Refused when
    `runs/` or `runs/<id>/` is a link, not a folder, or not the person's.

    Outputs can be large and private; the ignore file means `git add -A` in the project never
    commits them (and, matching itself, it stays out of `git status` too).
    """
    dest = Path(job.outputs_dir)
    ignore_runs(dest.parent)
    runswriter.check(dest)
    return dest


def ignore_runs(runs: Path) -> None:
    """`runs/.gitignore`, made once, exclusively and never through a link (one planted there
    stays as it is: nothing is written through it). A `runs/` the writer refuses gets none:
    nothing is written into it, and its jobs' outputs are kept at home (`outputs_folder`)."""
    try:
        runswriter.ensure_ignored(runs, RUNS_IGNORE)
    except runswriter.Refused:
        pass


def kept_folder(job: Job) -> Path:
    """Where a job's outputs are kept when its runs/<id>/ is refused: its own folder in
    gpu-router's home, which no agent working in the project can reach."""
    return paths.jobs_dir() / job.id / KEPT_DIR


def outputs_where(job: Job) -> Path:
    """Where the job's outputs are: runs/<id>/, or its folder at home once that was refused."""
    return Path((job.handle.get("outputs_kept") or {}).get("dir") or job.outputs_dir)


def outputs_folder(store: Store, job: Job) -> Path:
    """Where the job's outputs, job.json and settled checkpoint go now: runs/<id>/ while the
    writer accepts it, else (and from then on, so they stay together) the job's folder at home,
    said once as an event (`keep_at_home`)."""
    kept = (store.get(job.id).handle.get("outputs_kept") or {}).get("dir")
    if kept:
        return Path(kept)
    try:
        return runs_folder(job)
    except runswriter.Refused as exc:
        return keep_at_home(store, job, exc)
    except OSError as exc:  # a project gone or read-only: its outputs are not lost either
        return keep_at_home(store, job, runswriter.Refused(
            job.outputs_dir, f"not writable ({exc.strerror or exc})"))


def keep_at_home(store: Store, job: Job, refused: runswriter.Refused) -> Path:
    """runs/<id>/ was refused: record why and where the outputs are kept instead (the job's
    handle `outputs_kept`, read by `gpu status`, and an event), and return that folder."""
    where = kept_folder(job)
    why = f"{refused.where} is {refused.why}" if refused.why.startswith(("a ", "an ", "not ")) \
        else f"{refused.where}: {refused.why}"
    with store.write():
        fresh = store.get(job.id)
        kept = fresh.handle.get("outputs_kept")
        if kept:
            return Path(kept["dir"])
        store.update(job.id, handle={**fresh.handle, "outputs_kept": {"dir": str(where), "why": why}})
        store.add_event(job.id, f"outputs kept at home in {where}, not written to {job.outputs_dir}: "
                                f"{why} (gpu-router writes under runs/ only into plain folders of "
                                "yours, never through a link)",
                        actor="supervisor", data={"outputs_kept": str(where), "why": why})
    return where


def write_outputs(store: Store, job: Job, write: Callable[[Path], Any]) -> Any:
    """`write(folder)` into the job's outputs folder; a refusal met on the way (a link swapped
    in after the check) keeps them at home instead, so nothing is lost."""
    try:
        return write(outputs_folder(store, job))
    except runswriter.Refused as exc:
        return write(keep_at_home(store, job, exc))


async def bring_home(store: Store, job: Job, provider: Any) -> list[str]:
    """The job's outputs into runs/<id>/ (or kept at home: `outputs_folder`); for a job that
    holds secrets, under names masked with their values, read from the keychain now
    (core/secrets/names.py)."""
    import asyncio  # lazy: off `gpu submit`'s start
    from core.secrets import names

    dest = await asyncio.to_thread(outputs_folder, store, job)
    try:
        mask = await asyncio.to_thread(names.for_job, job)
        with disk_full_guard(dest.parent), masked_names(mask.mask if mask else None):
            try:
                notes = await provider.fetch_outputs(job, dest)
            except runswriter.Refused as exc:  # swapped in after the check: kept at home
                dest = await asyncio.to_thread(keep_at_home, store, job, exc)
                notes = await provider.fetch_outputs(job, dest)
        return [mask.mask(n) for n in notes] if mask else notes  # a provider's own notes too
    except UserError as exc:
        return [f"outputs could not be brought home to {dest}: {exc.what}"]
    except OSError as exc:
        return [f"outputs could not be brought home to {dest}: {exc}"]


def settle_checkpoint(store: Store, job: Job) -> str | None:
    """The ended job's last checkpoint into its outputs folder (`checkpoints.settle`), kept at
    home with them when runs/<id>/ is refused. Returns a note when it could not be kept."""
    return write_outputs(store, job, lambda folder: checkpoints.settle(job.id, folder))


NO_METRICS = "no metrics were tracked"  # the compute contract's words, said at a job's end


def end_warnings(job: Job, tracked: bool) -> tuple[dict[str, Any], list[str]]:
    """What a person or an agent checks first when a job ends and that the job did not do:
    declared outputs (gpu.yaml `outputs`, compute_job's `artifacts`) that nothing in
    runs/<id>/ matches, and no metric logged at all. Returns the fields kept in the job's
    handle as `ended` (read by `job_report`) and one warning sentence for each, for its events.
    A job that ends like this still ends as it would (done, failed): these are warnings.
    `tracked`: whether it logged any metric or final number (the store's; this reads only files)."""
    from core.runtime.workdir import declared

    fields: dict[str, Any] = {}
    texts: list[str] = []
    patterns = [p for p in (job.request.get("outputs") or []) if isinstance(p, str) and p.strip()]
    if patterns:
        dest = outputs_where(job)
        rels: list[str] = []
        for top, dirs, files in os.walk(dest):  # links are not followed
            base = Path(top).relative_to(dest)
            rels += [(base / f).as_posix() for f in files if not (top == str(dest) and f == "job.json")]
            if len(rels) > 200_000:
                break
        missing = [p for p in patterns if not any(declared(r, [p]) for r in rels)]
        if missing:
            fields["missing_artifacts"] = missing
            texts.append(f"warning: declared artifact{'s' * (len(missing) != 1)} "
                         f"{', '.join(missing)} not written: nothing in {dest} matches "
                         f"{'them' if len(missing) != 1 else 'it'}")
    if not tracked:
        fields["no_metrics"] = True
        texts.append(f"{NO_METRICS}: the job logged none (gpu.log(step=..., loss=...), or wandb / "
                     "openscience_track, show curves in gpu metrics and the dashboard)")
    return fields, texts


def job_report(store: Store, job: Job, verbose: bool = False) -> dict[str, Any]:
    """The job object of `gpu status ID --json` and job.json: the job, what its tracking
    reported (`config`, `final` numbers; absent when none unless verbose), and its estimate
    against what it took (`estimate`, `actual`: hours and cost)."""
    doc = job.to_json(verbose=verbose)
    for key, value in (("config", job.config), ("final", job.final)):
        if value or verbose:
            doc[key] = value
    doc.update(estimate_and_actual(store, job))
    ckpt = checkpoints.summary(job.id)
    if ckpt is not None:
        doc["checkpoint"] = ckpt  # the last complete checkpoint at home: age_s, bytes, files
    if job.handle.get("outputs_kept"):  # runs/<id>/ was refused: {dir, why}
        doc["outputs_kept"] = job.handle["outputs_kept"]
    if job.state == State.PROVISIONING:
        from core.runtime import uvenv

        progress = uvenv.install_progress(job.reason)
        if progress is not None:  # the numbers of "fetching 12 packages, 412.0 MB of 1.2 GB"
            doc["install_progress"] = progress
    paused = mirroring_paused(store, job)
    if paused:
        doc["checkpoint_mirroring"] = paused  # "checkpoint mirroring paused: disk full at ..."
    from core.jobs.states import TERMINAL

    ended = job.handle.get("ended") or {} if job.state in TERMINAL else {}
    if ended.get("missing_artifacts"):  # declared, and nothing that came home matches them
        doc["missing_artifacts"] = ended["missing_artifacts"]
    if ended.get("no_metrics"):
        doc["metrics_note"] = NO_METRICS
    return doc


def mirroring_paused(store: Store, job: Job) -> str | None:
    """Why checkpoints stopped coming home (a full disk at home), while the job is live."""
    from core.jobs.states import TERMINAL

    if job.state in TERMINAL:
        return None
    return checkpoints.paused_note(store.events(job.id))


def job_document(store: Store, job: Job) -> dict[str, Any]:
    return {"job": job_report(store, job, verbose=True),
            "events": [e.to_json() for e in store.events(job.id)],
            "metrics": store.metrics_summary(job.id)}


def write_job_json(store: Store, job: Job) -> Path:
    """job.json in the job's outputs folder, through the one writer under runs/ (a fresh file
    made exclusively and renamed into place: a planted `job.json` or `job.json.tmp` link is
    never written through)."""
    folder = outputs_folder(store, job)
    # read by people and agents alike: the one filter of machine output (no tag character or
    # other invisible one a job printed into its config or a reason comes back from \u escapes)
    def write(where: Path) -> Path:
        data = json.dumps(printable_doc(job_document(store, store.get(job.id))), indent=2,
                          sort_keys=True).encode("utf-8", "surrogateescape")
        with runswriter.open_folder(where) as out:
            out.write("job.json", data)
        return where / "job.json"
    try:
        return write(folder)
    except runswriter.Refused as exc:
        return write(keep_at_home(store, job, exc))


def log_path(job: Job) -> Path:
    return paths.jobs_dir() / job.id / "job.log"
