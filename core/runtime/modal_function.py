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

Preemption (Modal's guide: an interrupt signal to the container, its exit handlers run for a
grace period, then it is killed and the same input runs again in a new container). A signal
that ends this container (SIGINT as Modal sends it, SIGTERM as other runtimes do, to this
process or to every process) is a preemption, never the job's exit: the handler marks the
attempt folder (`preempted`), asks the job to checkpoint and keeps relaying through the grace.
The rerun then:
- sets the preempted container's attempt folder aside (`<n>.preempted-<k>`) whatever its
  launcher recorded (a launcher that got the signal too records an exit: it is not one), so the
  launcher's "never start an attempt twice" claim lets the rerun start;
- restores the newest complete checkpoint: the job's `gpu.checkpoint_saved()` freezes each save
  into generations on the volume (ckpt-gens/, core/runtime/ckptgen.py); a live folder that no
  longer matches its completion marker (the container died while a file was being rewritten) is
  replaced by the newest whole generation, so a torn file is never what the job resumes from;
- hands back, in its result, the log and metric text of every container that ran this input
  (from the offsets the first one recorded in `starts.json`, carried from folder to folder):
  the rows the preempted container wrote after its relay's last copy come home, in the order
  they were written, once.

Standard library only.
"""

import io
import json
import os
import shutil
import signal
import sys
import tarfile
import threading
from types import ModuleType
from typing import Any

CKPT_RESULT_MAX = 256 << 20  # a checkpoint up to this size also comes back with the result
PREEMPTED = "preempted"  # in the attempt folder: a preemption signal reached that container
STARTS = "starts.json"  # in the attempt folder: where the log and metrics stood when its input first ran
COMPLETE = ".complete"  # gpu.checkpoint_saved()'s marker (gpu.COMPLETE_MARKER, ckptgen.MARKER)


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
    sys.path.insert(0, os.path.join(base, "runtime"))
    import relay  # the runtime mounted with the function: how every foreground attempt runs

    files = (("log", spec["log"]), ("metrics", spec["env"]["GPU_ROUTER_METRICS_FILE"]))
    set_aside = _set_aside_preempted(spec["attempt_dir"])
    for name in ("out", "ckpt", "ctl"):
        os.makedirs(os.path.join(job, name), exist_ok=True)
    shutil.rmtree(os.path.join(job, "ctl"), ignore_errors=True)  # an old attempt's requests
    os.makedirs(os.path.join(job, "ctl"), exist_ok=True)
    os.makedirs(spec["attempt_dir"], exist_ok=True)
    # where this input's text begins: the first container's offsets, carried to each rerun
    starts = _read_json(os.path.join(set_aside, STARTS)) if set_aside else None
    if not (isinstance(starts, dict) and all(isinstance(starts.get(k), int) for k, _ in files)):
        starts = {key: relay.size(path) for key, path in files}
    _write_json(os.path.join(spec["attempt_dir"], STARTS), starts)
    _build_code(base, modal["bundle"], os.path.join(work, "code"))
    for name, key in modal.get("data", {}).items():
        _unpack(os.path.join(base, "data", key), os.path.join(work, "data", name))
    moved_in = _restore_from_home(base, modal.get("restore"), job, spec["attempt_dir"])
    restored = _restore_complete_checkpoint(os.path.join(job, "ckpt"), os.path.join(job, "ckpt-gens"))
    if set_aside:  # first what the preempted container wrote and could not relay, in order
        for key, path in files:
            _relay_rest(relay, path, set_aside, key, starts[key], relay.METRIC_MARK if key == "metrics" else "")
        _note(spec["log"], f"[gpu-router] Modal ran this input again in a new container (the last one was "
                           f"preempted): attempt {spec['attempt']} goes on from the checkpoint on the job's volume")
    elif spec["attempt"] > 1 and os.listdir(os.path.join(job, "ckpt")):
        _note(spec["log"], "[gpu-router] resuming from the last checkpoint on the job's volume")
    if moved_in:
        _note(spec["log"], f"[gpu-router] {moved_in}")
    if restored:
        _note(spec["log"], f"[gpu-router] {restored}")
    spec_path = os.path.join(spec["attempt_dir"], "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)

    preempted = threading.Event()
    previous = _on_preemption(spec["attempt_dir"], preempted)
    try:
        code, asked = relay.run(spec, spec_path, os.path.join(base, "runtime", "launch.py"),
                                modal.get("checkpoint_after_s"), "function timeout", interrupt=preempted,
                                interrupt_text="Modal is preempting this container",
                                progress={key: os.path.join(spec["attempt_dir"], f"relayed-{key}") for key, _ in files})
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:
        with open(os.path.join(spec["attempt_dir"], "exit.json")) as f:
            exit_doc = json.load(f)
    except (OSError, ValueError):
        exit_doc = {}
    ended_for_time = asked and exit_doc.get("code") in (0, None)
    # this input's log and metric rows whole, every container's: the call's log stream may
    # still be catching up when its result is there (and missed what a preempted container
    # wrote after its relay's last copy), and the result is what the supervisor reads last
    appended = {key: _tail(path, starts[key]) for key, path in files}
    if preempted.is_set():  # Modal runs the input again: this container's end is no exit
        return {"code": code, "exit": exit_doc, "time_signal": asked, "preempted": True,
                "outputs": b"", "ckpt": b"", **appended}
    ckpt = os.path.join(job, "ckpt")  # on the volume for the next call here; a copy goes home
    ckpt_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs
                     if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)))
    return {"code": code, "exit": exit_doc, "time_signal": asked,
            "outputs": b"" if ended_for_time else _pack(os.path.join(job, "out")),
            "ckpt": _pack(ckpt) if 0 < ckpt_bytes <= CKPT_RESULT_MAX else b"", **appended}


def _on_preemption(attempt_dir: str, preempted: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM mark the attempt folder as preempted (before anything else: the mark
    is what tells the rerun that whatever the launcher recorded next is no exit) and set
    `preempted`, on which the relay asks the job to checkpoint and goes on relaying until the
    job ends or Modal kills the container. Only the main thread may set handlers; elsewhere
    nothing changes (the rerun still treats a signal-ended attempt as preempted). Returns the
    handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        if not preempted.is_set():
            try:
                _write_json(os.path.join(attempt_dir, PREEMPTED), {"signal": signum})
            except OSError:
                pass
            preempted.set()

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    return previous


def _relay_rest(relay: ModuleType, path: str, set_aside: str, key: str, start: int, mark: str) -> None:
    """The lines of `path` the preempted container wrote after its relay's last copy (its
    `relayed-<key>`; from this input's start where it recorded nothing), to standard output now,
    before anything of this container's: the call's log stream then holds every line once, in
    the order written. Whole lines only (a line cut by the kill stays in the file, and in the
    result's text, as it is)."""
    done = relay.relayed(os.path.join(set_aside, f"relayed-{key}"))
    offset = start if done is None else max(done, start)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return
    for line in chunk[: chunk.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines():
        relay.emit(mark + line)


def _note(log_path: str, line: str) -> None:
    """A line of gpu-router's own, to the call's log stream and to the job's log file (so that
    the attempt's text in the result, which the supervisor keeps last, has it too)."""
    print(line, flush=True)
    try:
        with open(log_path, "a") as f:
            f.write(line + "\n")
    except OSError:
        pass


def _read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: str, doc: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


HOME_RESTORED = "restored-from-home"  # in the attempt folder: its checkpoint from home is in place


def _restore_from_home(base: str, name: str | None, job: str, attempt_dir: str) -> str | None:
    """A job moved or resumed here: the checkpoint home held, shipped with this attempt's
    function (restore/<name>), replaces the volume's ckpt/ and its generations (an earlier
    attempt here left older ones), once per attempt: Modal running the input again after a
    preemption goes on from what this attempt saved since. A line for the log, or None."""
    if not name or os.path.exists(os.path.join(attempt_dir, HOME_RESTORED)):
        return None
    archive = os.path.join(base, "restore", name)
    if not os.path.isfile(archive):
        return None
    ckpt, gens = os.path.join(job, "ckpt"), os.path.join(job, "ckpt-gens")
    staging, old = f"{ckpt}.home-{os.getpid()}", f"{ckpt}.old-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    _unpack(archive, staging)
    shutil.rmtree(gens, ignore_errors=True)
    os.makedirs(gens)
    if os.path.exists(ckpt):
        os.replace(ckpt, old)
    os.replace(staging, ckpt)
    shutil.rmtree(old, ignore_errors=True)
    open(os.path.join(attempt_dir, HOME_RESTORED), "w").close()
    return "restored the checkpoint it came with from home"


def _restore_complete_checkpoint(ckpt: str, gens: str) -> str | None:
    """The live checkpoint folder as its completion marker describes it, or else the newest
    whole generation `gpu.checkpoint_saved()` froze (ckpt-gens/NNNNNNNNNN/, written under a dot
    name and renamed into place whole). A container killed while the job rewrote a file leaves
    it torn (empty, half written) with a newer mtime or another size than the marker records,
    or a file newer than the marker (a save under way): that folder is never what a rerun
    resumes from. Without a marker nothing says what is complete: the folder stays as it is.
    Returns a line for the log when it restored, else None."""
    marker = _read_json(os.path.join(ckpt, COMPLETE))
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        return None
    if _matches(ckpt, marker["files"]):
        return None
    newest = None
    try:
        names = sorted((n for n in os.listdir(gens) if n.isdigit()), reverse=True)
    except OSError:
        names = []
    for name in names:
        doc = _read_json(os.path.join(gens, name, COMPLETE))
        if isinstance(doc, dict) and isinstance(doc.get("files"), dict) \
                and _matches(os.path.join(gens, name), doc["files"], extra_ok=False):
            newest = (name, doc)
            break
    if newest is None:
        return (f"the checkpoint folder does not match its last save (generation {marker.get('generation')}) "
                "and no complete generation was frozen: left as it is")
    name, doc = newest
    staging, torn = f"{ckpt}.restore-{os.getpid()}", f"{ckpt}.torn-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(os.path.join(gens, name), staging, symlinks=True, copy_function=_copy_sparse)
    os.replace(ckpt, torn)
    os.replace(staging, ckpt)
    shutil.rmtree(torn, ignore_errors=True)
    return (f"the checkpoint folder was being written when the container stopped: restored the last "
            f"complete checkpoint (generation {int(doc.get('generation') or int(name))})")


def _copy_sparse(src: str, dst: str) -> str:
    """copy2 that keeps a sparse file's holes (the runtime's sparsefile: mounted beside this
    file under gr/runtime, or this file's own folder where it runs from the source tree): sizes
    and mtimes kept, which the marker's check reads."""
    here = os.path.dirname(os.path.abspath(__file__))
    for runtime in (os.path.join(here, "gr", "runtime"), here):
        if os.path.isfile(os.path.join(runtime, "sparsefile.py")) and runtime not in sys.path:
            sys.path.insert(0, runtime)
            break
    import sparsefile

    sparsefile.copy_file(src, dst, os.stat(src).st_mode & 0o7777)
    shutil.copystat(src, dst)
    return dst


def _matches(folder: str, named: dict, extra_ok: bool = True) -> bool:
    """Every file the marker names has the size and mtime it recorded, and no other file was
    written after the marker (`extra_ok`: older unnamed files are the job's own business)."""
    try:
        mark_ns = os.stat(os.path.join(folder, COMPLETE)).st_mtime_ns
    except OSError:
        return False
    for rel, meta in named.items():
        try:
            st = os.lstat(os.path.join(folder, rel))
        except OSError:
            return False
        if not (isinstance(meta, list) and len(meta) >= 2) or [st.st_size, st.st_mtime_ns] != list(meta[:2]):
            return False
    for here, dirs, names in os.walk(folder):
        for n in names:
            path = os.path.join(here, n)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if rel in named or rel == COMPLETE or rel.startswith(COMPLETE + "."):
                continue
            if not extra_ok or os.lstat(path).st_mtime_ns > mark_ns:
                return False
    return True


def _set_aside_preempted(attempt_dir: str) -> str | None:
    """Modal runs a preempted input again, in a new container, on its own: this call's attempt
    folder on the volume then holds the launcher's "started" claim. Left there, the claim (never
    start an attempt twice) would refuse the rerun and fail the job; the folder is kept beside
    it (`<n>.preempted-<k>`) and the attempt goes on from the checkpoint on the volume. A rerun
    is itself Modal's word that the container was preempted: the folder is set aside when the
    container got a preemption signal (PREEMPTED), its launcher recorded no exit, or the exit it
    recorded was a signal's (a runtime that sends SIGTERM to every process: the launcher notes
    it and writes an exit that is not the job's own). Only an exit the job made by itself
    stands (the launcher then refuses to run it again, and that exit is the result). Returns
    the folder set aside, or None when this is no rerun."""
    if not os.path.exists(os.path.join(attempt_dir, "started")):
        return None
    exit_doc = _read_json(os.path.join(attempt_dir, "exit.json"))
    if isinstance(exit_doc, dict) and not exit_doc.get("terminated_by") \
            and not os.path.exists(os.path.join(attempt_dir, PREEMPTED)):
        return None
    k = 1
    while os.path.exists(f"{attempt_dir}.preempted-{k}"):
        k += 1
    os.replace(attempt_dir, f"{attempt_dir}.preempted-{k}")
    return f"{attempt_dir}.preempted-{k}"


def _tail(path: str, start: int, cap: int = 32 << 20) -> bytes:
    """What `path` gained since `start`, at most `cap` bytes (the last of them)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(start, os.path.getsize(path) - cap))
            return f.read(cap)
    except OSError:
        return b""
