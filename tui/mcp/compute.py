"""`compute_job`: the compute contract's one tool, over the same engine as the gpu_* tools.

`action` picks what happens: targets | plan | start | wait | logs | artifacts | cancel |
resume. A start
is a submit whose request is made from `command` (a command line run in `cwd`, the project),
`artifacts` (what comes home: gpu-router's `outputs`) and `checkpoint` (the folder where the
command keeps its checkpoints: the request's `checkpoint`, made the job's gpu.checkpoint_dir(),
so it is mirrored home while the job runs, restored on a move or a resume, and ends in
`runs/<id>/checkpoint/`). With the `digest` of an earlier `plan`, a start whose fresh
plan differs is held for a person's approval with that reason: it never runs on a plan nobody
saw. `purpose` is recorded with the job as an event. A cancel with `checkpoint_first` asks the
job to save before it stops; a resume runs an ended job again from its checkpoint under the
approval rules for an agent (core/engine/resume.py): it may be held, and no tool approves.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from core.errors import UserError
from tui.mcp.schema import COMPUTE_RESOURCES as RESOURCES
from tui.mcp.schema import START_WAIT_S
from tui.mcp.tools import (ACTOR, Call, Engine, argument, gpu_logs, gpu_wait, settling, stage)

TOOL = "compute_job"
NEEDS = {"start": ("command", "cwd"), "plan": ("command", "cwd"), "wait": ("job",),
         "logs": ("job",), "artifacts": ("job",), "cancel": ("job",), "resume": ("job",),
         "targets": ()}
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def _name(text: str | None) -> str | None:
    """A job name from what the agent wrote: "train yolo v2" becomes "train-yolo-v2"."""
    if not text:
        return None
    return _NAME_BAD.sub("-", text).strip("-")[:64] or None


def _request(engine: Engine, args: dict[str, Any]):
    """The same request for `plan` and `start`, so the same arguments give the same digest.
    `cwd` is a folder under the server's projects root (Engine.project)."""
    from core.config.request import build_request

    cwd = engine.project(TOOL, "cwd", args["cwd"])
    outputs = [*(args.get("artifacts") or [])]
    where = argument(TOOL)
    names = {"script": "command", "outputs": "artifacts", "project_dir": "cwd"}
    # the resources (gpu, vram_gb, the scheduler's, env, data) are the request's own keys: each
    # passes the check gpu.yaml's key and the CLI's option pass (env its secret gate too)
    resources = {key: args.get(key) for key in RESOURCES}
    req = build_request(cwd, {"script": args["command"], "name": _name(args.get("name")),
                              "outputs": outputs or None, "hours": args.get("hours"),
                              "checkpoint": args.get("checkpoint"),
                              "provider": args.get("provider"), "sweep": args.get("sweep"),
                              **resources},
                        argument=lambda key: where(names.get(key, key)))
    # the command is the whole line: gpu.yaml's args belong to gpu.yaml's script
    return dataclasses.replace(req, args=[])


def compute_job(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    action = args["action"]
    missing = [k for k in NEEDS[action] if not args.get(k)]
    if missing:
        raise UserError(f"action {action} needs {' and '.join(missing)}",
                        where=f"{TOOL} argument {missing[0]}",
                        fix=f"call {TOOL} with action={action!r} and {', '.join(missing)}")
    if action == "targets":
        from core.engine.reports import targets_doc

        return targets_doc(engine.store())
    if action == "plan":
        from core.engine.reports import plan_doc
        from core.engine.service import prepare

        req = _request(engine, args)
        if req.sweep:
            from core.engine.sweeps import preview

            return preview(req, interactive=False, store=engine.store(supervise=False), progress=stage(call))
        bundle, plan = prepare(req, interactive=False,
                               store=engine.store(supervise=False), progress=stage(call))
        return {**plan_doc(bundle.summary(), plan), "digest": plan["digest"]}
    if action == "start":
        return _start(engine, args, call)
    if action == "wait":
        return gpu_wait(engine, args, call, front="compute")
    if action == "logs":
        return gpu_logs(engine, args, call)
    if action == "artifacts":
        from core.engine.reports import artifacts_doc

        return artifacts_doc(engine.job(args["job"]))
    from core.engine.reports import job_only
    from core.engine.cancelling import CHECKPOINT_GRACE_S, cancel
    from core.engine.guidance import guidance

    store = engine.store()
    group = engine.group(args["job"])
    if group is not None:  # a sweep: the whole group
        from core.engine.sweeps import cancel_group, resume_group

        if action == "resume":
            done = resume_group(store, group, actor=ACTOR)
            return {"group": group.to_json(),
                    "jobs": [{**j.to_json(), **({"not_resumed": why} if why else {})} for j, why in done]}
        grace = args.get("grace_s")  # a group's cancel keeps the flags one job's has
        return {"group": group.to_json(), "jobs": [j.to_json() for j in cancel_group(
            store, group, actor=ACTOR, checkpoint=bool(args.get("checkpoint_first")),
            grace_s=None if grace is None else float(grace))]}
    if action == "resume":
        from core.engine.resume import resume

        job = resume(store, store.resolve(args["job"]).id, actor=ACTOR, interactive=False)
        return {**job_only(job), "guidance": guidance(job, True, front="compute")}
    grace = args.get("grace_s")
    return job_only(cancel(store, store.resolve(args["job"]).id, actor=ACTOR,
                           checkpoint=bool(args.get("checkpoint_first")),
                           grace_s=CHECKPOINT_GRACE_S if grace is None else float(grace)))


def _start(engine: Engine, args: dict[str, Any], call: Call) -> dict[str, Any]:
    """Submit, then wait out the grace (`wait_s`): a job that ends in it comes back with its
    outcome and its log's tail (`submit_doc`); one still running, with where it is."""
    from core.engine.reports import submit_doc
    from core.engine.sweeps import submit  # a sweep as one group, else one job

    store = engine.store(supervise=False)
    req = dataclasses.replace(_request(engine, args), wait_s=float(args.get("wait_s", START_WAIT_S)))
    bundling, waiting = settling(call)
    result = submit(req, actor=ACTOR, interactive=False, store=store, front="compute",
                    expect_digest=args.get("digest"), progress=bundling, settle=True,
                    cancelled=call.cancelled, tick=waiting, purpose=args.get("purpose"))
    doc = submit_doc(store, result, verbose=bool(args.get("verbose")))
    doc["digest"] = result.group.digest if hasattr(result, "group") else result.job.digest
    return doc
