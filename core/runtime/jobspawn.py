"""How the launcher starts each process of an attempt (the install steps and the job itself),
and the sandbox the spec asks for.

Why a module of its own: every process an attempt starts must be started one way, whichever
step starts it: in the attempt's cgroup and with its marker (jobprocs.py: nothing it starts
outlives it), inside the sandbox where the spec asks for one (boundary.py: `decide_sandbox`
says whether one can be made and what happens where none can, `sandbox_plan` what it shows),
with only the environment it may see (`job_env`), and with its output through the job log's
filter (joblog.py). What a job's main process leaves running when it ends is stopped here too.

Standard library only: this file runs with the target's Python, beside the launcher.
"""

from __future__ import annotations

import os
import subprocess
import threading

if __package__:  # imported as core.runtime.jobspawn (the engine, tests)
    from . import boundary, joblog, jobprocs
else:  # run on the target, beside its sibling files
    import boundary
    import joblog
    import jobprocs

LEFTOVER_GRACE_S = 2.0  # after the job's main process ends, before what it left is stopped
TRACK: dict = {}  # this attempt's tracking record (marker, cgroup), set by launch.py's _claim
SANDBOX: dict = {}  # boundary.probe()'s verdict, where the spec asks for a sandbox (decide_sandbox)


def run_logged(command: list[str], log: joblog.JobLog, box: dict | None = None, *,
               sandbox: dict | None = None, tail: bytearray | None = None, **popen: object) -> int:
    """Run a command with its output (stdout and stderr) going through the job log's filter,
    inside the attempt's cgroup, and inside the sandbox where one is given (the job itself, and
    the install of its dependencies: pip runs the project's build code). With `box` (the job
    itself), what it leaves running when its main process ends is stopped after a grace, so the
    end of its output arrives."""
    preexec = _in_job_cgroup
    env_fd = None
    if sandbox is not None:
        command = boundary.wrap(SANDBOX, sandbox, command)
        if SANDBOX.get("landlock"):
            preexec = _in_job_cgroup_scoped
        if SANDBOX.get("kind") != "seatbelt":
            # bubblewrap runs outside the sandbox it makes: the job's variables (LD_PRELOAD,
            # PATH...) are handed to it through a file descriptor, set only inside, and it starts
            # with a fixed environment of its own (never in its argv either: `ps` shows that)
            env_fd = boundary.env_args_fd(popen.pop("env", None) or dict(os.environ))
            command = [command[0], "--args", str(env_fd), *command[1:]]
            outside = dict(boundary.OUTSIDE_ENV)
            if TRACK.get("marker"):  # still found as the job's, where no cgroup holds it
                outside[jobprocs.MARKER_VAR] = TRACK["marker"]
            popen.update(env=outside, pass_fds=(env_fd,))
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, preexec_fn=preexec, **popen)
    finally:
        if env_fd is not None:
            os.close(env_fd)
    if box is not None:
        box["child"] = child
        box["watch"] = _stop_leftovers_when_main_exits(child, box)
    try:
        joblog.pump(child.stdout.fileno(), log, tail)
    finally:
        child.stdout.close()
    return child.wait()


def job_env(spec: dict, python: str, sandbox: dict | None = None) -> dict[str, str]:
    """What the job starts with: its declared variables and secrets, the machine's few
    allowed ones (boundary.job_environ), never the supervisor's or the person's session."""
    declared = dict(spec["env"])
    for name in spec.get("secret_env", []):
        if name in os.environ:
            declared[name] = os.environ[name]  # approved to read: it arrived in memory
    env = boundary.job_environ(dict(os.environ), declared)
    if sandbox is not None:
        env["HOME"] = sandbox["home"]
        env["TMPDIR"] = sandbox["tmpdir"]
    if TRACK.get("marker"):
        env[jobprocs.MARKER_VAR] = TRACK["marker"]
    env["GPU_ROUTER_SECRET_ENV"] = ",".join(spec.get("secret_env", []))  # names: gpu.log checks
    # the runtime (gpu, openscience_track) and the job's sitecustomize, which puts the wandb
    # stand-in at the end of sys.path and follows the real wandb (core/runtime/jobsite)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [spec["runtime_dir"], os.path.join(spec["runtime_dir"], "jobsite"),
                    env.get("PYTHONPATH", "")] if p)
    env.update(_wandb_env(spec))
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
    return env


