"""The attempt spec that `core/runtime/launch.py` reads: one shape for every target.

Local and remote targets lay out the same folders (out, data, ckpt, ctl, metrics.jsonl,
job.log under the job's folder); only where that folder is differs.
"""

from __future__ import annotations

import os

from core.jobs.store import Job
from core.runtime.gpuutil import interval_s
from core.runtime.jobprocs import MARKER_VAR, marker_for


def launch_spec(job: Job, *, job_dir: str, attempt_dir: str, workdir: str, runtime_dir: str,
                python: str, deps: dict | None, env_secrets: dict[str, str],
                frozen_checkpoints: bool = False) -> dict:
    """The spec. `frozen_checkpoints`: the target mirrors checkpoints while the job runs (local,
    ssh, slurm, pbs), so each `gpu.checkpoint_saved()` is frozen into `ckpt-gens/` for it;
    Kaggle and Modal read the checkpoint after a session, where extra copies would only cost."""
    command = list(job.plan["command"])
    if job.plan.get("python_file", command[0].endswith(".py")):
        command = ["{python}", *command]
    return {
        "job_id": job.id, "short_id": job.short_id, "attempt": job.attempt, "tag": f"{attempt_dir}/spec.json",
        "attempt_dir": attempt_dir, "workdir": workdir, "log": f"{job_dir}/job.log",
        "runtime_dir": runtime_dir, "base_python": python, "command": command, "deps": deps,
        "secret_env": sorted(env_secrets),  # names only: values travel in memory
        "outputs": list(job.request.get("outputs") or []),  # brought into out/ when it ends
        # <workdir>/<checkpoint> becomes a link to ckpt/ before the job starts (workdir.py)
        "checkpoint": job.request.get("checkpoint"),
        "util_interval_s": interval_s(os.environ),  # how often gpuutil asks nvidia-smi
        "env": {
            **job.request.get("env", {}),
            "GPU_ROUTER_JOB_ID": job.id,
            "GPU_ROUTER_SHORT_ID": job.short_id,
            "GPU_ROUTER_ATTEMPT": str(job.attempt),
            MARKER_VAR: marker_for(job.id, job.attempt),  # how cancel finds every process
            "GPU_ROUTER_OUTPUT_DIR": f"{job_dir}/out",
            "GPU_ROUTER_DATA_DIR": f"{job_dir}/data",
            "GPU_ROUTER_CHECKPOINT_DIR": f"{job_dir}/ckpt",
            # where gpu.checkpoint_saved() freezes each save for the copy home (core/runtime/ckptgen.py)
            **({"GPU_ROUTER_CHECKPOINT_GENERATIONS": f"{job_dir}/ckpt-gens"} if frozen_checkpoints else {}),
            "GPU_ROUTER_CONTROL_DIR": f"{job_dir}/ctl",
            "GPU_ROUTER_METRICS_FILE": f"{job_dir}/metrics.jsonl",
        },
    }


def local_data(job: Job) -> list[dict]:
    """The job's data sets, each a local path on this machine (hf:// sets were downloaded here
    at submit). A job stored by a gpu-router that left hf:// downloads to the target cannot run:
    its target would need the Hub, huggingface_hub and a token."""
    items = list(job.request.get("data") or [])
    for item in items:
        if item.get("kind") != "path":
            raise RuntimeError(f"data {item.get('name')} ({item.get('source')}) was never "
                               "downloaded at submit (an older gpu-router left it to the target): "
                               "submit the job again")
    return items
