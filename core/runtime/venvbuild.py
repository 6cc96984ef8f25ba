"""The job's Python: an environment with the project's dependencies, built once per set of
packages and shared by every job that needs the same, or the base Python where it has none.

Why a module of its own: installing is most of what can go wrong before a job runs, and it
has rules of its own: uv builds where it can (uvenv.py: one cache per host, environments named
by the packages they hold, in three steps), pip where it cannot; an environment is locked while
a job uses it (so `gpu gc` leaves it alone) and built by one launcher while the others wait; an
install step runs the project's build code, so it runs boxed (jobspawn.py) with an environment
of its own (`install_env`), never the job's; and a failure ends the attempt with the installer's
own reason (`DepsFailed`), before the job ever started.

Standard library only: this file runs with the target's Python, beside the launcher.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import threading
import time

if __package__:  # imported as core.runtime.venvbuild (the engine, tests)
    from . import boundary, diskspace, joblog, jobprocs, jobspawn, uvenv
else:  # run on the target, beside its sibling files
    import boundary
    import diskspace
    import joblog
    import jobprocs
    import jobspawn
    import uvenv

_HELD: list = []  # environment locks held (shared) for the life of this process


def _phase(spec: dict, text: str) -> None:
    """Where the attempt stands, for the target's poll ("installing: fetching 12 packages"
    shows as the job's reason while it provisions); a phase that cannot be written changes
    nothing."""
    try:
        diskspace.write_atomic(os.path.join(spec["attempt_dir"], "phase"), text)
    except OSError:
        pass


def ensure_venv(spec: dict, log: joblog.JobLog) -> str:
    """The job's Python: a cached environment with the project's dependencies, or the base
    Python. uv builds it where it can (core/runtime/uvenv.py: one cache per host, environments
    named by the packages they hold); pip where it cannot."""
    deps = spec.get("deps")
    base = spec["base_python"]
    if not deps:
        return base
    os.makedirs(deps["venvs_dir"], exist_ok=True)
    uv = uvenv.find_uv(deps.get("uv"))
    why = uvenv.unfit(deps) if uv else None
    if why:
        log.line(f"dependencies: installing with pip, not uv: {why}")
        uv = None
    if uv and deps.get("uv_cache"):
        plain = deps["hash"]
        backend = uvenv.torch_backend(deps, dict(os.environ))
        if backend:  # its own environments: a CPU build is never what a GPU job reuses
            deps["torch_backend"] = backend
            deps["hash"] = uvenv.with_backend(deps["hash"], backend)
        try:
            return _uv_venv(spec, log, deps, uv)
        except _UvFailed as exc:
            # the index has no such version: pip would say so too, at length; unless pip may
            # find it elsewhere: a wheelhouse leaves out what the target's Python has, and a pip
            # environment sees that Python's packages (uv resolves from the index alone)
            if not (exc.pip_may_help or deps.get("wheelhouse") or uvenv.has_installed(spec["base_python"], exc.reason)):
                raise DepsFailed(exc.reason) from None
            log.line(f"dependencies: uv could not install them ({exc}); trying pip")
            deps["hash"] = plain  # pip picks no torch build: its environment is the plain one
    venv = os.path.join(deps["venvs_dir"], deps["hash"])
    deps["venv"] = venv
    python = os.path.join(venv, "bin", "python")
    if _hold_env(venv, lambda: _pip_install(spec, log, deps, venv, python)):
        log.line(f"dependencies: reusing environment {deps['hash'][:12]}")
    return python


def _hold_env(venv: str, build) -> bool:
    """Hold `venv`'s lock shared for the life of this process (so `gpu gc`, which needs it
    exclusively, leaves the environment alone while the job runs), building it first under the
    exclusive lock when it is not ready. Several launchers may share a ready environment at
    once; only one builds a missing one, and the others wait for it and then share it. True
    when it was ready (its marker is touched: its mtime is the last use, for `gpu gc`)."""
    lock = open(venv + ".lock", "a")  # noqa: SIM115 - held while the job runs
    _HELD.append(lock)
    ready = os.path.join(venv, ".ready")
    while True:
        fcntl.flock(lock, fcntl.LOCK_SH)  # waits out a launcher that is building it
        if os.path.exists(ready):
            os.utime(ready)
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another launcher builds it, or looks at it as we do: ask again
            time.sleep(0.2)
            continue
        try:
            if not os.path.exists(ready):  # else built while this one waited
                shutil.rmtree(venv, ignore_errors=True)  # a half-built env from a crash
                build()
                diskspace.write_atomic(ready, json.dumps({"created": time.time()}))
                fcntl.flock(lock, fcntl.LOCK_SH)
                return False
            os.utime(ready)
            fcntl.flock(lock, fcntl.LOCK_SH)
            return True
        except BaseException:  # let go: a launcher waiting to build it must not wait for this job
            fcntl.flock(lock, fcntl.LOCK_UN)
            raise


def _share_ready(venv: str) -> bool:
    """Hold a ready environment's lock shared for the life of this process and say True; False
    (holding nothing) when it is not ready, e.g. `gpu gc` took it."""
    if not os.path.exists(os.path.join(venv, ".ready")):
        return False
    lock = open(venv + ".lock", "a")  # noqa: SIM115 - held while the job runs
    fcntl.flock(lock, fcntl.LOCK_SH)  # waits out a gc that is removing it
    if not os.path.exists(os.path.join(venv, ".ready")):
        lock.close()
        return False
    os.utime(os.path.join(venv, ".ready"))
    _HELD.append(lock)
    return True


def _creating_line(deps: dict, log: joblog.JobLog, name: str, tool: str) -> None:
    constraints = deps.get("constraints") or []
    log.line(f"dependencies: creating environment {name[:12]} with {tool} "
             f"({len(deps['requirements'])} requirements"
             + (f", {len(constraints)} constraints" if constraints else "") + ")")
    for note in deps.get("notes") or []:
        log.line(f"dependencies: {note}")


def _pip_install(spec: dict, log: joblog.JobLog, deps: dict, venv: str, python: str) -> None:
    """Build `venv` with pip (the caller holds its lock exclusively)."""
    base = spec["base_python"]
    _creating_line(deps, log, deps["hash"], "pip")
    started = time.time()
    status = jobspawn.run_logged([base, "-m", "venv", "--system-site-packages", venv], log)
    if status != 0:
        raise RuntimeError(f"creating the environment failed with status {status}")
    # -I: neither the working folder (a project's own `pip/`) nor a PYTHON* variable is on pip's
    # import path; the environment is shared by every project with the same dependencies
    cmd = [python, "-I", "-m", "pip", "install", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", *_requirement_files(deps, venv)]
    if deps.get("wheelhouse"):  # a target without internet: only the wheels shipped beside the job
        cmd += ["--no-index", "--find-links", deps["wheelhouse"]]
    sandbox = jobspawn.sandbox_plan(spec, python, writable=[venv])
    scratch = _scratch(spec)
    tail = bytearray()
    try:
        env = install_env(spec, python, sandbox, scratch)  # pip runs the project's build code
        status = jobspawn.run_logged(cmd, log, cwd=spec["workdir"], env=env, sandbox=sandbox, tail=tail)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if status != 0:
        shutil.rmtree(venv, ignore_errors=True)
        said = uvenv.pip_failure(tail.decode("utf-8", "replace"))
        raise DepsFailed(said or f"pip install failed with status {status} and printed no error")
    log.line(f"dependencies: installed in {time.time() - started:.1f}s")


class _UvFailed(Exception):
    """uv could not build the environment: `reason` in one line where its output said one;
    pip gets its turn where it `pip_may_help` (uvenv.uv_failure decides)."""

    def __init__(self, text: str, output: bytes | bytearray = b"") -> None:
        reason, self.pip_may_help = uvenv.uv_failure(bytes(output).decode("utf-8", "replace"))
        self.reason = reason or text
        super().__init__(reason or text)


class DepsFailed(RuntimeError):
    """The job's dependencies could not be installed: one line, the installer's reason. The
    attempt ends with it as its reason (uvenv.FAILED), before the job ever started."""


def _uv_venv(spec: dict, log: joblog.JobLog, deps: dict, uv: str) -> str:
    """The environment, built with uv (core/runtime/uvenv.py says how and why in three steps).
    A project whose requirements were seen before goes straight to its environment (the
    pointer venvs/HASH.to names it); else its packages are fetched, and the environment that
    holds exactly those is shared or made."""
    venvs, cache = deps["venvs_dir"], deps["uv_cache"]
    pointer = os.path.join(venvs, deps["hash"] + ".to")
    known = _read_pointer(pointer)
    if known and _share_ready(os.path.join(venvs, known)):
        deps["venv"] = os.path.join(venvs, known)
        log.line(f"dependencies: reusing environment {known[:12]} (uv)")
        return os.path.join(venvs, known, "bin", "python")
    os.makedirs(cache, exist_ok=True)
    constraints = deps.get("constraints") or []
    # the environment is named by what these resolve to: its name is said once it is known
    log.line(f"dependencies: resolving with uv ({len(deps['requirements'])} requirements"
             + (f", {len(constraints)} constraints" if constraints else "")
             + (f"; torch build: {deps['torch_backend']}" if deps.get("torch_backend") else "") + ")")
    for note in deps.get("notes") or []:
        log.line(f"dependencies: {note}")
    _phase(spec, "installing: resolving dependencies")
    started = time.time()
    with open(cache + ".lock", "a") as cache_lock:  # held while installing: `gpu gc` waits its turn
        fcntl.flock(cache_lock, fcntl.LOCK_SH)
        os.makedirs(cache, exist_ok=True)  # again: a gc may have taken it before the lock
        python = _uv_build(spec, log, deps, uv, cache, started)
        diskspace.write_atomic(cache + ".ready", str(time.time()))  # its last use, for `gpu gc`
    return python


def _uv_build(spec: dict, log: joblog.JobLog, deps: dict, uv: str, cache: str, started: float) -> str:
    venvs = deps["venvs_dir"]
    pointer = os.path.join(venvs, deps["hash"] + ".to")
    options = [*(deps.get("options") or [])]
    if deps.get("wheelhouse"):
        options += ["--no-index", f"--find-links {deps['wheelhouse']}"]
    scratch = _scratch(spec)
    try:
        frozen = _uv_resolve(spec, log, deps, uv, cache, scratch)
        key = uvenv.resolved_key(deps.get("python_key") or spec["base_python"],
                                 [*options, *([deps["local_key"]] if deps.get("local_key") else [])], frozen)
        venv = os.path.join(venvs, key)
        if _share_ready(venv):
            log.line(f"dependencies: sharing environment {key[:12]}: another project resolved to the "
                     f"same {len(frozen)} packages (ready in {time.time() - started:.1f}s)")
        else:
            log.line(f"dependencies: creating environment {key[:12]} with uv ({len(frozen)} packages; "
                     "named by the packages it holds, the name later jobs reuse)")
            _phase(spec, f"installing: fetching {uvenv.count_text(len(frozen), 'package')}")
            coming = [] if deps.get("wheelhouse") else _uv_sizes(spec, log, uv, cache, scratch, options, frozen,
                                                                  deps.get("torch_backend"))
            with _fetch_progress(spec, cache, len(frozen), coming):
                _uv_fill(spec, log, uv, cache, scratch, options, frozen, deps.get("torch_backend"))
            _phase(spec, f"installing: linking {len(frozen)} packages")
            if _hold_env(venv, lambda: _uv_link(spec, log, uv, cache, venv, options, frozen)):
                log.line(f"dependencies: sharing environment {key[:12]}: another project resolved to "
                         f"the same {len(frozen)} packages (ready in {time.time() - started:.1f}s)")
            else:
                log.line(f"dependencies: installed in {time.time() - started:.1f}s (uv, {len(frozen)} "
                         "packages, linked from the cache)")
    finally:  # the scratch goes while the job runs: thousands of links take a while to remove
        threading.Thread(target=shutil.rmtree, args=(scratch, True), daemon=True).start()
    diskspace.write_atomic(pointer, key)
    deps["venv"] = venv
    return os.path.join(venv, "bin", "python")


def _read_pointer(path: str) -> str | None:
    """The environment a project's requirements resolved to last time (venvs/HASH.to)."""
    try:
        with open(path) as f:
            key = f.read().strip()
    except OSError:
        return None
    return key if re.fullmatch(r"[0-9a-f]{32}", key) else None


