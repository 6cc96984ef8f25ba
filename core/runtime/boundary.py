"""The boundary between a job and the person: what a job's processes get to see.

A job runs code the person may never have read (often an agent's). Every approval rule rests on
the job not being able to act as the person, so this module is the one place that decides what
a job starts with:

- `job_environ`: on every target, the job's environment is what it declared plus a short
  allow-list of the machine's own variables (PATH, locale, GPU selection, the scheduler's
  variables, proxies). Nothing of the person's session passes: no D-Bus address (the keychain),
  no SSH agent socket, no XDG_RUNTIME_DIR, no display, no tokens an editor or shell exported.
- `bwrap_argv`: on the local target (Linux), the job runs inside bubblewrap: its own user, pid,
  ipc, uts and mount namespaces; the system read-only; its code, runtime and data read-only;
  its working folder, out/, ckpt/ and metrics file writable; a private home and /tmp; no /run
  (so no session bus and no XDG_RUNTIME_DIR), no gpu-router home or config; a new session (no
  controlling terminal of the person's); GPU device nodes passed through; no network when the
  job asks for none. The pid namespace makes cancel final: its first process going takes every
  descendant with it. A read-only file at SANDBOX_MARK says "inside a job" to anything that asks.
- `restrict_self`: where the kernel has Landlock scopes (Linux 6.12+), the sandbox may not
  connect to abstract unix sockets or signal processes made outside it. Abstract sockets belong
  to the network namespace, which a job with network shares with the person: a session bus
  listening on one would otherwise be reachable by name.
- `seatbelt_profile`: the macOS twin, a `sandbox-exec` profile with the same intent.

Standard library only: the launcher imports this on the machine that runs the job.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

if __package__:
    from . import rootonly
    from .jobprocs import SANDBOX_MARK
else:  # run beside its sibling files on the target
    import rootonly
    from jobprocs import SANDBOX_MARK

# -- the environment --------------------------------------------------------------------------

# Variables of the machine a job may inherit: how to find programs and libraries, the locale,
# which GPUs are its own, what its scheduler tells it, how to reach the network. Everything
# else of the person's environment stays out (a job declares what it needs in `env`).
PASS_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "SHELL", "HOME", "TMPDIR",
    "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    "ALL_PROXY", "all_proxy", "GPU_DEVICE_ORDINAL", "PYTHONHASHSEED",
})
PASS_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "ROCR_", "HIP_", "HSA_", "SLURM_", "PBS_",
                 "OMP_", "MKL_", "OPENBLAS_")
# Never passed, whatever a prefix above says: the person's session and agent sockets.
NEVER = frozenset({"DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "SSH_AUTH_SOCK",
                   "SSH_AGENT_PID", "XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY",
                   "GNOME_KEYRING_CONTROL", "KRB5CCNAME", "GPG_AGENT_INFO"})


def passes(name: str) -> bool:
    """May the machine's variable `name` reach a job (without the job declaring it)?"""
    if name in NEVER:
        return False
    return name in PASS_NAMES or name.startswith(PASS_PREFIXES)


def job_environ(machine: dict[str, str], declared: dict[str, str]) -> dict[str, str]:
    """The environment a job starts with: the machine's allowed variables, then the job's own.
    The job's own may name anything (it chose it; secrets it was approved to read arrive so)."""
    env = {k: v for k, v in machine.items() if passes(k)}
    env.update(declared)
    return env


# -- bubblewrap (Linux) ----------------------------------------------------------------------

# Read-only from the system: programs, libraries, configuration. Not /run (the session bus,
# XDG_RUNTIME_DIR, the SSH agent), not /home or /root, not /tmp, not /var, not /mnt or /media.
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
             "/nix")
# Under the sandbox's empty /run, only name resolution shows (/etc/resolv.conf may link there),
# and the NVIDIA persistence daemon's socket (CUDA starts faster where it runs).
RUN_RO = ("/run/systemd/resolve", "/run/nvidia-persistenced")  # names; the NVIDIA daemon's socket
# GPU device nodes: NVIDIA (CUDA), AMD (ROCm: kfd and dri), Intel and others (dri).
GPU_DEVICE_GLOBS = ("/dev/nvidia", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps",
                    "/dev/dri", "/dev/kfd")
