"""The `run` of a SkyPilot task that runs one attempt of a gpu-router job on its own cluster.

SkyPilot syncs the task's workdir (made by core/providers/skypilot/launching.py) to the
cluster and runs `python3 task.py` in it: this file, behind one line `SPEC = {...}`. The
workdir holds the runtime (one archive), the bundle's manifest and its file objects, the data
sets, and, for a job moved here, the checkpoint to resume from. This script builds the job's
folder under the cluster's home (the code from the manifest over the objects, each checked
against its hash: codetree, as on every target), restores that checkpoint, and runs the job
through the launcher in the foreground, as on Kaggle and Modal, so it gets the same `gpu`
module, log filter (the masker) and exit record as everywhere.

Only the task's output comes home (gpu-router follows it through SkyPilot's API: SkyPilot's
own SSH access turns host-key checks off, so gpu-router never uses it). So everything travels
in that stream: the launcher's already masked log lines, the metric rows behind their marker,
and, framed (frames.py), each checkpoint generation `gpu.checkpoint_saved()` freezes (as soon
as it is whole, so a cluster lost later still left home its last checkpoint), then at the end
the checkpoint folder as it was left (where the job never froze one), the outputs (out/, as a
tar of regular files, within the target's cap), and the exit record, in that order: home
reads the exit record last and knows the rest came before it.

Standard library only.
"""

import json
import os
import shutil
import sys
import tarfile
import tempfile
import threading

SPEC: dict = globals().get("SPEC", {})  # the provider's first line sets it


def _unpack(archive: str, dest: str) -> None:
    """Regular files and folders only, each inside `dest`: tarfile's data filter where this
    Python has it, the same refusals by hand where not (SkyPilot's task Python was 3.11.2, from
    before the filter; an archive here came from home, but the check costs nothing)."""
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            parts = m.name.replace("\\", "/").split("/")
            if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in parts:
                raise ValueError(f"{m.name!r} in {os.path.basename(archive)} is not a plain file inside it")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            for m in members:
                m.mode = (m.mode or 0o644) & 0o755 | (0o700 if m.isdir() else 0o600)
            tar.extractall(dest)


def _say(emit, text: str) -> None:
    emit(f"[gpu-router] {text}")


def _build_code(work: str, sky: dict, dest: str) -> None:
    """The job's code folder from the manifest over the shipped objects, each checked against
    its hash as it is unpacked into scratch space that is removed once the folder is built."""
    import gzip

    import codetree  # the runtime just unpacked (objstore.py beside it)
    import objstore

    store = tempfile.mkdtemp(prefix="gpu-router-objects-")
    try:
        if sky.get("objects"):
            with gzip.open(os.path.join(work, sky["objects"]), "rb") as f:
                objstore.receive(store, f)
        plain = os.path.join(store, "manifest.json")
        with gzip.open(os.path.join(work, sky["manifest"]), "rb") as src, open(plain, "wb") as out:
            shutil.copyfileobj(src, out)
        entries = codetree.read_manifest(plain)
        lacking = objstore.missing(store, [r[2] for r in entries if r[1] != "l"])
        if lacking:
            raise ValueError(f"{len(lacking)} of the code's files were not shipped (first {lacking[0][:12]})")
        codetree.build(entries, store, dest)
    finally:
        shutil.rmtree(store, ignore_errors=True)


class CheckpointSender:
    """Sends each checkpoint generation home once it is whole, newest only (a generation the
    job pruned before it was packed gives way to the next), from a thread of its own."""

    def __init__(self, ckpt: str, scratch: str, max_bytes: int, emit, every_s: float) -> None:
        self.ckpt, self.scratch, self.max_bytes, self.emit = ckpt, scratch, max_bytes, emit
        self.every_s = every_s
        self.sent: str | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()  # one generation on the stream at a time
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.send_newest()

    def send_newest(self) -> bool:
        """The newest whole generation, if not sent yet: whether one went."""
        import ckptscan
        import frames

        with self.lock:
            scan = ckptscan.scan(self.ckpt, self.max_bytes)
            gen = scan.get("generation_dir")
            if not gen or gen == self.sent:
                return False
            cost = sum(int(v[3]) if len(v) > 3 else int(v[0]) for v in scan["files"].values())
            if cost > self.max_bytes:
                if self.sent != f"over:{gen}":
                    _say(self.emit, f"checkpoint generation {int(gen)} is {cost} bytes, over the "
                                    f"{self.max_bytes} byte cap: not sent home")
                    self.sent = f"over:{gen}"
                return False
            archive = os.path.join(self.scratch, f"ckpt-{gen}.tar.gz")
            try:
                doc = ckptscan.pack(self.ckpt, archive, sorted(scan["files"]), gen)
                if doc.get("gone"):
                    return False  # pruned before it was pinned: the next look sends a newer one
                frames.send_file(self.emit, "ckpt", gen, archive)
                self.sent = gen
                return True
            finally:
                try:
                    os.unlink(archive)
                except OSError:
                    pass


