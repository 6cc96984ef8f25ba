"""`gpu fetch ID PATH`: files a job wrote in its working folder, brought home on demand.

A PATH may be a glob (`'predict*.pdf'`, `models/*.pkl`, `**/*.ckpt`), matched by the rules of
declared outputs (core/runtime/workdir.py `declared`). Undeclared work stays on the target (the job's last log line and `gpu status` name it) until
the storage clean-up frees the job's folder. This brings named paths of that folder home, into
`runs/<id>/` at the same relative paths a declared output would have, by the same rules as
every output: packed on the target without following a link (core/runtime/nofollow.py, from
the job's folder down: a working folder, `code/` or a folder on the way that the job replaced
with a link is refused, never read through), unpacked at home by
`safe_extract` (no link, no `..`, within the target's output caps), through the one writer
under runs/ (core/packaging/runswriter.py): a runs/ or runs/<id>/ that is a link, or not a
plain folder of the person's, keeps what was fetched at home in the job's folder, with an
event that says why and where (core/engine/jobfiles.py `keep_at_home`).
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import time
from pathlib import Path
from typing import Any

from core import paths
from core.config.schema import path_problem
from core.config.user import load
from core.engine.jobfiles import outputs_where, write_outputs
from core.jobs.store import Store
from core.errors import UserError, shorten
from core.packaging.safe_extract import OutputCaps, masked_names, safe_extract
from core.secrets import names
from core.providers import registry
from core.providers.hostlink import run_sync
from core.transport.base import TransportError, Unreachable

MAX_PATHS = 100


def clean_path(text: str) -> str:
    """A PATH argument as a path inside the job's working folder, or a UserError."""
    problem = path_problem(text) if text else "is empty"
    if problem is None and (os.path.isabs(text) or text.startswith("~")):
        problem = "is absolute: name a path relative to the job's folder"
    norm = posixpath.normpath(text.replace(os.sep, "/")) if problem is None else ""
    if problem is None and (norm == ".." or norm.startswith("../")):
        problem = "leaves the job's folder"
    if problem:
        raise UserError(f"path {shorten(text)} {problem}", where="gpu fetch PATH",
                        fix="name files or folders relative to the job's working folder, "
                            "e.g. outputs/ or model.pkl (see `gpu status ID` for what stayed behind)")
    return norm


def fetch(store: Store, ref: str, wanted: list[str]) -> dict[str, Any]:
    """Bring `wanted` (paths relative to the job's working folder) home into runs/<id>/."""
    if not wanted:
        raise UserError("no path to fetch", where="gpu fetch", fix="name at least one PATH, e.g. outputs/")
    if len(wanted) > MAX_PATHS:
        raise UserError(f"{len(wanted)} paths at once, more than {MAX_PATHS}", where="gpu fetch PATH",
                        fix="name their folder instead")
    rels = list(dict.fromkeys(clean_path(p) for p in wanted))
    job = store.resolve(ref)
    if not job.handle:
        raise UserError(f"job {job.short_id} never started on a target ({job.state.value}): "
                        "nothing to fetch", fix=f"see `gpu status {job.short_id}`")
    cfg = load()
    target = cfg.targets.get(job.provider)
    providers = registry.build(cfg)
    provider = providers.get(job.provider)
    if provider is None:
        raise UserError(f"target {job.provider!r} of job {job.short_id} is no longer configured",
                        fix="add it again (`gpu targets add ...`) to reach its files")
    if not hasattr(provider, "fetch_paths"):
        raise UserError(f"a {provider.kind} target keeps nothing of a job's working folder once the "
                        f"job ends (its container is gone), so job {job.short_id}'s undeclared files "
                        "cannot be fetched", fix="declare such files with `outputs:` in gpu.yaml (or "
                        "write them to gpu.output_dir()) so they come home when the job ends")
    caps = OutputCaps.from_options(target.options if target is not None else None)
    fd, name = tempfile.mkstemp(prefix=".fetch-", suffix=".tar.gz", dir=paths.home())
    os.close(fd)
    archive = Path(name)
    try:
        try:
            doc = run_sync(lambda: provider.fetch_paths(job, rels, archive, caps))
        except Unreachable as exc:
            raise UserError(f"target {job.provider} cannot be reached now: {exc}",
                            fix=f"try again when it is up (`gpu targets probe {job.provider}`)") from None
        except TransportError as exc:
            raise UserError(f"could not read job {job.short_id}'s folder on {job.provider}: {exc}",
                            fix="check the target (`gpu targets probe ...`) and try again") from None
        if doc.get("reused"):
            raise UserError(f"job {job.short_id} wrote nothing into its working folder on {job.provider} "
                            "(only the code it was given was there), so a later job of this project "
                            "took it over: there is nothing of the job's own to fetch",
                            fix=f"its outputs are in {outputs_where(job)}; the code is your project's")
        if doc.get("gone"):
            raise UserError(f"job {job.short_id}'s working folder on {job.provider} was cleaned up "
                            "(storage cap or `gpu gc`): its undeclared files are gone",
                            fix="declare such files with `outputs:` in gpu.yaml so they come home "
                                "when a job ends")
        if doc.get("replaced"):
            raise UserError(f"job {job.short_id}'s working folder on {job.provider} was replaced by the "
                            f"job ({shorten(doc['replaced'])}): nothing fetched, no link is followed",
                            fix="declare the files with `outputs:` in gpu.yaml (or write them to "
                                "gpu.output_dir()) so they come home when the job ends")
        mask = names.for_job(job)  # a job holding secrets: names come home masked
        with masked_names(mask.mask if mask else None):
            notes = [mask.mask(n) if mask else n for n in doc.get("notes") or []]
            notes += (write_outputs(store, job, lambda folder: safe_extract(archive, folder, caps=caps))
                      if doc.get("files") else [])
    finally:
        archive.unlink(missing_ok=True)
    dest = outputs_where(store.get(job.id))
    if not doc.get("files") and not doc.get("refused") and len(doc.get("missing", [])) == len(rels):
        raise UserError(f"no such path (nothing matches a glob) in job {job.short_id}'s folder on "
                        f"{job.provider}: " + ", ".join(shorten(m) for m in doc["missing"][:5]),
                        fix=f"`gpu status {job.short_id}` names the files the job left behind")
    if doc.get("files"):
        _fetched(store, job, rels, int(doc["files"]), dest)
    return {"job": job.short_id, "target": job.provider, "dest": str(dest),
            "files": int(doc.get("files", 0)), "bytes": int(doc.get("bytes", 0)),
            "missing": doc.get("missing", []), "refused": doc.get("refused", []),
            "capped": doc.get("capped"), "notes": notes}


def _fetched(store: Store, job: Any, rels: list[str], files: int, dest: Path) -> None:
    """Record what came home: an event, and the job's "left work behind" note (`stayed`,
    which `gpu status` and the project's next submit repeat) replaced by what was fetched,
    so neither keeps telling the person to fetch what is already in runs/<id>/."""
    where = ", ".join(rels[:5]) + (f" and {len(rels) - 5} more" if len(rels) > 5 else "")
    text = f"fetched {files} file{'s' * (files != 1)} ({where}) home into {dest}"
    with store.write():
        handle = dict(store.get(job.id).handle)
        handle.pop("stayed", None)
        handle["fetched"] = {"paths": rels, "files": files, "at": time.time()}
        store.update(job.id, handle=handle)
        store.add_event(job.id, text, actor="cli")