BWRAP_ENV = "GPU_ROUTER_BWRAP"  # the supervisor's choice of bwrap binary (tests, odd installs)


OUTSIDE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # what bubblewrap itself runs with


def env_args_fd(env: dict[str, str], name: str = "gpu-router-env") -> int:
    """bubblewrap's `--args` file: clear its environment inside, then set `env`, NUL-separated
    (names and values never hold a NUL: they came from an environment). bubblewrap runs outside
    the sandbox it makes, so what is meant for inside (LD_PRELOAD, PATH, an index password)
    reaches it only so: never its own environment, never its argv (`ps` shows that)."""
    parts = [b"--clearenv"]
    for key, value in env.items():
        parts += [b"--setenv", os.fsencode(key), os.fsencode(value)]
    fd = os.memfd_create(name, os.MFD_CLOEXEC)  # pass_fds opens it to bwrap only
    os.write(fd, b"\0".join(parts) + b"\0")
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bwrap_path(environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get(BWRAP_ENV) or shutil.which("bwrap")


def gpu_devices(dev: str = "/dev") -> list[str]:
    """The GPU device nodes present on this machine (to pass into the sandbox)."""
    found = []
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return found
    prefixes = tuple(os.path.basename(g) for g in GPU_DEVICE_GLOBS)
    for name in names:
        if name.startswith(prefixes):
            found.append(os.path.join(dev, name))
    return found


def bwrap_argv(bwrap: str, plan: dict, command: list[str], features: dict | None = None) -> list[str]:
    """bubblewrap's command line for `command` under `plan`:

    plan = {"ro": [paths], "ro_at": [(source, place)], "rw": [paths], "hide": [paths], "cover": [paths],
            "home": path, "tmpdir": path,
            "workdir": path, "mark": file, "network": bool, "devices": [paths]}

    Each path is bound at its own place, so every path the job was told about holds inside.
    Order matters to bubblewrap: the system first, then what is hidden (an empty tmpfs over the
    gpu-router home, the config, the person's home, wherever they lie), then the job's own
    folders, parents before children, so the job's folders show through what was hidden."""
    features = features or {}
    args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "gpu-router-job"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root's job is nobody in its namespace:
        args += ["--uid", str(rootonly.UNPRIVILEGED_ID), "--gid", str(rootonly.UNPRIVILEGED_ID)]  # and see rootonly
    if features.get("disable_userns"):
        args.append("--disable-userns")  # no nested namespace to undo the mounts in
    if not plan.get("network", True):
        args.append("--unshare-net")
    for path in SYSTEM_RO:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind-try", "/sys", "/sys",
             "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]
    for path in RUN_RO:
        args += ["--ro-bind-try", path, path]
    for dev in plan.get("devices", []):
        args += ["--dev-bind-try", dev, dev]
    for path in _outermost(plan.get("hide", [])):
        if _under_any(path, SYSTEM_RO) and os.path.isdir(path):
            args += ["--tmpfs", path]
    binds = ([(p, p, "--ro-bind") for p in plan.get("ro", [])]
             + [(src, dest, "--ro-bind") for src, dest in plan.get("ro_at", [])]
             + [(p, p, "--bind") for p in plan.get("rw", [])])
    for src, dest, how in sorted(binds, key=lambda b: (_depth(b[1]), b[2] == "--bind")):
        if os.path.lexists(src):
            args += [how, src, dest]
    for path in plan.get("cover", []):  # withheld in a bound folder: an empty folder, or no content
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path.rstrip("/"), "--remount-ro", path.rstrip("/")]
        elif os.path.lexists(path) and not os.path.islink(path):  # a link leads nowhere inside
            args += ["--ro-bind", "/dev/null", path]
    if plan.get("mark"):
        args += ["--ro-bind", plan["mark"], SANDBOX_MARK]
    args += ["--chdir", plan["workdir"], "--"]
    return args + list(command)


