"""What a SkyPilot launch of one attempt is made of: the task's workdir, its `run`, and the
resources it asks for, bound by what the plan approved.

The workdir (`jobs/<id>/sky/a<N>/work/`, synced to the cluster by SkyPilot) holds everything
the attempt needs, so the cluster reaches nothing of this machine's: the runtime archive, the
bundle's manifest and its file objects (each checked against its hash there), the data sets,
the checkpoint to resume from, and `task.py` (core/runtime/skypilot_task.py behind the spec).
No keychain secret ever goes: a skypilot target takes none (TargetInfo.takes_secrets).

The resources come from the plan's `skypilot` binding (catalog.binding, in the plan's digest):
the GPU type and count, spot only where it was approved, `max_hourly_cost` = the ceiling the
person saw, and where every candidate the plan listed is on one cloud, that cloud as its infra.
SkyPilot 0.14.1 ignores the ceiling on Slurm (adapter.op_launch), so the launch is first held
against SkyPilot's prices of now (`over_ceiling`): a price that rose past what was approved
is refused, never launched.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from pathlib import Path

from core import paths
from core.jobs.store import Job
from core.packaging import checkpoints, objects, requirements
from core.packaging.safe_extract import OutputCaps
from core.providers.dataship import data_archives
from core.providers.runtimeship import runtime_archive
from core.providers.skypilot import catalog
from core.providers.spec import launch_spec
from core.runtime import RUNTIME_DIR

TASK_CODE = RUNTIME_DIR / "skypilot_task.py"
AUTODOWN_MINUTES = 10  # a cluster idle this long goes down by itself (gpu-router downs it sooner)
RUN = "python3 task.py"


def cluster_name(job: Job) -> str:
    """One cluster per attempt, named so `gpu gc` knows gpu-router's own (`gr-`)."""
    return task_name(job)


def task_name(job: Job, attempt: int | None = None) -> str:
    """The task's name, which SkyPilot puts before each line it prints (stream.task_prefix)."""
    return f"gr-{job.short_id.lower()}-a{attempt or job.attempt}"


def workdir(job: Job) -> Path:
    return paths.jobs_dir() / job.id / "sky" / f"a{job.attempt}" / "work"


def stage(job: Job, caps: OutputCaps, checkpoint_poll_s: float = 2.0) -> tuple[Path, int]:
    """The attempt's workdir, made afresh; (its folder, its bytes)."""
    work = workdir(job)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _, rt = runtime_archive()
    (work / "runtime.tar.gz").write_bytes(rt)
    with open(objects.manifest_file(job.bundle_hash), "rb") as src, gzip.open(work / "manifest.gz", "wb") as out:
        shutil.copyfileobj(src, out)
    with gzip.open(work / "objects.gz", "wb", compresslevel=1) as out:
        objects.object_stream(objects.digests(job.bundle_hash), out)
    data: dict[str, str] = {}
    for name, archive in data_archives(job, "skypilot").items():
        rel = f"data-{hashlib.sha256(name.encode()).hexdigest()[:16]}.tar.gz"
        _link_or_copy(archive, work / rel)
        data[name] = rel
    restore = None
    # each attempt has a cluster of its own, so no attempt finds an earlier one's ckpt/ as a
    # host's folder keeps it: home's checkpoint goes to every attempt after the first (a job
    # moved here, a session resumed here, a retry), as a host's folder would have held it
    if job.handle.get("restore_checkpoint") or job.attempt > 1:
        archive = checkpoints.restore_archive(job.id, {})
        if archive is not None:
            os.replace(archive, work / "restore.tar.gz")
            restore = "restore.tar.gz"
    spec = _spec(job)
    spec["skypilot"] = {"runtime": "runtime.tar.gz", "manifest": "manifest.gz", "objects": "objects.gz",
                        "data": data, "restore": restore, "max_output_bytes": caps.max_bytes,
                        "max_output_files": caps.max_files, "checkpoint_poll_s": checkpoint_poll_s}
    (work / "task.py").write_text(f"SPEC = {spec!r}\n" + TASK_CODE.read_text())
    size = sum(f.stat().st_size for f in work.iterdir() if f.is_file())
    return work, size


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _spec(job: Job) -> dict:
    jd = "@JOB@"
    found = requirements.bundle_dependencies(objects.manifest_file(job.bundle_hash),
                                             job.plan.get("workdir") or "", job.plan.get("extras") or ())
    deps = requirements.deps_spec(found, python="python3", version="skypilot", venvs_dir="@ROOT@/venvs")
    return launch_spec(job, job_dir=jd, attempt_dir=f"{jd}/attempts/{job.attempt}",
                       workdir=f"{jd}/code/{job.plan.get('workdir') or ''}".rstrip("/"),
                       runtime_dir="@RUNTIME@", python="python3", deps=deps, env_secrets={},
                       frozen_checkpoints=True)


def binding_of(job: Job) -> dict:
    """The plan's binding: what was approved (a plan from before bindings: none, which
    `resources` refuses)."""
    bound = job.plan.get("skypilot")
    return bound if isinstance(bound, dict) else {}


def offer_of(job: Job) -> tuple[str, int]:
    """The plan's GPU type and count (`FAKE:2` -> ("FAKE", 2))."""
    kind, _, count = str(job.plan.get("offer") or "").partition(":")
    return kind, int(count) if count.isdigit() else 1


def resources(job: Job, clouds: list[str] | None = None) -> dict:
    """sky.Resources' arguments for the attempt (see the module's docstring)."""
    bound = binding_of(job)
    gpu, count = offer_of(job)
    if not bound or not gpu:
        raise ValueError("its plan binds no SkyPilot price ceiling (it was planned before gpu-router "
                         "launched on SkyPilot): submit it again")
    res: dict = {"accelerators": f"{gpu}:{count}", "max_hourly_cost": float(bound["max_hourly_cost"]),
                 "use_spot": bool(bound.get("use_spot"))}
    places = {c.get("cloud") for c in bound.get("candidates") or []}
    if len(places) == 1:  # the cloud only: a catalog's region is not always SkyPilot's (a Slurm
        res["infra"] = next(iter(places))  # partition, `debug*`, where infra wants the cluster)
    elif clouds and len(clouds) == 1:
        res["infra"] = clouds[0]
    return res


def over_ceiling(job: Job, prices: dict, infra: str | None = None) -> str | None:
    """Why the attempt may not launch at today's prices: its GPU type's cheapest row now costs
    more than the approved ceiling, or no cloud lists it any more; None when it may. A launch
    held to one cloud (`infra`) is judged by that cloud's rows only: Slurm's price rose past the
    ceiling while another cloud listed the GPU cheaply, and the launch went to Slurm (which
    ignores `max_hourly_cost`) at the higher price."""
    bound = binding_of(job)
    gpu, count = offer_of(job)
    spot = bool(bound.get("use_spot"))
    offer = catalog.offers(prices, spot=spot).get(gpu.upper())
    rows = [r for r in (offer or {}).get("candidates") or [] if infra is None or r.get("cloud") == infra]
    if not rows:
        return f"no enabled cloud lists {gpu} now" if infra is None else f"{infra} does not list {gpu} now"
    now = catalog.cheapest(rows, count, spot)
    if now is None:
        return f"no enabled cloud offers {count} {gpu} per machine now"
    ceiling = float(bound.get("max_hourly_cost") or 0)
    if now > ceiling + 1e-9:
        return f"{gpu} x{count} costs ${now:.2f}/h now, over the ${ceiling:.2f}/h its plan was approved for"
    return None
