"""Start one attempt of a job, detached, and record how it ended.

    python launch.py [--secrets-stdin] [--foreground] ATTEMPT_DIR/spec.json
    python launch.py --kill [--force] ATTEMPT_DIR

Runs with the target's Python and the standard library only, locally or on a remote host.
It detaches (double fork, new session) so the job survives the supervisor and the terminal;
claims the attempt with an O_EXCL marker so no attempt ever starts twice; installs the
project's dependencies into a venv cached by their hash (a marker written last means a
broken install is never reused); runs the job in its own process group with SIGUSR1 ignored
unless the job's `gpu` module asks for it; writes everything into the job log through one
filter (joblog.py: secret values masked in any form, terminal codes removed, masked again as
displayed), its own lines, pip's output and the job's alike; samples the
job's GPUs with nvidia-smi while it runs (gpuutil.py: `gpu/util` and `gpu/mem_gb` rows in its
metrics file, for the `gpu_util_below` kill rule); and writes exit.json atomically when the
job ends.

Every process the job starts is tracked (core/runtime/jobprocs.py: a cgroup where the host lets
us make one, and always the GPU_ROUTER_JOB marker in the environment): when the job's main
process ends, whatever it left running is stopped, and `--kill ATTEMPT_DIR` (what every target
runs to cancel) signals all of it, also processes that left the job's session with `setsid`.
A full disk ends the attempt with "disk full at PATH (N MB free)" in exit.json, not with a
launcher that died silently: a small reserve file in the attempt folder is released to make
room for that record.

`--secrets-stdin` reads the job's secret values as one JSON object on stdin before detaching,
so over SSH they travel inside the encrypted channel and never touch the remote disk or a
command line. `--foreground` (inside a Slurm or PBS batch script) does not fork: the scheduler
already detached the job and tracks this process; it leads its own process group so the batch
script can forward a checkpoint signal to the whole job, and exits with the job's status so
the scheduler's own record (COMPLETED, FAILED) agrees with exit.json.

This file is the attempt's life, from claim to exit record, and the entry point that ties the
rest: the job log and its filter (joblog.py), how each process of the attempt is started, in
its cgroup and the sandbox the spec asks for (jobspawn.py), and the job's environment with its
dependencies (venvbuild.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

if __package__:  # imported as core.runtime.launch (the engine, tests)
    from . import diskspace, gpuutil, joblog, jobprocs, jobspawn, uvenv, venvbuild, workdir
else:  # run as a script on the target, beside its sibling files
    import diskspace
    import gpuutil
    import joblog
    import jobprocs
    import jobspawn
    import uvenv
    import venvbuild
    import workdir

# the job log's filter, where tests and the masking bench have always found it
MASK, Masker, JobLog = joblog.MASK, joblog.Masker, joblog.JobLog
secret_variants, terminal_safe = joblog.secret_variants, joblog.terminal_safe
_run_logged = jobspawn.run_logged

RESERVE_BYTES = 256 * 1024  # room kept in the attempt folder for exit.json on a full disk


def run(spec: dict) -> int:
    """The attempt, in this process: its sandbox decided, its dependencies installed, the job
    run to its end, what it left stopped, its declared outputs brought in, and exit.json
    written whatever happened on the way."""
    attempt_dir = spec["attempt_dir"]
    phase_file = os.path.join(attempt_dir, "phase")
    exit_file = os.path.join(attempt_dir, "exit.json")
    masker = joblog.Masker([os.environ.get(n, "") for n in spec.get("secret_env", [])])
    log = joblog.JobLog(spec["log"], masker)
    ended = {"signal": None}

    def on_term(signum, frame):  # the group got it too; note it, let the job end, report
        ended["signal"] = signum

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # inherited: a job without `gpu` ignores it

    code: int | None = None
    error = None
    enospc = False
    box: dict = {}
    before = None
    sampler = None
    if jobspawn.TRACK.get("marker"):
        os.environ[jobprocs.MARKER_VAR] = jobspawn.TRACK["marker"]  # pip and the job
        log.line(jobprocs.describe(jobspawn.TRACK))
    try:
        diskspace.write_atomic(phase_file, "installing")
        jobspawn.decide_sandbox(spec, log)
        _link_checkpoint(spec, log)
        python = venvbuild.ensure_venv(spec, log)
        if ended["signal"]:
            raise RuntimeError("cancelled before the job started")
        sandbox = jobspawn.sandbox_plan(spec, python)
        env = jobspawn.job_env(spec, python, sandbox)
        command = [python if part == "{python}" else part for part in spec["command"]]
        before = workdir.snapshot(spec["workdir"])  # to tell, at the end, what the job wrote
        diskspace.write_atomic(phase_file, "running")
        log.line(f"attempt {spec['attempt']}: running "
                 f"{' '.join(command[1:] if command[0] == python else command)}")
        sampler = _start_sampler(spec, env, log)
        code = jobspawn.run_logged(command, log, box, cwd=spec["workdir"], env=env, sandbox=sandbox)
    except venvbuild.DepsFailed as exc:  # the job never started: its reason is the installer's, one line
        error = masker.text(uvenv.FAILED + str(exc))
        code = 1  # not 127 ("command not found"): that is not what happened
    except Exception as exc:  # noqa: BLE001 - any failure here must reach exit.json
        error = masker.text(str(exc))
        enospc = diskspace.is_enospc(exc)
        code = code if code is not None else _end_child(box.get("child"))
    if sampler is not None:
        sampler.stop()
    left = jobspawn.stop_leftovers(box)
    if left:
        log.line(f"stopped {left} process(es) the job left running")
    full = _disk_full(spec, enospc, code)
    error = full or error
    if error:
        log.line(f"error: {error}")
    produced = _bring_declared(spec, before, log)
    result = {"code": code, "signal": -code if code is not None and code < 0 else None,
              "terminated_by": ended["signal"], "error": error, "disk_full": bool(full),
              "outputs": produced, "ended_at": time.time()}
    diskspace.release(os.path.join(attempt_dir, "reserve"))  # room for exit.json on a full disk
    diskspace.write_atomic(exit_file, json.dumps(result))
    log.line(f"attempt {spec['attempt']}: exited with status {code}")
    stayed = workdir.stayed_text(produced or {}, spec.get("short_id"))
    if stayed:
        log.line(stayed)  # the log's last line: work that did not come home is never silent
    log.close()
    if jobspawn.TRACK.get("cgroup"):
        jobprocs.cgroup_remove(jobspawn.TRACK["cgroup"])
    return 0


def _link_checkpoint(spec: dict, log: joblog.JobLog) -> None:
    """The request's `checkpoint` folder becomes a link to the job's ckpt/ (workdir.py): what
    the script saves there is mirrored home, frozen into generations and restored on a move."""
    rel = spec.get("checkpoint")
    if not rel:
        return
    note = workdir.link_checkpoint(spec["workdir"], os.path.dirname(spec["log"]), rel,
                                   spec["env"]["GPU_ROUTER_CHECKPOINT_DIR"])
    if note:
        log.line(note)


def _start_sampler(spec: dict, env: dict[str, str], log: joblog.JobLog) -> "gpuutil.Sampler | None":
    """GPU utilisation rows (gpu/util, gpu/mem_gb) while the job runs (core/runtime/gpuutil.py);
    the job never depends on it: a sampler that cannot start is one line in the log."""
    tool_env = {k: v for k, v in os.environ.items() if k != jobprocs.MARKER_VAR}  # not the job's
    try:
        return gpuutil.start(spec, env, log.line, tool_env)
    except Exception as exc:  # noqa: BLE001 - a thread that cannot start changes nothing else
        log.line(f"GPU utilisation: not sampled ({type(exc).__name__}: {exc})")
        return None


def _bring_declared(spec: dict, before: dict | None, log: joblog.JobLog) -> dict | None:
    """Declared outputs into the output folder (they come home with it), and a count of what
    the job wrote that was not declared; a failure here never hides how the job ended."""
    try:
        out_dir = spec["env"]["GPU_ROUTER_OUTPUT_DIR"]
        named = workdir.declared_by_job(spec["workdir"], out_dir)  # Lightning's lightning_logs/
        patterns = list(spec.get("outputs") or [])
        for folder in named:
            if folder not in patterns:
                patterns.append(folder)
                log.line(f"outputs: {folder} (the job's Lightning logs) comes home with the outputs")
        produced = workdir.collect(spec["workdir"], out_dir, patterns, before)
    except Exception as exc:  # noqa: BLE001 - reported, then the exit is recorded as usual
        log.line(f"outputs: could not look at the working folder: {exc}")
        return None
    if produced["declared"]:
        n = produced["declared"]
        log.line(f"outputs: {n} declared file{'s' * (n != 1)} brought into the output folder")
    for path, why in produced.get("refused") or []:
        log.line(f"outputs: {path} is {why}: not copied (no link is followed)")
    return produced


def _end_child(child: subprocess.Popen | None) -> int:
    """The status of a job the launcher can no longer follow (its log cannot be written): the
    job is stopped, since its output would be lost, and reaped."""
    if child is None:
        return 127
    if child.poll() is None:
        child.terminate()
        try:
            return child.wait(timeout=jobprocs.SWEEP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def _disk_full(spec: dict, enospc: bool, code: int | None) -> str | None:
    """ "disk full at PATH (N MB free)" when the attempt failed for want of space: the launcher
    hit ENOSPC, or the job failed while its folder's (or the venvs') disk is full."""
    if not enospc and code == 0:
        return None
    job_dir = os.path.dirname(spec["log"])
    venvs = (spec.get("deps") or {}).get("venvs_dir", "")
    where = diskspace.first_full([job_dir, venvs])
    if where is None and enospc:
        where = job_dir
    return diskspace.disk_full_text(where) if where else None


def _read_secrets() -> None:
    """Secret values, one JSON object on stdin, into this process's environment (memory only)."""
    raw = sys.stdin.buffer.read()
    values = json.loads(raw.decode() or "{}") if raw.strip() else {}
    if not isinstance(values, dict):
        raise SystemExit("--secrets-stdin expects a JSON object")
    for name, value in values.items():
        os.environ[str(name)] = str(value)


