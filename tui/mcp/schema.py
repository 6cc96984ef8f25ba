"""What `gpu mcp` serves: each tool's name, description and input schema, in one place.

`gpu_submit` is the submit contract (shared/contract/gpu_submit.md) word for word: its
description is the contract's text and its input schema has exactly the contract table's
fields, names, descriptions and types (tests/tui/mcp/test_mcp.py compares them field by field with
what a client lists). The sibling tools and `compute_job` are gpu-router's own.

Only plain data lives here (no SDK import), so the schema can be read and tested without
starting a server.
"""

from __future__ import annotations

from typing import Any

SUBMIT_TITLE = "Gpu Submit"
SUBMIT_DESCRIPTION = "\n\n".join([
    "Submit and run a script on a free cloud GPU for training, fine-tuning, or evals; it "
    "packages the project, installs dependencies remotely, and keeps the job running.",
    "Run a script on a free cloud GPU (or this Mac for smoke tests). gpu-router packages the "
    "project (git-tracked and untracked-but-not-ignored files, plus include; credential files "
    "never ship), installs requirements.txt / pyproject.toml deps remotely, picks the provider "
    "and returns at once; the job keeps running when this call returns. bundle.left_out lists "
    "git-ignored paths that did not ship (with bundle.hint): add code with include, datasets "
    "with data.",
    "Use it for training, fine-tuning, evals or anything that needs a CUDA GPU or would take "
    "long on the laptop. Do NOT use it for quick CPU work that runs fine locally in seconds.",
    "gpu.yaml in the project root is read first; these arguments override it. Give hours (an "
    "honest wall-clock estimate): an agent job with no hours or over 1 hour waits for the "
    "user's approval, as does reading Keychain secrets or using over half a provider's "
    "remaining quota, and a job still running well past its hours is stopped for approval. "
    "Then the result says guidance.needs_approval=true with guidance.tell_user: relay it to "
    "the user word for word and end your turn; do not approve, resubmit or switch providers "
    "yourself.",
    "Safe to retry: calling it again with the same arguments while that job is still active "
    "returns it (submitted=false) instead of starting a second copy; request_id makes that "
    "explicit. Returns {\"job\": {...}, \"guidance\": {...}, \"submitted\": true, \"bundle\": "
    "{files, bytes, left_out?, hint?, warnings?}}. job.short_id is the ref for the other tools. "
    "States: queued -> routing -> (awaiting_approval) -> provisioning -> running (<-> "
    "checkpointing, -> migrating when a session ends and it resumes elsewhere) -> done | failed "
    "| cancelled | denied. Outputs the script writes to gpu.output_dir() land in "
    "<project_dir>/runs/<short_id>/ (job.outputs_dir). Follow guidance.follow (see gpu_status).",
])


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _number(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "number", "description": description, **extra}


def _integer(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "description": description, **extra}


