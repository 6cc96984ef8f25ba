"""The body of the Modal function that runs one attempt of a gpu-router job.

Modal imports this file as the module `modal_function` from the container's /root (the
provider mounts it there, with the runtime, the bundle's manifest, the file objects it names
and each data set beside it under gr/, each uploaded once per content hash) and calls
`run(spec)`. Every path is found from this file's own folder, so the layout is the one the
provider mounted, wherever that is.

The job's folder lives on the job's Modal Volume (gr/state/job): checkpoints, outputs, the
log and the metrics survive the container, so an attempt that follows a timeout reads the
last checkpoint of the one before. The code folder is built on the container's own disk from
the manifest over the mounted objects (the runtime's codetree, as on every target), and the
data sets are unpacked there. The job runs through the launcher in the foreground, as on
Kaggle, so it gets the same `gpu` module, log filter (the masker) and exit record as on every
target; the launcher's already masked log lines and its metric rows (behind a marker) go to
standard output, which is the log Modal keeps and the supervisor follows.

Before the function's timeout the job is asked to checkpoint (`gpu.should_checkpoint()`); a
clean exit then means "resume", not "done". Outputs come back as a gzipped tar in the result,
and so does the checkpoint folder (up to CKPT_RESULT_MAX); a call Modal stops at its timeout
returns nothing, and the provider then reads the checkpoint from the volume (job/ckpt there).

A preempted input that Modal runs again in a new container goes on as the same attempt from
the checkpoint on the volume (`_set_aside_preempted`).

Standard library only.
"""

import io
import json
import os
import shutil
import sys
import tarfile

CKPT_RESULT_MAX = 256 << 20  # a checkpoint up to this size also comes back with the result


def _unpack(archive: str, dest: str) -> None:
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(dest, filter="data")  # no links out, no devices, no absolute names


def _build_code(base: str, manifest: str, dest: str) -> None:
    """The job's code folder from the bundle's manifest and the objects mounted beside it, by
    the runtime's codetree (as on every target: paths and links that leave the folder are
    refused, modes set from the manifest). The mounted objects stay read-only sources; the job
    gets its own copies. A container that already built it (the same disk) keeps it."""
    if os.path.isdir(dest):
        return
    runtime = os.path.join(base, "runtime")
    if runtime not in sys.path:
        sys.path.insert(0, runtime)
    import codetree  # the runtime mounted with the function

    entries = codetree.read_manifest(os.path.join(base, "bundle", manifest))
    codetree.build(entries, os.path.join(base, "objects"), dest)


def _pack(folder: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        if os.path.isdir(folder):
            for here, _dirs, files in os.walk(folder):
                for name in sorted(files):
                    path = os.path.join(here, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        tar.add(path, arcname=os.path.relpath(path, folder), recursive=False)
    return buf.getvalue()


def run(spec: dict) -> dict:
    """One attempt: unpack, run the launcher, relay its log; the exit record and outputs back."""
    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gr")
    job = os.path.join(base, "state", "job")
    work = os.path.join(base, "work")
    text = json.dumps(spec).replace("@JOB@", job.replace("\\", "\\\\").replace('"', '\\"'))
    text = text.replace("@WORK@", work.replace("\\", "\\\\").replace('"', '\\"'))
    text = text.replace("@RUNTIME@", os.path.join(base, "runtime").replace("\\", "\\\\").replace('"', '\\"'))
    spec = json.loads(text)
    modal = spec.pop("modal")
    rerun = _set_aside_preempted(spec["attempt_dir"])
    for name in ("out", "ckpt", "ctl"):
        os.makedirs(os.path.join(job, name), exist_ok=True)
    shutil.rmtree(os.path.join(job, "ctl"), ignore_errors=True)  # an old attempt's requests
    os.makedirs(os.path.join(job, "ctl"), exist_ok=True)
    os.makedirs(spec["attempt_dir"], exist_ok=True)
    _build_code(base, modal["bundle"], os.path.join(work, "code"))
    for name, key in modal.get("data", {}).items():
        _unpack(os.path.join(base, "data", key), os.path.join(work, "data", name))
    if rerun:
        print(f"[gpu-router] Modal ran this input again in a new container (the last one was "
              f"preempted): attempt {spec['attempt']} goes on from the checkpoint on the job's volume",
              flush=True)
    elif spec["attempt"] > 1 and os.listdir(os.path.join(job, "ckpt")):
        print("[gpu-router] resuming from the last checkpoint on the job's volume", flush=True)
    spec_path = os.path.join(spec["attempt_dir"], "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    sys.path.insert(0, os.path.join(base, "runtime"))
    import relay  # the runtime mounted with the function: how every foreground attempt runs

    starts = {key: relay.size(path) for key, path in (("log", spec["log"]),
                                                       ("metrics", spec["env"]["GPU_ROUTER_METRICS_FILE"]))}
    code, asked = relay.run(spec, spec_path, os.path.join(base, "runtime", "launch.py"),
                            modal.get("checkpoint_after_s"), "function timeout")
    try:
        with open(os.path.join(spec["attempt_dir"], "exit.json")) as f:
            exit_doc = json.load(f)
    except (OSError, ValueError):
        exit_doc = {}
    ended_for_time = asked and exit_doc.get("code") in (0, None)
    # this attempt's log and metric rows whole: the call's log stream may still be catching up
    # when its result is there, and the result is what the supervisor reads last
    appended = {key: _tail(path, starts[key]) for key, path in
                (("log", spec["log"]), ("metrics", spec["env"]["GPU_ROUTER_METRICS_FILE"]))}
    ckpt = os.path.join(job, "ckpt")  # on the volume for the next call here; a copy goes home
    ckpt_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs
                     if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)))
    return {"code": code, "exit": exit_doc, "time_signal": asked,
            "outputs": b"" if ended_for_time else _pack(os.path.join(job, "out")),
            "ckpt": _pack(ckpt) if 0 < ckpt_bytes <= CKPT_RESULT_MAX else b"", **appended}


def _set_aside_preempted(attempt_dir: str) -> bool:
    """Modal runs a preempted input again, in a new container, on its own: this call's attempt
    folder on the volume then holds the launcher's "started" claim and no exit record. Left
    there, the claim (never start an attempt twice) would refuse the rerun and fail the job;
    the folder is kept beside it (`<n>.preempted-<k>`) and the attempt goes on from the
    checkpoint on the volume. An attempt that recorded its exit is not run again (the
    launcher refuses it). True when this is such a rerun."""
    if not os.path.exists(os.path.join(attempt_dir, "started")) \
            or os.path.exists(os.path.join(attempt_dir, "exit.json")):
        return False
    k = 1
    while os.path.exists(f"{attempt_dir}.preempted-{k}"):
        k += 1
    os.replace(attempt_dir, f"{attempt_dir}.preempted-{k}")
    return True


def _tail(path: str, start: int, cap: int = 32 << 20) -> bytes:
    """What `path` gained since `start`, at most `cap` bytes (the last of them)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(start, os.path.getsize(path) - cap))
            return f.read(cap)
    except OSError:
        return b""
