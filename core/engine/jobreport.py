"""The job's own report: the job object of `gpu status ID --json` and of job.json, and what
its end warns of.

The supervisor writes it as job.json beside the job's outputs when the job ends, and records
the end's warnings (declared outputs not written, no metric logged) in the job; the fronts'
documents (core/engine/reports.py) and the MCP tools return the same object, so what a person
finds in runs/<id>/job.json and what an agent is told cannot drift apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from core.display.sanitize import printable_doc
from core.engine.jobfiles import keep_at_home, outputs_folder, outputs_where
from core.jobs.states import TERMINAL, State
from core.jobs.store import Job, Store
from core.packaging import checkpoints, runswriter
from core.planning.usage import estimate_and_actual


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
    ended = job.handle.get("ended") or {} if job.state in TERMINAL else {}
    if ended.get("missing_artifacts"):  # declared, and nothing that came home matches them
        doc["missing_artifacts"] = ended["missing_artifacts"]
    if ended.get("no_metrics"):
        doc["metrics_note"] = NO_METRICS
    return doc


def mirroring_paused(store: Store, job: Job) -> str | None:
    """Why checkpoints stopped coming home (a full disk at home), while the job is live."""
    if job.state in TERMINAL:
        return None
    return checkpoints.paused_note(store.events(job.id))


def job_document(store: Store, job: Job) -> dict[str, Any]:
    """What job.json holds: the job's report (verbose), its events and its metrics' summary."""
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
