"""Start one attempt of a job, detached, and record how it ended.

    python launch.py [--secrets-stdin] [--foreground] ATTEMPT_DIR/spec.json
    python launch.py --kill [--force] ATTEMPT_DIR

Runs with the target's Python and the standard library only, locally or on a remote host.
It detaches (double fork, new session) so the job survives the supervisor and the terminal;
claims the attempt with an O_EXCL marker so no attempt ever starts twice; installs the
project's dependencies into a venv cached by their hash (a marker written last means a
broken install is never reused); runs the job in its own process group with SIGUSR1 ignored
unless the job's `gpu` module asks for it; writes everything into the job log through one
filter (`JobLog` and its `Masker`: secret values masked in any form, terminal codes removed,
masked again as displayed), its own lines, pip's output and the job's alike; samples the
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
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import select
import signal
import subprocess
import sys
import threading
import time

if __package__:  # imported as core.runtime.launch (the engine, tests)
    from . import boundary, diskspace, gpuutil, jobprocs, redact, textsafe, uvenv, workdir
else:  # run as a script on the target, beside its sibling files
    import boundary
    import diskspace
    import gpuutil
    import jobprocs
    import redact
    import textsafe
    import uvenv
    import workdir

MASK = redact.MASK.decode()
IDLE_FLUSH_S = 0.5  # a partial line (a prompt, a progress dot) shows after this long a pause
LINE_CAP = 1 << 16  # a line longer than this is written in pieces
_PLAIN = bytes([0x09, 0x0A, 0x0D, *range(0x20, 0x7F)])  # printable ASCII, tab, newline, CR
_WRAPPED_LINE = re.compile(rb"[A-Za-z0-9+/_-]{%d,}" % redact.WRAPPED_MIN_LINE)  # MIME, PEM
RESERVE_BYTES = 256 * 1024  # room kept in the attempt folder for exit.json on a full disk
LEFTOVER_GRACE_S = 2.0  # after the job's main process ends, before what it left is stopped


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def secret_variants(value: str) -> list[str]:
    """The fixed spellings of a secret that are masked (raw, base64, hex, escapes), longest
    first; URL-encoded spellings are matched by a pattern on top of these."""
    return sorted((f.decode("utf-8", "replace") for f in redact.fixed_forms(value)),
                  key=len, reverse=True) if len(value) >= redact.MIN_SECRET_LEN else []


def terminal_safe(data: bytes) -> bytes:
    """`textsafe.printable` applied to every line that holds anything but printable ASCII, tab,
    newline and carriage return; the other lines, which it would return unchanged, are copied
    as they are (most of a log: this is what keeps the filter fast). Carriage returns stay
    (`keep_returns`): job.log keeps every step of a progress bar, and its readers show the
    last (core/display/logtail.py's `fold_returns`)."""
    if not data.translate(None, _PLAIN):
        return data
    out: list[bytes] = []
    run: list[bytes] = []  # consecutive lines that need the filter: one call for all of them
    for line in data.splitlines(keepends=True):
        if line.translate(None, _PLAIN):
            run.append(line)
            continue
        if run:
            out.append(textsafe.printable(b"".join(run), keep_returns=True).encode("utf-8", "replace"))
            run = []
        out.append(line)
    if run:
        out.append(textsafe.printable(b"".join(run), keep_returns=True).encode("utf-8", "replace"))
    return b"".join(out)


def _char_start(data: bytes, at: int) -> int:
    """`at`, moved back to the start of a UTF-8 character so a cut never splits one."""
    if at >= len(data):
        return len(data)
    at = max(0, at)
    for back in range(4):
        if at - back <= 0 or not 0x80 <= data[at - back] < 0xC0:
            return max(0, at - back)
    return at


class Masker:
    """The job log's one filter: mask(printable(mask(raw))).

    Secret values are masked in the bytes as written; the text is then reduced to what a
    terminal may show (`textsafe.printable`); and masked again as displayed, because control
    bytes or a bidi override inside a value vanish in that step and would join it again.
    Output is filtered by whole lines, so an escape sequence or a value split over two reads
    is seen whole; a line longer than LINE_CAP, or one left unfinished while the job pauses,
    goes out in pieces that each hold back enough of their end (raw and displayed) for a
    value cut in two to be found when the rest arrives."""

    def __init__(self, values: list[str]) -> None:
        self.secrets = redact.SecretPattern(values)
        self.keep = max(self.secrets.longest - 1, 0)
        self.cap = max(LINE_CAP, 4 * self.keep)
        self.line = b""  # raw bytes of the unfinished line
        self.shown = b""  # filtered text held back from the end of a piece of a line

    def feed(self, data: bytes) -> bytes:
        buf = self.line + data
        cut = self._line_end(buf, len(self.line))
        cut = self._before_continued(buf, cut)
        if cut:
            self.line = buf[cut:]
            return self._emit(buf[:cut], whole=True)
        self.line = buf
        return self._piece() if len(buf) > self.cap else b""

    def idle(self) -> bytes:
        """The job paused mid-line: show what can be shown of that line."""
        return self._piece() if self.line else b""

    def flush(self) -> bytes:
        head, self.line = self.line, b""
        return self._emit(head, whole=True)

    def text(self, text: str) -> str:
        """One finished message (an error for exit.json), through the same filter."""
        return self._clean(text.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")

    @staticmethod
    def _line_end(buf: bytes, seen: int) -> int:
        """Just past the last newline in `buf`, or 0. Only a newline ends a line: a reader shows
        a line's text after its last CR (or, filtering without folding, the CR as a space), so
        the text on both sides of a CR is masked as one line: what is shown is part of it."""
        return buf.rfind(b"\n", max(0, seen - 1)) + 1

    def _before_continued(self, buf: bytes, cut: int) -> int:
        """`cut`, moved back before the last lines when they may go on in the next read: a line
        that ends in a quoted-printable soft break (`=`), or a full line of base64 (what MIME
        and PEM writers wrap at 64 or 76 characters). A value split over those lines is then
        masked with both of its halves at hand; no more than `keep` bytes are held."""
        end = cut
        while cut:
            start = buf.rfind(b"\n", 0, cut - 1) + 1
            line = buf[start:cut].rstrip(b"\r\n")
            if end - start > self.keep or not (line.endswith(b"=") or _WRAPPED_LINE.fullmatch(line)):
                return cut
            cut = start
        return cut

    def _piece(self) -> bytes:
        """The unfinished line up to where a value could still be cut off; keep the rest."""
        buf = self.secrets.mask(self.line)
        cut = _char_start(buf, len(buf) - self.keep)
        self.line = buf[cut:]
        return self._emit(buf[:cut], whole=False)

    def _clean(self, data: bytes) -> bytes:
        masked = self.secrets.mask(data)
        shown = terminal_safe(masked)
        return shown if shown == masked else self.secrets.mask(shown)

    def _emit(self, head: bytes, whole: bool) -> bytes:
        text = self._clean(head)
        if self.shown:
            text = self.secrets.mask(self.shown + text)
            self.shown = b""
        if whole or not self.keep:
            return text
        cut = _char_start(text, len(text) - self.keep)
        self.shown = text[cut:]
        return text[:cut]


class JobLog:
    """The job log, opened for appending: every byte the launcher writes there (setup lines,
    pip's output, the job's output, gpu-router's own lines) goes through `write`. One lock
    serialises them: the GPU sampler's thread (gpuutil) writes a line while the job's output
    is pumped, and the filter's state (a line held back) is one."""

    def __init__(self, path: str, masker: Masker) -> None:
        self.fd = _open_log(path)
        self.masker = masker
        self.mid_line = False  # the last byte written was not a newline
        self.lock = threading.RLock()

    def write(self, data: bytes) -> None:
        with self.lock:
            self._put(self.masker.feed(data))

    def line(self, text: str) -> None:
        """One of gpu-router's own lines, on a line of its own. One that cannot be written (a
        full disk) must not stop the launcher from recording how the attempt ended."""
        with self.lock:
            pending = self.mid_line or self.masker.line or self.masker.shown
            start = "\n" if pending else ""
            try:
                self.write(f"{start}[gpu-router] {text}\n".encode("utf-8", "surrogateescape"))
            except OSError:
                pass

    def idle(self) -> None:
        with self.lock:
            self._put(self.masker.idle())

    def close(self) -> None:
        with self.lock:
            try:
                self._put(self.masker.flush())
            except OSError:
                pass
            os.close(self.fd)

    def _put(self, data: bytes) -> None:
        if data:
            self.mid_line = not data.endswith(b"\n")
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


TAIL_KEPT = 64 * 1024  # bytes of an install step's output kept to say why it failed


def _pump(pipe: int, log: JobLog, tail: bytearray | None = None) -> None:
    """Copy a child's output into the log until every writer has closed it (its last
    TAIL_KEPT bytes into `tail` too, where given: what an installer said last). Progress bars
    that move the cursor (tqdm's nested bars) are folded as a terminal leaves them first
    (textsafe.CursorFold): their escapes are dropped by the filter, and each step would
    otherwise be a line of its own."""
    fold = textsafe.CursorFold()
    while True:
        ready, _, _ = select.select([pipe], [], [], IDLE_FLUSH_S)
        if not ready:
            log.write(fold.idle())
            log.idle()
            continue
        block = os.read(pipe, 65536)
        if not block:
            log.write(fold.flush())
            return
        log.write(fold.feed(block))
        if tail is not None:
            tail += block
            del tail[:-TAIL_KEPT]


def _run_logged(command: list[str], log: JobLog, box: dict | None = None, *,
                sandbox: dict | None = None, tail: bytearray | None = None, **popen: object) -> int:
    """Run a command with its output (stdout and stderr) going through the job log's filter,
    inside the attempt's cgroup, and inside the sandbox where one is given (the job itself, and
    the install of its dependencies: pip runs the project's build code). With `box` (the job
    itself), what it leaves running when its main process ends is stopped after a grace, so the
    end of its output arrives."""
    preexec = _in_job_cgroup
    env_fd = None
    if sandbox is not None:
        command = boundary.wrap(_SANDBOX, sandbox, command)
        if _SANDBOX.get("landlock"):
            preexec = _in_job_cgroup_scoped
        if _SANDBOX.get("kind") != "seatbelt":
            # bubblewrap runs outside the sandbox it makes: the job's variables (LD_PRELOAD,
            # PATH...) are handed to it through a file descriptor, set only inside, and it starts
            # with a fixed environment of its own (never in its argv either: `ps` shows that)
            env_fd = boundary.env_args_fd(popen.pop("env", None) or dict(os.environ))
            command = [command[0], "--args", str(env_fd), *command[1:]]
            outside = dict(boundary.OUTSIDE_ENV)
            if _TRACK.get("marker"):  # still found as the job's, where no cgroup holds it
                outside[jobprocs.MARKER_VAR] = _TRACK["marker"]
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
        _pump(child.stdout.fileno(), log, tail)
    finally:
        child.stdout.close()
    return child.wait()


_HELD: list = []  # environment locks held (shared) for the life of this process


def _phase(spec: dict, text: str) -> None:
    """Where the attempt stands, for the target's poll ("installing: fetching 12 packages"
    shows as the job's reason while it provisions); a phase that cannot be written changes
    nothing."""
    try:
        _write_atomic(os.path.join(spec["attempt_dir"], "phase"), text)
    except OSError:
        pass


def _ensure_venv(spec: dict, log: JobLog) -> str:
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
                _write_atomic(ready, json.dumps({"created": time.time()}))
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


def _creating_line(deps: dict, log: JobLog, name: str, tool: str) -> None:
    constraints = deps.get("constraints") or []
    log.line(f"dependencies: creating environment {name[:12]} with {tool} "
             f"({len(deps['requirements'])} requirements"
             + (f", {len(constraints)} constraints" if constraints else "") + ")")
    for note in deps.get("notes") or []:
        log.line(f"dependencies: {note}")


def _pip_install(spec: dict, log: JobLog, deps: dict, venv: str, python: str) -> None:
    """Build `venv` with pip (the caller holds its lock exclusively)."""
    base = spec["base_python"]
    _creating_line(deps, log, deps["hash"], "pip")
    started = time.time()
    status = _run_logged([base, "-m", "venv", "--system-site-packages", venv], log)
    if status != 0:
        raise RuntimeError(f"creating the environment failed with status {status}")
    # -I: neither the working folder (a project's own `pip/`) nor a PYTHON* variable is on pip's
    # import path; the environment is shared by every project with the same dependencies
    cmd = [python, "-I", "-m", "pip", "install", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", *_requirement_files(deps, venv)]
    if deps.get("wheelhouse"):  # a target without internet: only the wheels shipped beside the job
        cmd += ["--no-index", "--find-links", deps["wheelhouse"]]
    sandbox = _sandbox_plan(spec, python, writable=[venv])
    scratch = _scratch(spec)
    tail = bytearray()
    try:
        env = _install_env(spec, python, sandbox, scratch)  # pip runs the project's build code
        status = _run_logged(cmd, log, cwd=spec["workdir"], env=env, sandbox=sandbox, tail=tail)
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


def _uv_venv(spec: dict, log: JobLog, deps: dict, uv: str) -> str:
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
        _write_atomic(cache + ".ready", str(time.time()))  # its last use, for `gpu gc`
    return python


def _uv_build(spec: dict, log: JobLog, deps: dict, uv: str, cache: str, started: float) -> str:
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
            _phase(spec, f"installing: fetching {len(frozen)} packages")
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
    _write_atomic(pointer, key)
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


def _uv_boxed(spec: dict, log: JobLog, uv: str, cache: str, cmd: list[str], scratch: str,
              tail: bytearray | None = None) -> int:
    """A uv command that reaches the network: inside the job's sandbox where it has one, with
    uv's cache the one more writable folder (and uv's own folder readable). That cache is
    shared, so nothing of the job's choosing runs here: no build (--no-build), none of the
    job's variables (its LD_PRELOAD would load its library into uv), no program on its PATH."""
    base = spec["base_python"]
    sandbox = _sandbox_plan(spec, base, writable=[cache], readable=[os.path.dirname(os.path.realpath(uv))])
    env = uvenv.environ(_install_env(spec, base, sandbox, scratch), dict(os.environ))
    for name in [n for n in env if n.startswith("GIT_")]:  # uv runs git for a URL it cannot skip
        del env[name]
    return _run_logged(cmd, log, cwd=spec["workdir"], env=env, sandbox=sandbox, tail=tail)


_NAMED = re.compile(r"\$\{([A-Z0-9_]+)\}")  # pip's ${NAME} in a requirements file


def _install_env(spec: dict, python: str, sandbox: dict | None, scratch: str) -> dict[str, str]:
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
    if _TRACK.get("marker"):
        env[jobprocs.MARKER_VAR] = _TRACK["marker"]
    env["PATH"] = os.pathsep.join([os.path.dirname(python), os.environ.get("PATH") or boundary.OUTSIDE_ENV["PATH"]])
    return env


def _uv_resolve(spec: dict, log: JobLog, deps: dict, uv: str, cache: str, scratch: str) -> list[str]:
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


def _uv_fill(spec: dict, log: JobLog, uv: str, cache: str, scratch: str, options: list[str],
             frozen: list[str], torch_backend: str | None = None) -> None:
    """Step 2: that set into the cache, through a scratch environment of symlinks (boxed: it
    downloads and builds)."""
    env_dir = os.path.join(scratch, "env")
    status = _run_logged(uvenv.venv_cmd(uv, spec["base_python"], env_dir, cache), log)
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


def _uv_sizes(spec: dict, log: JobLog, uv: str, cache: str, scratch: str, options: list[str],
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
        _phase(self.spec, f"installing: fetching {self.count} packages, {uvenv.progress_text(done, self.total)}")

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


def _uv_link(spec: dict, log: JobLog, uv: str, cache: str, venv: str, options: list[str],
             frozen: list[str]) -> None:
    """Step 3: the exact set, from the cache only (no network, no build: no project code runs,
    so no sandbox is needed, and the hard links into the cache work) into `venv`."""
    base = spec["base_python"]
    status = _run_logged(uvenv.venv_cmd(uv, base, venv, cache), log)
    if status != 0:
        raise _UvFailed(f"uv venv failed with status {status}")
    req = os.path.join(venv, "requirements.txt")
    with open(req, "w") as f:
        f.write("\n".join([*options, *frozen]) + "\n")
    env = uvenv.environ(boundary.job_environ(dict(os.environ), {}), dict(os.environ))
    tail = bytearray()
    # quiet: the fetch step listed every package already
    status = _run_logged(uvenv.install_cmd(uv, os.path.join(venv, "bin", "python"), cache, ["-r", req],
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


def _job_env(spec: dict, python: str, sandbox: dict | None = None) -> dict[str, str]:
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
    if _TRACK.get("marker"):
        env[jobprocs.MARKER_VAR] = _TRACK["marker"]
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


_TRACK: dict = {}  # this attempt's tracking record (marker, cgroup), set by _claim
_SANDBOX: dict = {}  # boundary.probe()'s verdict, where the spec asks for a sandbox


def _in_job_cgroup() -> None:
    """Each process the launcher starts joins the attempt's cgroup before it runs (preexec)."""
    jobprocs.cgroup_join(_TRACK.get("cgroup"))


def _in_job_cgroup_scoped() -> None:
    """The cgroup, then the Landlock scopes (no abstract sockets or signals outside), in the
    child that becomes bubblewrap."""
    jobprocs.cgroup_join(_TRACK.get("cgroup"))
    boundary.restrict_self()


def _decide_sandbox(spec: dict, log: JobLog) -> None:
    """Whether this attempt runs sandboxed: the spec asks for one (the local target does);
    where none can be made, a person's (or an approved) job runs with one warning line, and
    any other job does not run at all."""
    want = spec.get("sandbox")
    if not want:
        return
    found = boundary.probe()
    if found["ok"]:
        _SANDBOX.update(found)
        if found["features"].get("landlock_scopes") and not boundary.setuid_binary(found["tool"]):
            _SANDBOX["landlock"] = True
        net = "with network" if want.get("network", True) else "without network"
        log.line(f"sandbox: {found['kind']} ({net}; only the job's folders writable; no keychain, "
                 f"no gpu-router home)")
        return
    if want.get("fallback") == "warn":
        log.line(f"WARNING: running without a sandbox: {found['why']}")
        return
    raise RuntimeError(f"no sandbox could be made ({found['why']}), and this job may only run in "
                       "one: a person approves it to run unsandboxed, or installs bubblewrap")


def _sandbox_plan(spec: dict, python: str, writable: list[str] = (),
                  readable: list[str] = ()) -> dict | None:
    if not _SANDBOX:
        return None
    plan = boundary.plan_for(spec, python)
    plan["rw"] = plan["rw"] + list(writable)
    plan["ro"] = plan["ro"] + list(readable)
    return plan


def _open_log(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:  # a full disk: the job still runs to an exit status, unlogged
        return os.open(os.devnull, os.O_WRONLY)


def run(spec: dict) -> int:
    attempt_dir = spec["attempt_dir"]
    phase_file = os.path.join(attempt_dir, "phase")
    exit_file = os.path.join(attempt_dir, "exit.json")
    masker = Masker([os.environ.get(n, "") for n in spec.get("secret_env", [])])
    log = JobLog(spec["log"], masker)
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
    if _TRACK.get("marker"):
        os.environ[jobprocs.MARKER_VAR] = _TRACK["marker"]  # pip and the job
        log.line(jobprocs.describe(_TRACK))
    try:
        _write_atomic(phase_file, "installing")
        _decide_sandbox(spec, log)
        _link_checkpoint(spec, log)
        python = _ensure_venv(spec, log)
        if ended["signal"]:
            raise RuntimeError("cancelled before the job started")
        sandbox = _sandbox_plan(spec, python)
        env = _job_env(spec, python, sandbox)
        command = [python if part == "{python}" else part for part in spec["command"]]
        before = workdir.snapshot(spec["workdir"])  # to tell, at the end, what the job wrote
        _write_atomic(phase_file, "running")
        log.line(f"attempt {spec['attempt']}: running "
                 f"{' '.join(command[1:] if command[0] == python else command)}")
        sampler = _start_sampler(spec, env, log)
        code = _run_logged(command, log, box, cwd=spec["workdir"], env=env, sandbox=sandbox)
    except DepsFailed as exc:  # the job never started: its reason is the installer's, one line
        error = masker.text(uvenv.FAILED + str(exc))
        code = 1  # not 127 ("command not found"): that is not what happened
    except Exception as exc:  # noqa: BLE001 - any failure here must reach exit.json
        error = masker.text(str(exc))
        enospc = diskspace.is_enospc(exc)
        code = code if code is not None else _end_child(box.get("child"))
    if sampler is not None:
        sampler.stop()
    left = _stop_leftovers(box)
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
    _write_atomic(exit_file, json.dumps(result))
    log.line(f"attempt {spec['attempt']}: exited with status {code}")
    stayed = workdir.stayed_text(produced or {}, spec.get("short_id"))
    if stayed:
        log.line(stayed)  # the log's last line: work that did not come home is never silent
    log.close()
    if _TRACK.get("cgroup"):
        jobprocs.cgroup_remove(_TRACK["cgroup"])
    return 0


def _link_checkpoint(spec: dict, log: JobLog) -> None:
    """The request's `checkpoint` folder becomes a link to the job's ckpt/ (workdir.py): what
    the script saves there is mirrored home, frozen into generations and restored on a move."""
    rel = spec.get("checkpoint")
    if not rel:
        return
    note = workdir.link_checkpoint(spec["workdir"], os.path.dirname(spec["log"]), rel,
                                   spec["env"]["GPU_ROUTER_CHECKPOINT_DIR"])
    if note:
        log.line(note)


def _start_sampler(spec: dict, env: dict[str, str], log: JobLog) -> "gpuutil.Sampler | None":
    """GPU utilisation rows (gpu/util, gpu/mem_gb) while the job runs (core/runtime/gpuutil.py);
    the job never depends on it: a sampler that cannot start is one line in the log."""
    tool_env = {k: v for k, v in os.environ.items() if k != jobprocs.MARKER_VAR}  # not the job's
    try:
        return gpuutil.start(spec, env, log.line, tool_env)
    except Exception as exc:  # noqa: BLE001 - a thread that cannot start changes nothing else
        log.line(f"GPU utilisation: not sampled ({type(exc).__name__}: {exc})")
        return None


def _bring_declared(spec: dict, before: dict | None, log: JobLog) -> dict | None:
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


def _stop_leftovers(box: dict) -> int:
    """Nothing the job started outlives it: how many processes had to be stopped."""
    if box.get("output_done"):
        box["output_done"].set()
    if box.get("watch"):
        box["watch"].join()
    return box.get("left", 0) + (jobprocs.sweep(_TRACK) if _TRACK else 0)


def _stop_leftovers_when_main_exits(child: subprocess.Popen, box: dict) -> threading.Thread:
    """When the job's main process has ended, what it left running (a `setsid` child still
    holding its output pipe open, so the log never reaches its end) is stopped after a short
    grace; the launcher then sees the end of the output and records the exit."""
    done = box["output_done"] = threading.Event()

    def watch() -> None:
        child.wait()
        if not done.wait(LEFTOVER_GRACE_S) and _TRACK:
            box["left"] = jobprocs.sweep(_TRACK)

    thread = threading.Thread(target=watch, name="leftovers", daemon=True)
    thread.start()
    return thread


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
    _TRACK.update(jobprocs.start_tracking(spec["job_id"], spec["attempt"]))
    if marker:
        _TRACK["marker"] = marker
    _write_atomic(os.path.join(attempt_dir, "pid"),
                  json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "tag": spec["tag"], **_TRACK}))
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
