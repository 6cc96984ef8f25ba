"""Where a job's files are at home: its outputs, its settled checkpoint and its log.

A job's outputs come home into runs/<id>/ in its project, written only through the one
writer under runs/ (core/packaging/runswriter.py); when that folder is refused (a link, not
the person's) they are kept in the job's own folder at home instead, said once as an event,
and everything later (job.json, the last checkpoint) follows them there. The supervisor, the
fetch and the reports all ask here where a job's files are, so none of them writes through
a link or looks in the wrong folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from core import paths
from core.errors import UserError, disk_full_guard
from core.jobs.store import Job, Store
from core.packaging import checkpoints, runswriter
from core.packaging.safe_extract import masked_names


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


def log_path(job: Job) -> Path:
    """The job's log at home (jobs/<id>/job.log), what the job printed, written there by the supervisor."""
    return paths.jobs_dir() / job.id / "job.log"
