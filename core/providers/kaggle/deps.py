"""Dependencies for a Kaggle kernel: online (`pip install`, when the kernel has internet) or
from a wheelhouse built here and shipped as a private data set (core/packaging/wheelhouse.py).

- `offline: auto | true | false` (a target option): auto means offline unless the target says
  `internet: true`; true always installs from a wheelhouse; false always from the index (it
  needs `internet: true`).
- `internet: true` asks Kaggle for `enableInternet`, which Kaggle grants only to phone-verified
  accounts. When Kaggle refuses it, the job's events say so, the refusal is remembered for the
  target (so later jobs go offline at once), and the job falls back to the wheelhouse.
- Kaggle's image: its Python and tags are KAGGLE_PLATFORM; the packages it already has are
  probed once per image by a small CPU kernel (no GPU, no internet) that writes
  `importlib.metadata`'s list to its output; the answer is cached for IMAGE_TTL_S, keyed by the
  image's build id (/etc/git_commit, which Kaggle's Dockerfile writes).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from core import paths
from core.config.targetopts import offline_option
from core.jobs.store import Job
from core.packaging import objects, requirements, wheelhouse
from core.packaging.wheelhouse import TargetPlatform

KaggleProvider = Any  # core.providers.kaggle.KaggleProvider (which imports this module)

# Kaggle's current GPU image: Kaggle/docker-python's Dockerfile.tmpl (commit 78aaa43, Aug 2026)
# builds FROM Colab's runtime image release-colab-external-images_20260514 and installs into
# /usr/local/lib/python3.12/dist-packages: CPython 3.12 on x86_64 Linux. Colab's runtime is
# Ubuntu 22.04 (glibc 2.35), so manylinux_2_35 and every older manylinux tag fit.
KAGGLE_PLATFORM = TargetPlatform(python_version="3.12", implementation="cp", abi="cp312",
                                 platforms=("manylinux_2_35_x86_64",))
IMAGE_TTL_S = 7 * 86_400  # Kaggle moves its "latest" image about monthly; a week's guess is cheap
PROBE_SLUG = "gr-image-probe"
PROBE_TIMEOUT_S = 1200.0  # a CPU kernel queues, starts and lists in a few minutes
WHEELHOUSE_DIR = "/tmp/gpu-router/wheelhouse"  # scratch on the kernel: not the session's output
PROBE_CODE = '''\
import importlib.metadata as md, json, os, sys
image = open("/etc/git_commit").read().strip() if os.path.exists("/etc/git_commit") else ""
packages = {}
for d in md.distributions():
    name = d.metadata.get("Name")
    if name:
        packages[name] = d.version
json.dump({"image": image, "python": sys.version.split()[0], "packages": packages},
          open("image-packages.json", "w"))
print("listed", len(packages), "packages")
'''
REFUSAL_WORDS = ("internet", "phone")  # what Kaggle's refusal of enableInternet mentions (our reading)


def offline_mode(options: dict) -> bool:
    """Whether the job installs from a wheelhouse, before Kaggle has said anything."""
    mode = offline_option(options)
    return mode == "true" or (mode == "auto" and not options.get("internet", False))


def project_folders(job: Job, found: requirements.Dependencies) -> wheelhouse.LocalFolders | None:
    """Where the wheelhouse reads the project's own `--find-links` folders (`vendor/`): the
    job's bundle, since the wheelhouse is built on this machine, not in the kernel's code folder
    (None when the project names none)."""
    return wheelhouse.local_folders(found.local, objects.manifest_file(job.bundle_hash),
                                    job.plan.get("workdir") or "")


def _state_file(target: str) -> Path:
    return paths.cache_dir() / f"kaggle-internet-{target}.json"


def internet_refused(target: str) -> bool:
    return _state_file(target).exists()


def remember_refusal(target: str, message: str) -> None:
    path = _state_file(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"at": time.time(), "message": message}))


def is_refusal(error: str) -> bool:
    low = (error or "").lower()
    return any(w in low for w in REFUSAL_WORDS)


def _image_file(target: str) -> Path:
    return paths.cache_dir() / f"kaggle-image-{target}.json"


def image_packages(provider: KaggleProvider, say: Callable[[str], None]) -> dict[str, str]:
    """The packages of the image Kaggle runs kernels in (name -> version), probed once and
    cached; a probe that fails ships everything (an honest fallback: bigger, never wrong)."""
    path = _image_file(provider.name)
    try:
        doc = json.loads(path.read_text())
        if time.time() - float(doc["at"]) < IMAGE_TTL_S:
            return dict(doc["packages"])
    except (OSError, ValueError, KeyError):
        pass
    say("dependencies: listing the packages of Kaggle's image (a small CPU kernel, once per image)")
    try:
        doc = _probe(provider)
    except Exception as exc:  # noqa: BLE001 - the fallback is correct, only larger
        say(f"dependencies: could not list Kaggle's image ({exc}); every dependency ships")
        return {}
    doc["at"] = time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)
    say(f"dependencies: Kaggle's image {doc.get('image') or '(no build id)'} has "
        f"{len(doc['packages'])} packages (Python {doc.get('python')})")
    return dict(doc["packages"])


def _probe(provider: KaggleProvider) -> dict:
    from kagglesdk.kernels.types.kernels_api_service import ApiSaveKernelRequest

    user = provider.user()
    req = ApiSaveKernelRequest()
    req.slug = f"{user}/{PROBE_SLUG}"
    req.new_title = PROBE_SLUG
    req.text = PROBE_CODE
    req.language = "python"
    req.kernel_type = "script"
    req.is_private = True
    req.enable_gpu = False  # no GPU hours spent on a listing
    req.enable_internet = False
    answer = provider._call("kernels", "save_kernel", req)
    if answer.error:
        raise RuntimeError(f"Kaggle refused the probe kernel: {answer.error}")
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    delay = 0.5
    while True:
        state, failure = provider._kernel_status(PROBE_SLUG)
        if state == "COMPLETE":
            break
        if state == "ERROR" or state.startswith("CANCEL") or time.monotonic() > deadline:
            raise RuntimeError(f"the probe kernel ended {state} {failure}".strip())
        time.sleep(delay)
        delay = min(delay * 1.5, 10.0)
    files, _ = provider._kernel_output(PROBE_SLUG)
    url = dict(files).get("image-packages.json")
    if not url:
        raise RuntimeError("the probe kernel wrote no package list")
    doc = json.loads(provider._download(url, 16 << 20))
    if not isinstance(doc.get("packages"), dict):
        raise RuntimeError("the probe kernel's package list is not a mapping")
    return doc