def _depth(path: str) -> int:
    return os.path.normpath(path).count("/")


def _under_any(path: str, tops: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == t or real.startswith(t.rstrip("/") + "/") for t in tops)


def _outermost(paths: list[str]) -> list[str]:
    """Each path once, none inside another of the list."""
    norm = sorted({os.path.normpath(p) for p in paths if p})
    out: list[str] = []
    for p in norm:
        if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in out):
            out.append(p)
    return out


_PROBED: dict[str, dict] = {}


def probe(bwrap: str | None = None) -> dict:
    """Can a sandbox be made here? {"ok": bool, "why": text, "kind": "bubblewrap" | "seatbelt",
    "tool": path, "features": {...}}.

    Tried for real once per process (a few milliseconds): bubblewrap may be installed while user
    namespaces are off (a kernel setting, a container's seccomp), which only a start shows; on
    macOS the profile itself is tried, so a profile the system rejects means no sandbox (and the
    rules that follow from that), never a job that cannot start."""
    if sys.platform == "darwin":
        return _probe_seatbelt()
    if sys.platform != "linux":
        return {"ok": False, "why": f"no sandbox is built for {sys.platform}", "kind": None,
                "tool": None, "features": {}}
    bwrap = bwrap or bwrap_path()
    if not bwrap:
        return {"ok": False, "why": "bubblewrap is not installed (Debian/Ubuntu: `sudo apt-get "
                                    "install bubblewrap`; Fedora: `sudo dnf install bubblewrap`)",
                "kind": "bubblewrap", "tool": None, "features": {}}
    if bwrap in _PROBED:
        return _PROBED[bwrap]
    features = {"disable_userns": False, "landlock_scopes": landlock_abi() >= 6}
    base = {"kind": "bubblewrap", "tool": bwrap, "features": features}
    try:
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
        features["disable_userns"] = "--disable-userns" in helptext
        # the very flags a job gets (bwrap_argv), so a flag this kernel or bwrap refuses means
        # "no sandbox" here, never an attempt that cannot start
        trial = subprocess.run(
            bwrap_argv(bwrap, {"workdir": "/", "network": True}, ["/bin/sh", "-c", "exit 0"], features),
            capture_output=True, text=True, timeout=20,
            preexec_fn=restrict_self if features["landlock_scopes"] and not setuid_binary(bwrap) else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        result = {**base, "ok": False, "why": f"bubblewrap could not start ({exc})"}
    else:
        if trial.returncode == 0:
            result = {**base, "ok": True, "why": ""}
        else:
            said = " ".join(trial.stderr.split())[:200] or f"status {trial.returncode}"
            result = {**base, "ok": False,
                      "why": f"bubblewrap cannot make a sandbox here ({said}); user namespaces "
                             "may be off (`sysctl kernel.unprivileged_userns_clone=1`, or "
                             "`kernel.apparmor_restrict_unprivileged_userns=0` on Ubuntu 24.04)"}
    _PROBED[bwrap] = result
    return result


SANDBOX_EXEC = "/usr/bin/sandbox-exec"


def _probe_seatbelt() -> dict:
    if "seatbelt" in _PROBED:
        return _PROBED["seatbelt"]
    base = {"kind": "seatbelt", "tool": SANDBOX_EXEC, "features": {}}
    if not os.path.exists(SANDBOX_EXEC):
        result = {**base, "ok": False, "why": "sandbox-exec is not on this Mac"}
    else:
        home = os.path.expanduser("~")
        profile = seatbelt_profile({"ro": [], "rw": [], "hide": [home], "network": False})
        try:
            trial = subprocess.run([SANDBOX_EXEC, "-p", profile, "/usr/bin/true"],
                                   capture_output=True, text=True, timeout=20)
            ok, said = trial.returncode == 0, " ".join(trial.stderr.split())[:200]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, said = False, str(exc)
        result = {**base, "ok": ok, "why": "" if ok else f"sandbox-exec refused the profile ({said})"}
    _PROBED["seatbelt"] = result
    return result


def wrap(found: dict, plan: dict, command: list[str]) -> list[str]:
    """`command` inside the sandbox `probe` found: bubblewrap, or sandbox-exec on macOS."""
    if found.get("kind") == "seatbelt":
        return [found["tool"], "-p", seatbelt_profile(plan), *command]
    return bwrap_argv(found["tool"], plan, command, found.get("features"))


def forget_probe() -> None:
    _PROBED.clear()


# -- Landlock scopes (Linux 6.12+) -------------------------------------------------------------

_SYS_CREATE, _SYS_RESTRICT = 444, 446  # the same numbers on every architecture
_CREATE_VERSION = 1
_SCOPE_ABSTRACT_UNIX = 1
_SCOPE_SIGNAL = 2
_PR_SET_NO_NEW_PRIVS = 38


# ctypes is imported here, not at the top: only a launcher about to exec bubblewrap and the
# one-off probe call the kernel, while every `gpu submit` imports this module (about 3 ms).


def _ruleset_attr(fs: int, net: int, scoped: int):
    """struct landlock_ruleset_attr, built when a launcher needs it."""
    import ctypes

    class _RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    return _RulesetAttr(fs, net, scoped)


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    if sys.platform != "linux":
        return 0
    import ctypes

    try:
        abi = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def restrict_self() -> bool:
    """Scope this process and all it starts: no connecting to abstract unix sockets made
    outside, no signals to processes outside. Called in the child just before it execs
    bubblewrap. False where the kernel cannot (then the tmpfs over /tmp and /run, and no D-Bus
    address, are what keep the session bus out)."""
    if landlock_abi() < 6:
        return False
    import ctypes

    libc = _libc()
    attr = _ruleset_attr(0, 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    fd = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if fd < 0:
        return False
    try:
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        return libc.syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


def setuid_binary(path: str) -> bool:
    """A setuid bubblewrap (old distributions) must not run under no_new_privs."""
    try:
        return bool(os.stat(path).st_mode & stat.S_ISUID)
    except OSError:
        return False


# -- macOS ------------------------------------------------------------------------------------


def _sb_quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(plan: dict) -> str:
    """A `sandbox-exec -p PROFILE` profile with the sandbox's intent on macOS: reads allowed
    except the hidden places (the person's home, gpu-router's home and config), writes only to
    the job's writable folders and the temporary folders, no Mach lookups of the keychain
    (securityd) or the SSH agent, network only when the job asks for it.

    Written and checked for its text only: no Mac was at hand to run it (docs/security/sandbox.md)."""
    lines = ["(version 1)", "(allow default)",
             ";; the keychain and the person's session services",
             '(deny mach-lookup (global-name "com.apple.SecurityServer")'
             ' (global-name "com.apple.securityd") (global-name "com.apple.secd")'
             ' (global-name "com.apple.security.agent")'
             ' (global-name-regex #"^com\\.openssh\\.")'
             ' (global-name-regex #"^com\\.apple\\.security\\."))']
    ro = plan.get("ro", []) + [p for pair in plan.get("ro_at", []) for p in pair]
    rw = plan.get("rw", [])
    for path in _outermost(plan.get("hide", [])):
        lines.append(f"(deny file-read* file-write* (subpath {_sb_quote(path)}))")
    lines.append("(deny file-write*)")
    for path in ro:  # the job's own read-only folders show through what is hidden
        lines.append(f"(allow file-read* (subpath {_sb_quote(path)}))")
    for path in rw + ["/private/tmp", "/private/var/folders", "/dev/null"]:
        lines.append(f"(allow file-read* file-write* (subpath {_sb_quote(path)}))")
    for path in plan.get("cover", []):  # withheld in a readable folder (the later rule wins)
        lines.append(f"(deny file-read* file-write* (subpath {_sb_quote(path.rstrip('/'))}))")
    if not plan.get("network", True):
        lines.append("(deny network*)")
        lines.append('(allow network* (local ip "localhost:*") (remote ip "localhost:*"))')
    lines.append("(deny process-info* (target others))")
    return "\n".join(lines) + "\n"


# -- the plan of one attempt's sandbox ---------------------------------------------------------


def python_roots(*pythons: str) -> list[str]:
    """The installation folders a job's Python needs to start: each interpreter's prefix (its
    real path: a venv's `bin/python` links to the base one) and this interpreter's own prefixes
    and user site-packages (a person's `pip install --user` packages)."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    for python in pythons:
        if python:
            real = os.path.realpath(python)
            roots.add(os.path.dirname(os.path.dirname(real)))  # PREFIX/bin/python3.X
    try:
        import site

        user_site = site.getusersitepackages()
        if user_site and os.path.isdir(user_site):
            roots.add(os.path.realpath(user_site))
    except (AttributeError, ImportError):
        pass
    return sorted(r for r in roots if r and r != "/")


def plan_for(spec: dict, python: str) -> dict:
    """The sandbox of one attempt (bwrap_argv's plan), from the attempt spec the local target
    wrote (spec["sandbox"]: what to hide, the data sources, network) and this machine.

    Read-only: the job's code, its runtime, its data (and where local data lives), its control
    folder, its Python and venv. Writable: its working folder, out/, ckpt/, ckpt-gens/ (the
    saves gpu.checkpoint_saved() freezes: another mount than ckpt/, so they are copies), metrics file, a home
    and a temporary folder of its own (in the job's folder, on disk: models write big files)."""
    box = spec["sandbox"]
    env = spec["env"]
    job_dir = os.path.dirname(spec["log"])
    home = os.path.join(job_dir, "home")
    tmpdir = os.path.join(job_dir, "tmp")
    for d in (home, tmpdir):
        os.makedirs(d, exist_ok=True)
    metrics = env.get("GPU_ROUTER_METRICS_FILE")
    if metrics and not os.path.exists(metrics):
        open(metrics, "a").close()  # a file is bound only where it exists
    code_root = os.path.join(job_dir, "code")
    ro = [code_root, spec["runtime_dir"], env.get("GPU_ROUTER_DATA_DIR", ""),
          env.get("GPU_ROUTER_CONTROL_DIR", ""), *python_roots(python, spec.get("base_python", ""))]
    # local data is read in place through data/NAME links to the path as given: bound there,
    # from wherever it really lies (the path may pass through links of its own)
    ro_at = [(os.path.realpath(d), os.path.abspath(d)) for d in box.get("data", [])]
    # what the bundle's judge withholds from a set (credentials, links) is covered there
    withheld = box.get("withheld") or {}
    cover = [os.path.join(os.path.abspath(d), rel) for d in box.get("data", []) for rel in withheld.get(d, [])]
    # started by root: what only root may read in the bound system folders is covered too (the
    # package-managed part of that walk is cached in gpu-router's cache folder, <home>/cache)
    cover += rootonly.paths(os.path.join(os.path.dirname(os.path.dirname(job_dir)), "cache", "root-only.json"))
    deps = spec.get("deps")
    if deps:
        ro.append(deps.get("venv") or os.path.join(deps["venvs_dir"], deps["hash"]))  # uv: by its packages
        if deps.get("wheelhouse"):  # a host without an index: this project's wheels, read-only
            ro.append(deps["wheelhouse"])
    gens = env.get("GPU_ROUTER_CHECKPOINT_GENERATIONS", "")  # checkpoint_saved() freezes saves there
    if gens:
        os.makedirs(gens, exist_ok=True)  # a folder is bound only where it exists
    rw = [spec["workdir"], env.get("GPU_ROUTER_OUTPUT_DIR", ""),
          env.get("GPU_ROUTER_CHECKPOINT_DIR", ""), gens, metrics or "", home, tmpdir]
    mark = os.path.join(spec["attempt_dir"], "sandbox-mark")
    with open(mark, "w") as f:
        f.write(f"{spec['job_id']}:{spec['attempt']}\n")
    return {"ro": [p for p in ro if p], "ro_at": ro_at, "rw": [p for p in rw if p], "hide": box.get("hide", []),
            "cover": cover,
            "home": home, "tmpdir": tmpdir, "workdir": spec["workdir"], "mark": mark,
            "network": box.get("network", True), "devices": gpu_devices()}