def main(argv: list[str]) -> int:
    flags = {a for a in argv[1:] if a.startswith("--")}
    rest = [a for a in argv[1:] if not a.startswith("--")]
    unknown = flags - {"--secrets-stdin", "--foreground", "--kill", "--force"}
    kill_mode = "--kill" in flags
    mixed = (flags - {"--kill", "--force"}) if kill_mode else (flags & {"--force"})
    if unknown or mixed or len(rest) != 1:
        print("usage: launch.py [--secrets-stdin] [--foreground] SPEC\n"
              "       launch.py --kill [--force] ATTEMPT_DIR", file=sys.stderr)
        return 2
    if kill_mode:
        return _kill(rest[0], force="--force" in flags)
    # before this process leads a group anyone can signal: the checkpoint signal sent to the
    # group as soon as it exists (a time limit already near) must not kill the launcher
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    spec_path = rest[0]
    with open(spec_path) as f:
        spec = json.load(f)
    if "--secrets-stdin" in flags:
        _read_secrets()
    if "--foreground" in flags:
        return _foreground(spec)
    if os.fork() > 0:  # the caller's child returns at once; the grandchild runs the job
        return 0
    os.setsid()  # own session and process group: cancel kills the group, terminals don't
    if not _claim(spec):  # a second launcher for this attempt stops here
        os._exit(0)
    _adopt_orphans()
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    try:
        run(spec)
    finally:
        os._exit(0)


