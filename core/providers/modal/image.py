"""What a Modal job's container is built from and told: the image (Debian slim or the request's
registry image, the project's dependencies, the request's packages), the mounted runtime, bundle
objects and data sets, and the launcher's spec.

Modal hashes each mounted file and uploads it only when its hash is new, so the mounts are laid
out by content: an unchanged re-submit sends no file.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from core import paths
from core.errors import UserError
from core.jobs.store import Job
from core.packaging import objects, requirements
from core.providers.dataship import data_archives
from core.providers.spec import launch_spec
from core.runtime import RUNTIME_DIR

CHECKPOINT_LEAD_S = 600.0
FUNCTION_FILE = RUNTIME_DIR / "modal_function.py"
REMOTE = "/root/gr"  # where the function finds its files (modal_function.py sits in /root)


def _objects_outside(needed: Iterable[str]):
    """The `ignore` of the mount over the object store: every file but the bundle's objects
    (`<h[:2]>/<h[2:]>`). The store holds every bundle's objects and the mount takes only this
    one's; Modal hashes each file it mounts and uploads it only when its hash is new, so an
    object sent once (by any job, any bundle) is never sent again."""
    keep = {f"{d[:2]}/{d[2:]}" for d in needed}
    return lambda rel: rel.as_posix() not in keep


def _objects_never_change() -> None:
    """Modal's client refuses a mounted file whose mtime is newer than the build's start ("was
    modified during build process", `build_validation`, default "error"). An object's mtime is
    its last use (a submit that reuses it touches it, so gc keeps it), so a submit of the same
    project while this one uploads would fail it, though an object's content never changes
    (named by its hash, checked again by Modal on upload) and everything else mounted is
    gpu-router's own (the runtime, data sets packed once by hash). The check guards nothing
    here: it is off for this process (the client reads it from the environment only)."""
    if os.environ.get("MODAL_BUILD_VALIDATION") != "ignore":
        os.environ["MODAL_BUILD_VALIDATION"] = "ignore"


def modal_pip_options(deps: requirements.Dependencies) -> dict[str, Any]:
    """Modal builds the image with `pip install PKGS OPTIONS` before the bundle is in it: the
    index options become pip_install's arguments; what needs a file of the project (a local
    path, a wheel folder, a constraints file) cannot be applied there, and is refused."""
    if deps.local or deps.constraints:
        what = "local paths or --find-links folders" if deps.local else "constraints (-c)"
        raise UserError(f"{deps.source}: {what} cannot be applied on a Modal target (Modal installs the "
                        "dependencies while it builds the image, before the project's files are in it)",
                        where=deps.source, fix="pin the versions in requirements.txt itself and install packages "
                                               "from an index, or run the job on another target")
    kwargs: dict[str, Any] = {}
    extra: list[str] = []
    for line in deps.options:
        flag, _, value = line.partition(" ")
        if flag == "--index-url":
            kwargs["index_url"] = value
        elif flag == "--extra-index-url" and "extra_index_url" not in kwargs:
            kwargs["extra_index_url"] = value
        elif flag == "--pre":
            kwargs["pre"] = True
        else:
            extra.append(line)
    if extra:
        kwargs["extra_options"] = " ".join(extra)
    return kwargs


class ModalImage:
    """The image and spec of a modal target's job (mixed into ModalProvider)."""

    def _data_files(self, job: Job) -> dict[str, Path]:
        """Each local data set packed once (deterministically) into the cache, by content hash."""
        return data_archives(job, "modal")

    def _spec(self, job: Job, data: dict[str, Path]) -> dict:
        jd, work = "@JOB@", "@WORK@"
        adir = f"{jd}/attempts/{job.attempt}"
        spec = launch_spec(job, job_dir=jd, attempt_dir=adir,
                           workdir=f"{work}/code/{job.plan.get('workdir') or ''}".rstrip("/"),
                           runtime_dir="@RUNTIME@", python="python3", deps=None, env_secrets={},
                           frozen_checkpoints=True)  # a preempted container's rerun restores the newest whole save
        spec["env"]["GPU_ROUTER_DATA_DIR"] = f"{work}/data"  # unpacked on the container's disk
        limit = self.session_timeout(job)
        lead = float(self.options.get("checkpoint_lead_s", min(CHECKPOINT_LEAD_S, limit / 10)))
        spec["modal"] = {"bundle": f"{job.bundle_hash}.json", "checkpoint_after_s": max(limit - lead, 1.0),
                         "data": {name: p.name for name, p in data.items()}}
        return spec

    def _function_module(self):
        """modal_function.py as the top-level module `modal_function`, as the container imports it."""
        spec = importlib.util.spec_from_file_location("modal_function", FUNCTION_FILE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules.setdefault("modal_function", mod)
        return sys.modules["modal_function"]

    def image(self, job: Job, data: dict[str, Path]):
        import modal

        base = job.plan.get("image")
        if base:  # the request's registry image (its own Python and pip, as Modal requires)
            image = modal.Image.from_registry(str(base))
        else:
            py = f"{sys.version_info.major}.{min(max(sys.version_info.minor, 10), 13)}"
            image = modal.Image.debian_slim(python_version=py)
        deps = requirements.bundle_dependencies(objects.manifest_file(job.bundle_hash),
                                                job.plan.get("workdir") or "", job.plan.get("extras") or ())
        options = modal_pip_options(deps) if deps else {}
        if deps:
            image = image.pip_install(*deps.requirements, **options)  # built once, then reused
        packages = [str(p) for p in job.plan.get("packages") or ()]
        if packages:  # the request's own packages, a layer of their own over the project's,
            image = image.pip_install(*packages, **options)  # from the same index as pip would take them
        image = image.add_local_file(FUNCTION_FILE, "/root/modal_function.py", copy=False)
        image = image.add_local_dir(RUNTIME_DIR, f"{REMOTE}/runtime", copy=False,
                                    ignore=["**/__pycache__", "**/__pycache__/**", "**/*.pyc"])
        image = image.add_local_file(objects.manifest_file(job.bundle_hash),
                                     f"{REMOTE}/bundle/{job.bundle_hash}.json", copy=False)
        needed = objects.digests(job.bundle_hash)
        objects.loosen(needed)  # the mount takes files: a packed object is copied out first
        image = image.add_local_dir(paths.objects_dir(), f"{REMOTE}/objects", copy=False,
                                    ignore=_objects_outside(needed))
        for path in data.values():
            image = image.add_local_file(path, f"{REMOTE}/data/{path.name}", copy=False)
        return image
