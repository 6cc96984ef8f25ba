"""The code of a Kaggle kernel that runs one attempt of a gpu-router job.

A Kaggle kernel is one code file; the project travels as private data sets that this script
finds under the kernel's input folder: the runtime (one archive named by its hash), the
bundle's manifest, and the project's file objects as tars spread over a base data set and the
deltas this bundle needs (core/providers/kaggle/code.py). Each object is checked against its
hash as it is unpacked into scratch space, the job's code folder is built from the manifest
(codetree, the same code as on every host), and the job runs through the launcher in the
foreground, so it gets the same `gpu` module, log filter and exit record as on every other
target. The provider puts one
line `SPEC = {...}` in front of this file; `@JOB@` in it stands for the job folder, known only
here (Kaggle runs a kernel in /kaggle/working with its inputs in ../input; everything under
the working folder becomes the session's output).

While the job runs, the launcher's (already masked) log lines go to this kernel's output, which
is the log Kaggle keeps; metric rows go there too behind a marker, so the supervisor can follow
both. Before the session's time limit the job is asked to checkpoint (`gpu.should_checkpoint()`)
and a `time-signal` marker says that a clean exit then means "resume", not "done". A resumed
attempt reads the previous session's checkpoint from the previous kernel version's output.

Standard library only.
"""



import gzip
import json
import os
import shutil
import sys
import tarfile
import tempfile

SPEC: dict = globals().get("SPEC", {})  # the provider's first line sets it


def _find(top: str, name: str) -> str | None:
    """The file `name` anywhere under the input folder (data sets mount in their own folders)."""
    for here, _dirs, files in os.walk(top):
        if name in files:
            return os.path.join(here, name)
    return None


def _find_dir(top: str, rel: str) -> str | None:
    for here, dirs, _files in os.walk(top):
        if os.path.isdir(os.path.join(here, rel)):
            return os.path.join(here, rel)
    return None


def _unpack(archive: str, dest: str) -> None:
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(dest, filter="data")  # no links out, no devices, no absolute names


def _build_code(inputs: str, kaggle: dict, dest: str) -> str | None:
    """The job's code folder from the manifest over the object tars of the mounted data sets;
    the reason it cannot be built, or None. Objects go to scratch space outside the working
    folder (which is the session's output), each checked against its hash, and are removed
    once the folder is built."""
    import codetree  # the runtime just unpacked (objstore.py beside it)
    import objstore

    wanted = {kaggle["manifest"], *kaggle["objects"]}
    found = {}  # one walk for them all: the inputs may hold a large data set beside them
    for here, _dirs, files in os.walk(inputs):
        for name in wanted.intersection(files):
            found.setdefault(name, os.path.join(here, name))
    lacking = sorted(wanted - set(found))
    if lacking:
        return f"the code's data set file {lacking[0]} is not among this kernel's inputs"
    store = tempfile.mkdtemp(prefix="gpu-router-objects-")
    try:
        for key in kaggle["objects"]:
            with open(found[key], "rb") as f:
                objstore.receive(store, f)
        plain = os.path.join(store, "manifest.json")  # it travels gzipped
        with gzip.open(found[kaggle["manifest"]], "rb") as src, open(plain, "wb") as out:
            shutil.copyfileobj(src, out)
        entries = codetree.read_manifest(plain)
        lacking = objstore.missing(store, [r[2] for r in entries if r[1] != "l"])
        if lacking:
            return f"{len(lacking)} of the code's files came in no data set (first {lacking[0][:12]})"
        codetree.build(entries, store, dest)
        return None
    except (ValueError, OSError, tarfile.TarError) as exc:  # an object that is not what its name says
        return f"the code could not be built: {exc}"
    finally:
        shutil.rmtree(store, ignore_errors=True)


def main() -> int:
    work = os.getcwd()
    inputs = os.path.normpath(os.path.join(work, "..", "input"))
    root = os.path.join(work, "gpu-router")
    job = os.path.join(root, "job")
    text = json.dumps(SPEC).replace("@JOB@", job.replace("\\", "\\\\").replace('"', '\\"'))
    spec = json.loads(text)
    kaggle = spec.pop("kaggle")
    for name in ("out", "ckpt", "ctl", "data"):
        os.makedirs(os.path.join(job, name), exist_ok=True)
    os.makedirs(spec["attempt_dir"], exist_ok=True)
    found = _find(inputs, kaggle["runtime"])
    if not found:
        print(f"[gpu-router] the runtime archive {kaggle['runtime']} is not among this kernel's inputs", flush=True)
        return 97
    _unpack(found, os.path.join(root, "runtime"))
    sys.path.insert(0, os.path.join(root, "runtime"))
    why = _build_code(inputs, kaggle, os.path.join(job, "code"))
    if why:
        print(f"[gpu-router] {why}", flush=True)
        return 97
    if (spec.get("deps") or {}).get("wheelhouse"):  # installs offline, from this folder only
        os.makedirs(spec["deps"]["wheelhouse"], exist_ok=True)
    if kaggle.get("wheelhouse"):  # the dependencies' wheels: pip installs from them, offline
        found = _find(inputs, kaggle["wheelhouse"])
        if not found:
            print(f"[gpu-router] the wheelhouse {kaggle['wheelhouse']} is not among this kernel's inputs", flush=True)
            return 97
        _unpack(found, spec["deps"]["wheelhouse"])
    for name, key in kaggle.get("data", {}).items():
        found = _find(inputs, key)
        if not found:
            print(f"[gpu-router] data set {name} ({key}) is not among this kernel's inputs", flush=True)
            return 97
        _unpack(found, os.path.join(job, "data", name))
    if kaggle.get("restore"):  # a job moved or resumed here: the checkpoint home held
        found = _find(inputs, kaggle["restore"])
        if not found:
            print(f"[gpu-router] its checkpoint {kaggle['restore']} is not among this kernel's inputs", flush=True)
            return 97
        _unpack(found, os.path.join(job, "ckpt"))
        print("[gpu-router] restored the checkpoint it came with from home", flush=True)
    elif spec["attempt"] > 1:
        previous = _find_dir(inputs, "gpu-router/job/ckpt")
        if previous:
            shutil.copytree(previous, os.path.join(job, "ckpt"), dirs_exist_ok=True, symlinks=True)
            print("[gpu-router] resuming from the previous session's checkpoint", flush=True)
    spec_path = os.path.join(spec["attempt_dir"], "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    import relay  # the runtime just unpacked: how every foreground attempt runs and reports

    code, _ = relay.run(spec, spec_path, os.path.join(root, "runtime", "launch.py"),
                        kaggle.get("checkpoint_after_s"), "session time limit")
    shutil.rmtree(os.path.join(root, "runtime"), ignore_errors=True)  # not output: it came in
    return code


if __name__ == "__main__":
    sys.exit(main())