def _bool(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


# the contract's table, in its order; each description is the contract's own text
SUBMIT_PROPERTIES: dict[str, dict[str, Any]] = {
    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description":
            "Non-secret environment variables for the job. Secret-looking names or values are "
            "refused: secrets go in the Keychain (`gpu secrets set NAME`) and are listed under "
            "`secrets:` in gpu.yaml."},
    "gpu": _str("GPU type constraint, e.g. T4. Usually omit."),
    "args": _strings("Arguments passed to the script, e.g. [\"--epochs\", \"10\"]."),
    "data": _strings("Datasets as [NAME=]PATH (relative to project_dir, or absolute) or "
                     "hf://datasets/... URIs. Uploaded once, cached by content, readable at "
                     "gpu.data_dir()/NAME on the GPU."),
    "name": _str("Short job name for humans."),
    "hours": _number("Honest expected wall-clock runtime in hours (e.g. 0.25 for 15 minutes). "
                     "Agent jobs with no hours or over 1 hour wait for approval, and a job still "
                     "running well past its hours is stopped for approval."),
    "smoke": _bool("A quick smoke test: prefers this Mac (MPS) and runs in minutes."),
    "script": _str("Script to run, relative to project_dir (e.g. train.py or scripts/train.py). "
                   "Omit to use gpu.yaml's `script`. A non-.py value runs as a command line, "
                   "split like a shell would, e.g. `bash jobs/run.sh`. Paths in it and in args "
                   "are relative to project_dir and must ship (see bundle.warnings)."),
    "wait_s": _number("Seconds to wait for the job to be placed or to need approval before "
                      "returning (default 10).", default=10),
    "include": _strings("Paths or globs relative to project_dir that ship even if git ignores "
                        "them, e.g. [\"third_party/\", \"data/crops/*.png\", "
                        "\"experiments/**/out\"] (a directory ships whole; nested git repos "
                        "too). Added to gpu.yaml `include:`. For code and small files; pass "
                        "datasets as data. Credential files never ship."),
    "verbose": _bool("Return the full documents (null fields, every event) instead of the "
                     "trimmed ones."),
    "vram_gb": _number("GB of GPU memory the job needs (a hard filter)."),
    "provider": _str("Pin one provider (kaggle, colab, local, ...). local = this Mac through "
                     "gpu-router's queue, one job at a time. Usually omit and let gpu-router "
                     "choose."),
    "request_id": _str("Optional id of this submission (e.g. train-yolo-3): calling again with "
                       "the same request_id returns the same job. Without it, an identical job "
                       "that is still active is returned instead of a duplicate; a new "
                       "request_id starts another copy on purpose."),
    "project_dir": _str("Absolute path of the project directory on this Mac (where the script "
                        "and gpu.yaml live; inside a git repo the whole repo ships). Example: "
                        "/Users/me/code/yolo"),
}
# beyond the contract's table, optional: a sweep (docs/sweeps.md)
SWEEP = {"type": ["object", "array"], "description":
         "Optional: run the job at many points as one group, held and approved once: an object "
         "KEY: [values] is the grid of every combination, an array of objects gives the points. "
         "Each run reads its values as environment variables, gpu.params() and {KEY} in args; "
         "the result is {group, jobs, guidance, submitted, bundle}, and group.short_id works "
         "wherever a job id does."}
SUBMIT_PROPERTIES["sweep"] = SWEEP