def _adopt_orphans() -> None:
    """Linux: become the job's child subreaper, so a process the job double-forks away from
    its parent chain is re-parented to this launcher, not to init: it still descends from the
    launcher, which is how `gpu approve` tells it is a job's (core/engine/jobguard.py) where no
    cgroup or sandbox says so. Elsewhere, or without ctypes, nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (ImportError, OSError, AttributeError):
        pass


def _kill(attempt_dir: str, force: bool) -> int:
    """Cancel an attempt: every process it started, however it detached (one routine for every
    target: the local one calls jobprocs directly, remote ones run this over their shell)."""
    log = None
    try:
        with open(os.path.join(attempt_dir, "spec.json")) as f:
            log = json.load(f).get("log")
    except (OSError, ValueError):
        pass
    print(json.dumps(jobprocs.kill_attempt(attempt_dir, force=force, log_path=log)))
    return 0


def _claim(spec: dict) -> bool:
    """Claim the attempt (O_EXCL: never started twice), keep room for its exit record, set up
    how its processes are tracked, and record the launcher's pid, group and tracking."""
    attempt_dir = spec["attempt_dir"]
    try:
        fd = os.open(os.path.join(attempt_dir, "started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(time.time()).encode())
    os.close(fd)
    diskspace.reserve(os.path.join(attempt_dir, "reserve"), RESERVE_BYTES)
    marker = spec.get("env", {}).get(jobprocs.MARKER_VAR)
    jobspawn.TRACK.update(jobprocs.start_tracking(spec["job_id"], spec["attempt"]))
    if marker:
        jobspawn.TRACK["marker"] = marker
    diskspace.write_atomic(os.path.join(attempt_dir, "pid"),
                  json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "tag": spec["tag"], **jobspawn.TRACK}))
    return True


def _foreground(spec: dict) -> int:
    """Run the attempt in this process (a batch script started it); exit with its status."""
    attempt_dir = spec["attempt_dir"]
    try:
        os.setpgid(0, 0)  # lead a group: the batch script signals the whole job at once
    except OSError:
        pass
    if not _claim(spec):
        print("this attempt already ran; not starting it twice", file=sys.stderr)
        return 3
    _adopt_orphans()
    run(spec)
    try:
        with open(os.path.join(attempt_dir, "exit.json")) as f:
            code = json.load(f).get("code")
    except (OSError, ValueError):
        code = 1
    if code is None:
        return 1
    return code if 0 <= code < 256 else 128 + (-code if code < 0 else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