def _scratch(spec: dict) -> str:
    """A folder of this attempt in the job's own tmp folder (writable in its sandbox)."""
    import tempfile

    tmp_root = os.path.join(os.path.dirname(spec["log"]), "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    return tempfile.mkdtemp(prefix="deps-", dir=tmp_root)


def _uv_boxed(spec: dict, log: joblog.JobLog, uv: str, cache: str, cmd: list[str], scratch: str,
              tail: bytearray | None = None) -> int:
    """A uv command that reaches the network: inside the job's sandbox where it has one, with
    uv's cache the one more writable folder (and uv's own folder readable). That cache is
    shared, so nothing of the job's choosing runs here: no build (--no-build), none of the
    job's variables (its LD_PRELOAD would load its library into uv), no program on its PATH."""
    base = spec["base_python"]
    sandbox = jobspawn.sandbox_plan(spec, base, writable=[cache], readable=[os.path.dirname(os.path.realpath(uv))])
    env = uvenv.environ(install_env(spec, base, sandbox, scratch), dict(os.environ))
    for name in [n for n in env if n.startswith("GIT_")]:  # uv runs git for a URL it cannot skip
        del env[name]
    return jobspawn.run_logged(cmd, log, cwd=spec["workdir"], env=env, sandbox=sandbox, tail=tail)


_NAMED = re.compile(r"\$\{([A-Z0-9_]+)\}")  # pip's ${NAME} in a requirements file


def install_env(spec: dict, python: str, sandbox: dict | None, scratch: str) -> dict[str, str]:
    """What an install step (pip's, uv's) starts with. Not the job's environment: the job's
    `env` may load code into whatever starts with it (LD_PRELOAD, PYTHONPATH, a PATH of its
    own), and these steps are gpu-router's, some with a cache shared by other projects
    writable. So: the machine's allowed variables (boundary.job_environ), the launcher's own
    `PIP_*` (the index to use), and of the job's only its secrets and the variables its
    requirement lines name as `${NAME}` (pip fills them in), never one that loads code
    (uvenv.loads_code); the launcher's PATH; a home, temporary folder and pip cache of the
    step's own in `scratch` (never the job's home, which its earlier attempts wrote)."""
    deps = spec.get("deps") or {}
    lines = [*(deps.get("options") or []), *(deps.get("requirements") or []), *(deps.get("constraints") or [])]
    named = set(_NAMED.findall("\n".join(lines)))
    declared = {k: str(v) for k, v in spec["env"].items() if k in named}
    for name in spec.get("secret_env", []):
        if name in os.environ:
            declared[name] = os.environ[name]  # approved to read: it arrived in memory
    # the machine's are the person's (a cluster's LD_LIBRARY_PATH for its Python stays)
    env = boundary.job_environ(dict(os.environ), {k: v for k, v in declared.items() if not uvenv.loads_code(k)})
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})  # the index to use
    home, tmp = os.path.join(scratch, "home"), os.path.join(scratch, "tmp")
    for d in (home, tmp):
        os.makedirs(d, exist_ok=True)
    if sandbox is not None:  # outside one (a host without bubblewrap) pip reads the host's own config
        env["HOME"] = home
    env["TMPDIR"] = tmp
    env["PIP_CACHE_DIR"] = os.path.join(scratch, "pip-cache")  # never a cache other projects read
    if jobspawn.TRACK.get("marker"):
        env[jobprocs.MARKER_VAR] = jobspawn.TRACK["marker"]
    env["PATH"] = os.pathsep.join([os.path.dirname(python), os.environ.get("PATH") or boundary.OUTSIDE_ENV["PATH"]])
    return env