def _object(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


JOB = _str("The job: its short_id (job.short_id of gpu_submit's result), its full id, a unique "
           "prefix, or last (the newest job).")
WAIT_DEFAULT_S = 50.0  # under the 60 s request timeout many MCP clients keep
WAIT_MAX_S = 600.0
LOGS_DEFAULT_LINES = 100

_WAIT_TIMEOUT = _number(f"Seconds to wait at most (default {WAIT_DEFAULT_S:g}, at most "
                        f"{WAIT_MAX_S:g}); 0 returns the status at once.",
                        default=WAIT_DEFAULT_S, minimum=0, maximum=WAIT_MAX_S)
_UNTIL = {"type": "string", "enum": ["change", "end"], "default": "change", "description":
          "What to wait for. change (the default): any change of the job's state (placed, "
          "running, checkpointing, ended). end: the job ending (done, failed, cancelled, "
          "denied), or it waiting for a person's approval, which no tool gives: the steps "
          "between are skipped, so one call covers the whole run up to timeout_s."}
START_WAIT_S = 10.0  # compute_job start's grace, as gpu_submit's wait_s default
_OFFSET = _integer("Read from this byte offset (next_offset of the previous call) instead of "
                   "the tail: at most max_bytes, ending at a whole line.", minimum=0)
_MAX_BYTES = _integer("The most bytes one read by offset returns (default 65536).",
                      default=65536, minimum=1, maximum=1 << 20)

# gpu_plan takes gpu_submit's arguments; the contract fixes gpu_submit's words only, so here
# they say "this machine" (gpu-router runs on Linux too) and name the one step an agent cannot
# take with a tool as the user's
_PLAN_WORDS = {
    "env": "Non-secret environment variables for the job. Secret-looking names or values are "
           "refused: secrets live in the keychain (the user stores one at their terminal with "
           "`gpu secrets set NAME`) and are listed under `secrets:` in gpu.yaml.",
    "smoke": "A quick smoke test: prefers this machine (its GPU, or Apple's MPS) and runs in minutes.",
    "provider": "Pin one target kind (kaggle, modal, ssh, slurm, pbs, local) or a target name "
                "(see gpu_targets). local = this machine through gpu-router's queue, one job at "
                "a time. Usually omit and let gpu-router choose.",
    "project_dir": "Absolute path of the project directory on this machine (where the script "
                   "and gpu.yaml live; inside a git repo the whole repo ships). Example: "
                   "/home/me/code/yolo",
}
PLAN_PROPERTIES = {k: ({**v, "description": _PLAN_WORDS[k]} if k in _PLAN_WORDS else v)
                   for k, v in SUBMIT_PROPERTIES.items()
                   if k not in ("wait_s", "request_id", "verbose")}

# name -> (title, description, input schema)
GPU_TOOLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpu_submit": (SUBMIT_TITLE, SUBMIT_DESCRIPTION, _object(SUBMIT_PROPERTIES, ["project_dir"])),
    "gpu_status": ("Gpu Status", (
        "One job: its state and the reason for it, elapsed time against its hours estimate, "
        "cost so far, each metric's last value, outputs_dir, guidance (guidance.follow is the "
        "call to make next) and, with log_lines, the log's tail."),
        _object({"job": JOB,
                 "log_lines": _integer("Also return the last N lines of the job's log (log_tail).",
                                       minimum=1, maximum=10_000),
                 "verbose": _bool("Return the full documents (request, plan, every event).")},
                ["job"])),
    "gpu_wait": ("Gpu Wait", (
        "Block until the job changes state or ends (until=\"change\", the default), or until "
        "it ends or needs approval (until=\"end\"), or timeout_s passes; then return its "
        "status (the same document as gpu_status, with wait.changed saying whether it moved "
        "and wait.ended whether it ended). Call it instead of sleeping. Calling it again "
        "continues the watch. A client can also subscribe to the job's resource "
        "(guidance.resource, gpu://jobs/<short_id>) and be notified when it changes."),
        _object({"job": JOB, "timeout_s": _WAIT_TIMEOUT, "until": _UNTIL,
                 "log_lines": _integer("Also return the last N lines of the job's log.",
                                       minimum=1, maximum=10_000),
                 "verbose": _bool("Return the full documents (request, plan, every event).")},
                ["job"])),
    "gpu_logs": ("Gpu Logs", (
        f"The job's log as printable text: the last `tail` lines (default {LOGS_DEFAULT_LINES}), "
        "or from a byte offset (pass next_offset of the previous call to read on). Lines from "
        "gpu-router itself start with [gpu-router]."),
        _object({"job": JOB,
                 "tail": _integer("Only the last N lines.", minimum=0, maximum=100_000),
                 "offset": _OFFSET, "max_bytes": _MAX_BYTES}, ["job"])),
    "gpu_metrics": ("Gpu Metrics", (
        "The job's metrics (what it logs with gpu.log): last, min, max and point count per "
        "key; with series, every point (step, value, ts)."),
        _object({"job": JOB, "key": _str("Only this metric, e.g. loss."),
                 "series": _bool("Also return every point of each metric.")}, ["job"])),
    "gpu_cancel": ("Gpu Cancel", (
        "Stop the job (every process it started) and record it cancelled. Final."),
        _object({"job": JOB}, ["job"])),
    "gpu_jobs": ("Gpu Jobs", "Every job, newest first: id, name, state, target, hours, last metric.",
                 _object({"state": _str("Only these states, comma-separated, e.g. "
                                        "running,awaiting_approval."),
                          "active": _bool("Only jobs that have not ended."),
                          "limit": _integer("At most this many (default 50).", default=50,
                                            minimum=1, maximum=10_000)}, [])),
    "gpu_targets": ("Gpu Targets", (
        "The targets a job can run on: GPUs, VRAM, availability and why not, quota left this "
        "week, price per hour, jobs running."), _object({}, [])),
    "gpu_accounts": ("Gpu Accounts", (
        "The person's GPU cloud accounts (TensorPool, Lambda, Prime Intellect, Vast.ai, RunPod), "
        "read only, as `gpu accounts` shows them: each account's state, balance, offers (GPU, "
        "VRAM, price per hour, availability) and running instances with their cost so far. "
        "Nothing is rented or started through it; an account with no key says how the user "
        "adds one. Readings are cached for minutes; refresh reads them again."),
        _object({"refresh": _bool("Read every account again instead of a recent cached reading.")}, [])),
    "gpu_plan": ("Gpu Plan", (
        "Preview gpu_submit with the same arguments without submitting: the target chosen and "
        "why, what was passed over, the GPU, hours and price, the rules that would hold it for "
        "approval, what ships, and the plan's digest."),
        _object(PLAN_PROPERTIES, ["project_dir"])),
}

