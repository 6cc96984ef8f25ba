"""Start one attempt of a job, detached, and record how it ended.

    python launch.py [--secrets-stdin] [--foreground] ATTEMPT_DIR/spec.json

Runs with the target's Python and the standard library only, locally or on a remote host.
It detaches (double fork, new session) so the job survives the supervisor and the terminal;
claims the attempt with an O_EXCL marker so no attempt ever starts twice; installs the
project's dependencies into a venv cached by their hash (a marker written last means a
broken install is never reused); runs the job in its own process group with SIGUSR1 ignored
unless the job's `gpu` module asks for it; copies the job's output into the log with secret
values masked; and writes exit.json atomically when the job ends.

`--secrets-stdin` reads the job's secret values as one JSON object on stdin before detaching,
so over SSH they travel inside the encrypted channel and never touch the remote disk or a
command line. `--foreground` (inside a Slurm or PBS batch script) does not fork: the scheduler
already detached the job and tracks this process; it leads its own process group so the batch
script can forward a checkpoint signal to the whole job, and exits with the job's status so
the scheduler's own record (COMPLETED, FAILED) agrees with exit.json.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse

MASK = "[secret]"


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def secret_variants(value: str) -> list[str]:
    """The forms a secret value can take in output: raw, base64 and URL-encoded."""
    if len(value) < 4:
        return []
    raw = value.encode()
    forms = {value, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
             urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
    forms |= {f.rstrip("=") for f in list(forms) if f.endswith("=") and len(f.rstrip("=")) >= 4}
    return sorted(forms, key=len, reverse=True)


class Masker:
    """Replaces secret values in a byte stream, also when one is split across two reads."""

    def __init__(self, values: list[str]) -> None:
        self.needles = [v.encode() for s in values for v in secret_variants(s)]
        self.keep = max((len(n) for n in self.needles), default=1) - 1
        self.tail = b""

    def feed(self, data: bytes) -> bytes:
        if not self.needles:
            return data
        buf = self.tail + data
        for needle in self.needles:
            buf = buf.replace(needle, MASK.encode())
        if self.keep and len(buf) > self.keep:
            out, self.tail = buf[:-self.keep], buf[-self.keep:]
        else:
            out, self.tail = b"", buf
        return out

    def flush(self) -> bytes:
        out, self.tail = self.tail, b""
        for needle in self.needles:
            out = out.replace(needle, MASK.encode())
        return out


def _append(fd: int, data: bytes, last: bytes) -> bytes:
    """Write `data`; the last byte written so far (a line ends with it or not)."""
    if data:
        os.write(fd, data)
        return data[-1:]
    return last


def _log(fd: int, text: str) -> None:
    os.write(fd, f"[gpu-router] {text}\n".encode())


def _ensure_venv(spec: dict, log_fd: int) -> str:
    """The job's Python: a cached venv with the project's dependencies, or the base Python."""
    deps = spec.get("deps")
    base = spec["base_python"]
    if not deps:
        return base
    venv = os.path.join(deps["venvs_dir"], deps["hash"])
    ready = os.path.join(venv, ".ready")
    python = os.path.join(venv, "bin", "python")
    os.makedirs(deps["venvs_dir"], exist_ok=True)
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install per dependency set at a time
        if os.path.exists(ready):
            _log(log_fd, f"dependencies: reusing environment {deps['hash'][:12]}")
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-built env from a crash
        _log(log_fd, f"dependencies: creating environment {deps['hash'][:12]} "
                     f"({len(deps['requirements'])} requirements)")
        started = time.time()
        subprocess.run([base, "-m", "venv", "--system-site-packages", venv], check=True,
                       stdout=log_fd, stderr=log_fd)
        req_file = os.path.join(venv, "requirements.txt")
        with open(req_file, "w") as f:
            f.write("\n".join(deps["requirements"]) + "\n")
        cmd = [python, "-m", "pip", "install", "--disable-pip-version-check",
               "--no-input", "--progress-bar", "off", "-r", req_file]
        result = subprocess.run(cmd, cwd=spec["workdir"], stdout=log_fd, stderr=log_fd)
        if result.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise RuntimeError(f"pip install failed with status {result.returncode} "
                               "(see the lines above)")
        _write_atomic(ready, json.dumps({"created": time.time()}))
        _log(log_fd, f"dependencies: installed in {time.time() - started:.1f}s")
        return python


def _fetch_hf_data(spec: dict, python: str, log_fd: int) -> None:
    for item in spec.get("hf_data", []):
        dest = os.path.join(spec["env"]["GPU_ROUTER_DATA_DIR"], item["name"])
        if os.path.exists(os.path.join(dest, ".complete")):
            continue
        _log(log_fd, f"data: downloading {item['uri']}")
        code = ("import sys; from huggingface_hub import snapshot_download; "
                "snapshot_download(repo_id=sys.argv[1], repo_type='dataset', local_dir=sys.argv[2])")
        result = subprocess.run([python, "-c", code, item["repo"], dest], stdout=log_fd,
                                stderr=log_fd)
        if result.returncode != 0:
            raise RuntimeError(f"could not download {item['uri']}: hf:// data needs "
                               "huggingface_hub in requirements.txt and network access")
        _write_atomic(os.path.join(dest, ".complete"), "")


def run(spec: dict) -> int:
    attempt_dir = spec["attempt_dir"]
    phase_file = os.path.join(attempt_dir, "phase")
    exit_file = os.path.join(attempt_dir, "exit.json")
    log_fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    masker = Masker([os.environ.get(n, "") for n in spec.get("secret_env", [])])
    ended = {"signal": None}

    def on_term(signum, frame):  # the group got it too; note it, let the job end, report
        ended["signal"] = signum

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # inherited: a job without `gpu` ignores it

    code: int | None = None
    error = None
    try:
        _write_atomic(phase_file, "installing")
        python = _ensure_venv(spec, log_fd)
        _fetch_hf_data(spec, python, log_fd)
        if ended["signal"]:
            raise RuntimeError("cancelled before the job started")
        env = dict(os.environ)
        for name in list(env):
            if name.startswith("GPU_ROUTER_") and name not in spec["env"]:
                del env[name]  # the supervisor's own settings are not the job's
        env.update(spec["env"])
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [spec["runtime_dir"], env.get("PYTHONPATH", "")] if p)
        env["PYTHONUNBUFFERED"] = "1"
        bindir = os.path.dirname(python)
        env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
        command = [python if part == "{python}" else part for part in spec["command"]]
        _write_atomic(phase_file, "running")
        _log(log_fd, f"attempt {spec['attempt']}: running {' '.join(command[1:] if command[0] == python else command)}")
        child = subprocess.Popen(command, cwd=spec["workdir"], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        pipe = child.stdout.fileno()
        last = b"\n"
        while True:
            try:
                block = os.read(pipe, 65536)
            except InterruptedError:
                continue
            if not block:
                break
            last = _append(log_fd, masker.feed(block), last)
        last = _append(log_fd, masker.flush(), last)
        if last != b"\n":  # gpu-router's own lines start a line of their own
            os.write(log_fd, b"\n")
        code = child.wait()
    except Exception as exc:  # noqa: BLE001 - any failure here must reach exit.json
        error = str(exc)
        _log(log_fd, f"error: {error}")
        code = code if code is not None else 127
    result = {"code": code, "signal": -code if code is not None and code < 0 else None,
              "terminated_by": ended["signal"], "error": error, "ended_at": time.time()}
    _write_atomic(exit_file, json.dumps(result))
    _log(log_fd, f"attempt {spec['attempt']}: exited with status {code}")
    os.close(log_fd)
    return 0


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
    unknown = flags - {"--secrets-stdin", "--foreground"}
    if unknown or len(rest) != 1:
        print("usage: launch.py [--secrets-stdin] [--foreground] SPEC", file=sys.stderr)
        return 2
    spec_path = rest[0]
    with open(spec_path) as f:
        spec = json.load(f)
    attempt_dir = spec["attempt_dir"]
    if "--secrets-stdin" in flags:
        _read_secrets()
    if "--foreground" in flags:
        return _foreground(spec)
    if os.fork() > 0:  # the caller's child returns at once; the grandchild runs the job
        return 0
    os.setsid()  # own session and process group: cancel kills the group, terminals don't
    try:  # claim the attempt: a second launcher for it stops here
        fd = os.open(os.path.join(attempt_dir, "started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        os._exit(0)
    os.write(fd, str(time.time()).encode())
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    _write_atomic(os.path.join(attempt_dir, "pid"),
                  json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "tag": spec["tag"]}))
    try:
        run(spec)
    finally:
        os._exit(0)


def _foreground(spec: dict) -> int:
    """Run the attempt in this process (a batch script started it); exit with its status."""
    attempt_dir = spec["attempt_dir"]
    try:
        os.setpgid(0, 0)  # lead a group: the batch script signals the whole job at once
    except OSError:
        pass
    try:
        fd = os.open(os.path.join(attempt_dir, "started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        print("this attempt already ran; not starting it twice", file=sys.stderr)
        return 3
    os.write(fd, str(time.time()).encode())
    os.close(fd)
    _write_atomic(os.path.join(attempt_dir, "pid"),
                  json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "tag": spec["tag"]}))
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