def _uv_resolve(spec: dict, log: joblog.JobLog, deps: dict, uv: str, cache: str, scratch: str) -> list[str]:
    """Step 1: the exact set of packages the project's lines resolve to (`uv pip compile`; it
    may build an sdist for its metadata, so it runs boxed)."""
    args = _requirement_files(deps, scratch)
    if deps.get("wheelhouse"):  # a target without internet: only the wheels shipped beside the job
        args += ["--no-index", "--find-links", deps["wheelhouse"]]
    out = os.path.join(scratch, "resolved.txt")
    tail = bytearray()
    status = _uv_boxed(spec, log, uv, cache, uvenv.compile_cmd(
        uv, spec["base_python"], cache, args, out, torch_backend=deps.get("torch_backend")), scratch, tail)
    if status != 0 or not os.path.exists(out):
        raise _UvFailed(f"uv pip compile failed with status {status}", tail)
    with open(out) as f:
        return uvenv.frozen_lines(f.read())


def _uv_fill(spec: dict, log: joblog.JobLog, uv: str, cache: str, scratch: str, options: list[str],
             frozen: list[str], torch_backend: str | None = None) -> None:
    """Step 2: that set into the cache, through a scratch environment of symlinks (boxed: it
    downloads and builds)."""
    env_dir = os.path.join(scratch, "env")
    status = jobspawn.run_logged(uvenv.venv_cmd(uv, spec["base_python"], env_dir, cache), log)
    if status != 0:
        raise _UvFailed(f"uv venv failed with status {status}")
    pinned = os.path.join(scratch, "pinned.txt")
    with open(pinned, "w") as f:
        f.write("\n".join([*options, *frozen]) + "\n")
    tail = bytearray()
    status = _uv_boxed(spec, log, uv, cache, uvenv.install_cmd(
        uv, os.path.join(env_dir, "bin", "python"), cache, ["-r", pinned], link="symlink",
        torch_backend=torch_backend), scratch, tail)
    if status != 0:
        raise _UvFailed(f"uv pip install failed with status {status}", tail)