COMPUTE_ACTIONS = ("targets", "plan", "start", "wait", "logs", "artifacts", "cancel", "resume")
COMPUTE_DESCRIPTION = (
    "Run a command on a GPU and follow it: one tool, an action each call. targets: where jobs "
    "can run. plan: what start would do with the same arguments (target, price, rules that "
    "would hold it, digest) without starting. start: package cwd and run command there, and wait "
    "up to wait_s (the grace, default 10 s) for it to end: a job that ends in it comes back "
    "with its final state, exit_code and job.log_tail (and job.missing_artifacts: declared "
    "artifacts it did not write); a longer one comes back running, with "
    "guidance.resource, the MCP resource to subscribe to for a notification when it ends. A "
    "failed job's guidance.next_call reads its log from where its error starts. plan and start "
    "also take what the job needs (gpu, vram_gb, gpus, cpus, memory_gb, time_minutes, "
    "partition, modules, container, image, packages, env, data), checked as gpu.yaml's keys of "
    "those names. Pass "
    "the digest from plan so that, if the plan changed since (another target, another bundle), "
    "the job waits for a person's approval instead of running. wait: block until the job "
    "changes state or ends (until=\"end\": until it ends or needs approval; timeout_s), then "
    "return its status. logs: its output, by tail or "
    "byte offset. artifacts: the files that came home to its outputs folder, and "
    "missing_artifacts, the declared ones it did not write. cancel: stop it "
    "(checkpoint_first: ask it to save, bring that checkpoint home, then stop it). resume: run "
    "a cancelled or failed job again from its last checkpoint, as the same job's next attempt; "
    "it is planned again and the approval rules apply again (it may wait for the user). "
    "A job with no hours, or over 1 hour, waits for the user's approval: then "
    "guidance.tell_user is for the user, word for word; do not approve it yourself.")
# plan/start: what the job needs, as gpu.yaml's keys and `gpu submit`'s options of the same
# names say it (core/config/request.py checks them all, one way for every front)
COMPUTE_RESOURCE_PROPERTIES: dict[str, dict[str, Any]] = {
    "gpu": _str("plan/start: the GPU type the job needs, e.g. T4, A100, H100 (a target without "
                "it is passed over; for a GPU this machine lacks, a modal target gives it), or "
                "TYPE:COUNT for several, e.g. H100:4. Usually omit."),
    "vram_gb": _number("plan/start: GB of GPU memory the job needs (a hard filter)."),
    "gpus": _integer("plan/start: GPUs per job (gpu: \"H100:4\" says type and count at once): "
                     "Modal gives 1 to 8 of one type at that many times the price; a Slurm or PBS "
                     "target is asked for them; a local or ssh target must have that many.",
                     minimum=0, maximum=1_000),
    "cpus": _integer("plan/start: CPU cores per job on a scheduler target (Slurm "
                     "--cpus-per-task).", minimum=1, maximum=10_000),
    "memory_gb": _number("plan/start: GB of memory per job on a scheduler target (Slurm --mem)."),
    "time_minutes": _integer("plan/start: the scheduler's time limit in minutes (default: from "
                             "hours).", minimum=1),
    "partition": _str("plan/start: the Slurm partition or PBS queue, e.g. gpu."),
    "modules": _strings("plan/start: environment modules a scheduler target loads first, e.g. "
                        "[\"cuda/12.1\"]."),
    "container": _str("plan/start: an Apptainer/Singularity image a scheduler target runs the "
                      "job in."),
    "image": _str("plan/start: a registry image the Modal image is built from, e.g. "
                  "python:3.11-slim or nvcr.io/nvidia/pytorch:24.01-py3 (Python 3.10+ and pip in "
                  "it); the job then runs on a modal target only."),
    "packages": _strings("plan/start: pip requirements installed into the Modal image besides the "
                         "project's requirements.txt, e.g. [\"einops==0.8.0\"]; the job then runs "
                         "on a modal target only."),
    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description":
            "plan/start: non-secret environment variables for the job, NAME: value. A "
            "secret-looking name or value is refused: secrets live in the keychain (the user "
            "stores one at their terminal with `gpu secrets set NAME`) and are listed under "
            "`secrets:` in gpu.yaml."},
    "data": _strings("plan/start: data sets as [NAME=]PATH (relative to cwd, or absolute) or "
                     "hf://datasets/OWNER/NAME URIs: uploaded once, cached by content, readable "
                     "at gpu.data_dir()/NAME."),
}
COMPUTE_RESOURCES = tuple(COMPUTE_RESOURCE_PROPERTIES)