def _wandb_env(spec: dict) -> dict[str, str]:
    """wandb offline (a job has no W&B account; gpu-router receives what it logs), quiet, with
    its files in the outputs, so the offline run comes home (`wandb sync` uploads it later).
    What the job's own env sets wins; the supervisor's environment does not."""
    own = spec.get("env", {})
    wanted = {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
              "WANDB_DIR": own.get("GPU_ROUTER_OUTPUT_DIR", "")}
    return {k: v for k, v in wanted.items() if v and k not in own}


def _in_job_cgroup() -> None:
    """Each process the launcher starts joins the attempt's cgroup before it runs (preexec)."""
    jobprocs.cgroup_join(TRACK.get("cgroup"))


def _in_job_cgroup_scoped() -> None:
    """The cgroup, then the Landlock scopes (no abstract sockets or signals outside), in the
    child that becomes bubblewrap."""
    jobprocs.cgroup_join(TRACK.get("cgroup"))
    boundary.restrict_self()


def decide_sandbox(spec: dict, log: joblog.JobLog) -> None:
    """Whether this attempt runs sandboxed: the spec asks for one (the local target does);
    where none can be made, a person's (or an approved) job runs with one warning line, and
    any other job does not run at all."""
    want = spec.get("sandbox")
    if not want:
        return
    found = boundary.probe()
    if found["ok"]:
        SANDBOX.update(found)
        if found["features"].get("landlock_scopes") and not boundary.setuid_binary(found["tool"]):
            SANDBOX["landlock"] = True
        net = "with network" if want.get("network", True) else "without network"
        log.line(f"sandbox: {found['kind']} ({net}; only the job's folders writable; no keychain, "
                 f"no gpu-router home)")
        return
    if want.get("fallback") == "warn":
        log.line(f"WARNING: running without a sandbox: {found['why']}")
        return
    raise RuntimeError(f"no sandbox could be made ({found['why']}), and this job may only run in "
                       "one: a person approves it to run unsandboxed, or installs bubblewrap")


def sandbox_plan(spec: dict, python: str, writable: list[str] = (),
                 readable: list[str] = ()) -> dict | None:
    """What the sandbox shows one process (boundary.plan_for), with `writable` and `readable`
    folders added (an install step's environment or cache); None where the attempt runs
    without a sandbox."""
    if not SANDBOX:
        return None
    plan = boundary.plan_for(spec, python)
    plan["rw"] = plan["rw"] + list(writable)
    plan["ro"] = plan["ro"] + list(readable)
    return plan


def stop_leftovers(box: dict) -> int:
    """Nothing the job started outlives it: how many processes had to be stopped."""
    if box.get("output_done"):
        box["output_done"].set()
    if box.get("watch"):
        box["watch"].join()
    return box.get("left", 0) + (jobprocs.sweep(TRACK) if TRACK else 0)


def _stop_leftovers_when_main_exits(child: subprocess.Popen, box: dict) -> threading.Thread:
    """When the job's main process has ended, what it left running (a `setsid` child still
    holding its output pipe open, so the log never reaches its end) is stopped after a short
    grace; the launcher then sees the end of the output and records the exit."""
    done = box["output_done"] = threading.Event()

    def watch() -> None:
        child.wait()
        if not done.wait(LEFTOVER_GRACE_S) and TRACK:
            box["left"] = jobprocs.sweep(TRACK)

    thread = threading.Thread(target=watch, name="leftovers", daemon=True)
    thread.start()
    return thread