def _uv_sizes(spec: dict, log: joblog.JobLog, uv: str, cache: str, scratch: str, options: list[str],
              frozen: list[str], torch_backend: str | None) -> list[dict]:
    """The files the fetch step will download and their sizes, as the index lists them: the
    resolved set again, as a pylock.toml (`--no-deps`: every version is pinned, so this asks
    the index for nothing new), less what uv's cache holds. Boxed as every uv step that reaches
    the network; a failure here costs only the progress figure ([])."""
    pinned = os.path.join(scratch, "sized.txt")
    with open(pinned, "w") as f:
        f.write("\n".join([*options, *frozen]) + "\n")
    out = os.path.join(scratch, uvenv.LOCK_NAME)
    cmd = uvenv.compile_cmd(uv, spec["base_python"], cache, [pinned, "--no-deps", "--format", "pylock.toml"],
                            out, torch_backend=torch_backend)
    try:
        if _uv_boxed(spec, _Unlogged(), uv, cache, cmd, scratch) != 0:  # an older uv lacks --format
            return []
        with open(out) as f:
            files = uvenv.lock_files(f.read())
    except OSError:
        return []
    return [f for f in files if f.get("size") and not uvenv.in_cache(cache, f)]


class _Unlogged:
    """A log that keeps nothing: the size look is gpu-router's own, not the job's story, and
    an older uv's "unexpected argument '--format'" would only puzzle its reader."""

    def write(self, data: bytes) -> None:
        pass

    def idle(self) -> None:
        pass