COMPUTE_SCHEMA = _object({
    "action": {"type": "string", "enum": list(COMPUTE_ACTIONS), "description":
               "What to do: " + " | ".join(COMPUTE_ACTIONS) + "."},
    "job": _str("The job (wait, logs, artifacts, cancel, resume): the short_id start returned, or last."),
    "name": _str("plan/start: a short name for humans (letters, digits, . _ -)."),
    "purpose": _str("plan/start: why this job runs, in a sentence; recorded with the job."),
    "command": _str("plan/start: the command line to run in cwd, split like a shell would, e.g. "
                    "`python train.py --epochs 3`; a single .py path runs with the target's Python."),
    "cwd": _str("plan/start: the project's folder, named relative to the projects root (the "
                "folder gpu mcp was started in, or mcp.projects_root in the user config), e.g. "
                "\"yolo\"; the root itself, '..' and links out of it are refused (an absolute "
                "path is taken only inside the root). It ships as the job's working folder "
                "(inside a git repo the whole repo ships)."),
    "artifacts": _strings("plan/start: paths or globs relative to cwd that come home to the "
                          "job's outputs folder when it ends, e.g. [\"model.pt\", \"results/\"]."),
    "checkpoint": _str("plan/start: the folder, relative to cwd, where the command keeps its "
                       "checkpoints, e.g. \"ckpts\". It is the job's checkpoint folder "
                       "($GPU_ROUTER_CHECKPOINT_DIR, gpu.checkpoint_dir() name it too): mirrored "
                       "home while the job runs (call gpu.checkpoint_saved() after each save), "
                       "restored there when the job moves or resumes, and in the outputs as "
                       "checkpoint/ when it ends."),
    "digest": _str("start: the digest plan returned; a changed plan is held for approval."),
    "sweep": {**SWEEP, "description": "start: " + SWEEP["description"].removeprefix("Optional: ")},
    "hours": _number("plan/start: honest expected wall-clock hours; none, or over 1, waits "
                     "for approval."),
    "provider": _str("plan/start: pin a target kind (kaggle, local, ssh, slurm, pbs, modal) or "
                     "a target name (see targets); a name wins. Usually omit."),
    **COMPUTE_RESOURCE_PROPERTIES,
    "wait_s": _number(f"start: the grace, seconds to wait for the job to end before returning "
                      f"(default {START_WAIT_S:g}; at most {WAIT_MAX_S:g}); 0 returns once it is "
                      "recorded.", default=START_WAIT_S, minimum=0, maximum=WAIT_MAX_S),
    "timeout_s": _WAIT_TIMEOUT,
    "until": _UNTIL,
    "verbose": _bool("start/wait: return the full documents (null fields, every event)."),
    "checkpoint_first": _bool("cancel: ask the job to checkpoint first (gpu.should_checkpoint() "
                              "turns true), bring that checkpoint home, then stop it, so a later "
                              "resume goes on from there."),
    "grace_s": _number("cancel with checkpoint_first: stop it after this many seconds even if no "
                       "new checkpoint came home (default 60, at most 300: the engine's "
                       "MAX_CHECKPOINT_GRACE_S; it also ends when the job runs past its hours x "
                       "overrun_factor, and asking again does not start it over).", minimum=0, maximum=300),
    "tail": _integer("logs: only the last N lines (default 100).", minimum=0, maximum=100_000),
    "offset": _OFFSET,
    "max_bytes": _MAX_BYTES,
}, ["action"])

TOOLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    **GPU_TOOLS,
    "compute_job": ("Compute Job", COMPUTE_DESCRIPTION, COMPUTE_SCHEMA),
}