def _pack_folder(folder: str, archive: str, max_bytes: int, max_files: int) -> str | None:
    """The regular files under `folder` (never a link, a FIFO, a device), as a tar.gz; the
    reason nothing was packed where they are over the caps."""
    total = count = 0
    chosen = []
    for here, dirs, files in os.walk(folder):  # os.walk never descends into a link
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(here, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            total += st.st_size
            count += 1
            chosen.append(path)
    if total > max_bytes or count > max_files:
        return f"{count} files, {total} bytes: over the cap ({max_files} files, {max_bytes} bytes)"
    with tarfile.open(archive, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for path in chosen:
            try:
                tar.add(path, arcname=os.path.relpath(path, folder), recursive=False)
            except OSError:
                continue
    return None


def main() -> int:
    work = os.getcwd()
    root = os.path.join(os.path.expanduser("~"), "gpu-router")
    runtime = os.path.join(root, "runtime")
    job = os.path.join(root, "jobs", str(SPEC.get("job_id", "job")))

    def put(text: str, placeholder: str, value: str) -> str:
        return text.replace(placeholder, value.replace("\\", "\\\\").replace('"', '\\"'))

    text = put(put(put(json.dumps(SPEC), "@JOB@", job), "@RUNTIME@", runtime), "@ROOT@", root)
    spec = json.loads(text)
    sky = spec.pop("skypilot")
    _unpack(os.path.join(work, sky["runtime"]), runtime)
    sys.path.insert(0, runtime)
    import frames  # the runtime just unpacked
    import relay

    emit = relay.emit
    for name in ("out", "ckpt", "ckpt-gens", "ctl", "data"):
        os.makedirs(os.path.join(job, name), exist_ok=True)
    os.makedirs(spec["attempt_dir"], exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="gpu-router-send-")
    exit_file = os.path.join(spec["attempt_dir"], "exit.json")
    code = 97
    sender = None
    try:
        try:
            if not os.path.exists(os.path.join(job, ".code-ready")):
                shutil.rmtree(os.path.join(job, "code"), ignore_errors=True)
                _build_code(work, sky, os.path.join(job, "code"))
                open(os.path.join(job, ".code-ready"), "w").close()
            for name, archive in (sky.get("data") or {}).items():
                _unpack(os.path.join(work, archive), os.path.join(job, "data", name))
            if sky.get("restore") and not os.path.exists(os.path.join(spec["attempt_dir"], "started")):
                shutil.rmtree(os.path.join(job, "ckpt"), ignore_errors=True)
                shutil.rmtree(os.path.join(job, "ckpt-gens"), ignore_errors=True)
                os.makedirs(os.path.join(job, "ckpt-gens"))
                _unpack(os.path.join(work, sky["restore"]), os.path.join(job, "ckpt"))
                _say(emit, "resuming from the checkpoint gpu-router brought from home")
        except (OSError, ValueError, tarfile.TarError) as exc:
            _say(emit, f"the job's folder could not be made on this cluster: {exc}")
            with open(exit_file, "w") as f:
                json.dump({"code": None, "error": f"the job's folder could not be made: {exc}"}, f)
            return 97
        spec_path = os.path.join(spec["attempt_dir"], "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        cap = int(sky.get("max_output_bytes") or (4 << 30))
        sender = CheckpointSender(os.path.join(job, "ckpt"), scratch, cap, emit,
                                  float(sky.get("checkpoint_poll_s") or 2.0))
        sender.thread.start()
        code, _ = relay.run(spec, spec_path, os.path.join(runtime, "launch.py"), None, "",
                            log_escape=frames.escape_log, join_s=None)  # every line before the exit record
    finally:
        if sender is not None:
            sender.stop.set()
            sender.thread.join(timeout=600)
            _send_rest(job, scratch, sky, sender, emit)
        if os.path.exists(exit_file):
            frames.send_file(emit, "exit", "record", exit_file)
        shutil.rmtree(scratch, ignore_errors=True)
    return code


def _send_rest(job: str, scratch: str, sky: dict, sender: CheckpointSender, emit) -> None:
    """After the job: its last checkpoint generation, else the live folder it left (a job that
    never called `gpu.checkpoint_saved()`), then its outputs."""
    import frames

    cap = int(sky.get("max_output_bytes") or (4 << 30))
    files = int(sky.get("max_output_files") or 100_000)
    if not sender.send_newest() and sender.sent is None:
        ckpt = os.path.join(job, "ckpt")
        if os.path.isdir(ckpt) and os.listdir(ckpt):
            archive = os.path.join(scratch, "live.tar.gz")
            why = _pack_folder(ckpt, archive, cap, files)
            if why:
                _say(emit, f"checkpoint folder not sent home: {why}")
            else:
                frames.send_file(emit, "live", "ckpt", archive)
    archive = os.path.join(scratch, "outputs.tar.gz")
    why = _pack_folder(os.path.join(job, "out"), archive, cap, files)
    if why:
        _say(emit, f"outputs not sent home: {why}; left on the cluster in {job}/out until it goes down")
    else:
        frames.send_file(emit, "out", "outputs", archive)


if __name__ == "__main__":
    sys.exit(main())