class _fetch_progress:
    """While the fetch step runs, its phase says how much has come of what it downloads
    ("installing: fetching 12 packages, 412.0 MB of 1.2 GB"), once a second, as uv's cache
    shows it (uvenv.fetched_bytes says why the cache); nothing where no size is known."""

    def __init__(self, spec: dict, cache: str, count: int, coming: list[dict]) -> None:
        self.spec, self.cache, self.count, self.coming = spec, cache, count, coming
        self.total = sum(f["size"] for f in coming)
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _say(self) -> None:
        done = uvenv.fetched_bytes(self.cache, self.coming)
        _phase(self.spec, f"installing: fetching {uvenv.count_text(self.count, 'package')}, "
                           f"{uvenv.progress_text(done, self.total)}")

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self._say()
            except OSError:
                pass

    def __enter__(self) -> "_fetch_progress":
        if self.total:
            self._say()
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(5)


def _uv_link(spec: dict, log: joblog.JobLog, uv: str, cache: str, venv: str, options: list[str],
             frozen: list[str]) -> None:
    """Step 3: the exact set, from the cache only (no network, no build: no project code runs,
    so no sandbox is needed, and the hard links into the cache work) into `venv`."""
    base = spec["base_python"]
    status = jobspawn.run_logged(uvenv.venv_cmd(uv, base, venv, cache), log)
    if status != 0:
        raise _UvFailed(f"uv venv failed with status {status}")
    req = os.path.join(venv, "requirements.txt")
    with open(req, "w") as f:
        f.write("\n".join([*options, *frozen]) + "\n")
    env = uvenv.environ(boundary.job_environ(dict(os.environ), {}), dict(os.environ))
    tail = bytearray()
    # quiet: the fetch step listed every package already
    status = jobspawn.run_logged(uvenv.install_cmd(uv, os.path.join(venv, "bin", "python"), cache, ["-r", req],
                                           offline=True, quiet=True), log, cwd=spec["workdir"], env=env,
                         tail=tail)
    if status != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise _UvFailed(f"linking from the cache failed with status {status}", tail)


def _requirement_files(deps: dict, venv: str) -> list[str]:
    """Write the flattened lines (core.packaging.requirements) into the venv and return pip's
    arguments for them. The index options go first in requirements.txt, not on the command
    line, so pip fills `${NAME}` in them from the job's environment as it would in the
    project's own file; nothing refers to another file, so the venv's location is no matter."""
    req_file = os.path.join(venv, "requirements.txt")
    with open(req_file, "w") as f:
        f.write("\n".join([*(deps.get("options") or []), *deps["requirements"]]) + "\n")
    args = ["-r", req_file]
    if deps.get("constraints"):
        con_file = os.path.join(venv, "constraints.txt")
        with open(con_file, "w") as f:
            f.write("\n".join(deps["constraints"]) + "\n")
        args += ["-c", con_file]
    return args

