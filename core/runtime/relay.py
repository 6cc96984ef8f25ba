"""One attempt run in the foreground where only standard output reaches home (a Kaggle kernel,
a Modal function): the launcher runs the job, its already masked log lines and its metric rows
(behind METRIC_MARK) are copied to standard output as they are written, and before the
session's time limit the job is asked to checkpoint, with a `time-signal` marker saying that a
clean exit then means "resume", not "done" (as Slurm's batch script does).

Standard library only: the kernel or the function imports it from the unpacked runtime.
"""

import os
import signal
import subprocess
import sys
import threading
import time

METRIC_MARK = "@@gpu-router-metric@@ "

# The log and the metrics are copied by two threads to one standard output. print() writes a
# line's text and its newline as two writes, and where standard output is unbuffered
# (PYTHONUNBUFFERED, common in containers) the other thread's line lands between them: a metric
# row glued to a log line no longer starts with METRIC_MARK and is lost as log. Every line
# goes out whole, under this lock, through `emit`.
_OUT = threading.Lock()


def emit(line: str) -> None:
    """Write one line to standard output in one write, never between another's text and its newline."""
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _record(progress: str | None, offset: int) -> None:
    if progress:
        try:
            with open(progress + ".tmp", "w") as f:
                f.write(str(offset))
            os.replace(progress + ".tmp", progress)
        except OSError:
            pass


def relayed(progress: str) -> int | None:
    """How far a relay that recorded its `progress` had copied its file (None: unknown)."""
    try:
        with open(progress) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


MAX_LINE = 64 * 1024  # characters a relayed line carries at most: a longer one goes in pieces
READ = 1 << 20  # bytes read at once: a job that wrote gigabytes is copied a megabyte at a time


def follow(path: str, stop: threading.Event, mark: str = "", progress: str | None = None,
           escape=None) -> None:
    """Copy the lines `path` gains from now on to standard output until `stop`, then the rest
    (an earlier attempt's lines, in a file that outlives attempts, were relayed by that one).
    `progress`: a file that holds how far the copy has got, written before each copy (a
    process killed between the two has lost at most that copy from its stream, never sent a
    line twice), so a container that runs the same input again can copy what this one could
    not (modal_function.py). `escape`: what each line goes through first (frames.escape_log
    where files travel in the same stream, so no line of the job's reads as one).

    A line over MAX_LINE goes out in pieces, and one the job never ends (dots printed for hours)
    as soon as it is that long: a 20 MB line once broke SkyPilot's adapter, whose protocol
    carries each line as one message, and with it every job's stream on that target."""
    offset = size(path)
    _record(progress, offset)
    while True:
        done = stop.is_set()
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(READ)
        except OSError:
            chunk = b""
        full = len(chunk) == READ
        if chunk:
            cut = chunk.rfind(b"\n") + 1
            if done and not full:
                cut = len(chunk)
            elif cut == 0 and len(chunk) >= MAX_LINE:
                cut = _utf8_cut(chunk, MAX_LINE)
            whole = chunk[:cut]
            offset += len(whole)
            _record(progress, offset)
            for line in whole.decode("utf-8", "replace").splitlines():
                for at in range(0, max(len(line), 1), MAX_LINE):
                    piece = line[at:at + MAX_LINE]
                    emit(mark + (escape(piece) if escape else piece))
        if done and not full:
            return
        if not full:
            stop.wait(0.5)


def _utf8_cut(data: bytes, n: int) -> int:
    """`n`, or a little less so the cut does not fall inside a character's bytes."""
    at = n
    while at > n - 4 and at > 0 and (data[at] & 0xC0) == 0x80:
        at -= 1
    return at if at > 0 else n


def _ask_checkpoint(spec: dict, launcher: subprocess.Popen, text: str) -> None:
    """The job's checkpoint request: the control file and SIGUSR1 to the launcher's group."""
    open(os.path.join(spec["env"]["GPU_ROUTER_CONTROL_DIR"], "checkpoint"), "w").close()
    emit(f"[gpu-router] {text}: asking the job to checkpoint")
    try:
        os.killpg(launcher.pid, signal.SIGUSR1)  # the launcher leads the job's group
    except OSError:
        pass


def run(spec: dict, spec_path: str, launcher_py: str, checkpoint_after_s: float | None,
        limit_text: str, interrupt: "threading.Event | None" = None,
        interrupt_text: str = "interrupted", progress: dict | None = None,
        log_escape=None, join_s: float | None = 10.0) -> tuple[int, bool]:
    """Run the launcher on `spec_path`, relaying; (its exit status, whether the job was asked
    to checkpoint for the time limit). Once `interrupt` is set (the container is going away:
    a Modal preemption's grace period) the job is asked to checkpoint too, and the relay goes
    on until the launcher ends or the process is killed: what the job writes meanwhile still
    reaches standard output. `progress` ({"log": file, "metrics": file}): where each copy
    records how far it has got (`follow`). `log_escape`: applied to each log line (`follow`).
    `join_s`: how long the copies may take to finish once the launcher ended (None: as long as
    they need, where what comes after them, a SkyPilot task's files and exit record, must come
    after every line; a container about to be killed gives them a bound)."""
    stop = threading.Event()
    progress = progress or {}
    followers = [threading.Thread(target=follow, args=(spec["log"], stop, "", progress.get("log"), log_escape),
                                  daemon=True),
                 threading.Thread(target=follow, args=(spec["env"]["GPU_ROUTER_METRICS_FILE"], stop,
                                                       METRIC_MARK, progress.get("metrics")), daemon=True)]
    for t in followers:
        t.start()
    launcher = subprocess.Popen([sys.executable, launcher_py, "--foreground", spec_path])
    deadline = time.monotonic() + float(checkpoint_after_s or 1e12)
    asked = interrupted = False
    while launcher.poll() is None:
        if not asked and time.monotonic() >= deadline:
            asked = True
            open(os.path.join(spec["attempt_dir"], "time-signal"), "w").close()
            _ask_checkpoint(spec, launcher, f"{limit_text} near")
        if not interrupted and interrupt is not None and interrupt.is_set():
            interrupted = True
            _ask_checkpoint(spec, launcher, interrupt_text)
        time.sleep(0.25)
    stop.set()
    for t in followers:
        t.join(timeout=join_s)
    return launcher.returncode, asked
