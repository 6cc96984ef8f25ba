"""The one place where gpu-router runs a project's build code on this machine: pip's steps of a
wheelhouse (core/packaging/wheelhouse.py), for every target that installs from one (ssh, Slurm
and PBS hosts with `offline`, Kaggle).

Building a wheel from a source distribution, a version-control URL, a local path or a
`--find-links` folder runs the package's build backend: arbitrary code the project chose (an
agent may have written it, or an index may serve it). pip runs it in its own environment, so
without a boundary it would run as the person: their keychain through the session bus, their
SSH agent, gpu-router's home and config, their pip cache. Here every such step runs in the
same sandbox a local job's install runs in (core/runtime/boundary.py: bubblewrap):

- the system and the Python that runs pip read-only; the step's inputs read-only; only the
  step's own output folder writable;
- a fresh private home and temporary folder per step (no pip cache or config of the person's,
  nothing one step leaves for the next);
- no /run (the session bus, the keychain, XDG_RUNTIME_DIR), no /home or /root, no gpu-router
  home or config, no SSH agent; a new session, its own pid namespace;
- an environment gpu-router writes: the system's PATH, the locale, proxies and certificates,
  and pip's own index settings (`PIP_*`) of the supervisor's environment; nothing a job declared;
- the network only when the step needs an index (not with `--no-index` and local folders only).

Where this machine cannot make that sandbox (macOS, bubblewrap missing, user namespaces off), a
step that could run build code is refused with what to do; a step that cannot (only wheels from
an index, by exact name: `--only-binary=:all:` and no URL, path or version-control line) runs
outside it with the same written environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core import paths
from core.errors import UserError
from core.runtime import boundary


# the machine's variables a build step may see besides pip's: how to find programs and reach
# the network (proxies, certificates), the locale; never a loader or interpreter variable
_MACHINE_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
                  "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "http_proxy", "https_proxy", "no_proxy",
                  "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy")


class NoBuildSandbox(UserError):
    """A step would run a project's build code, and this machine cannot make a sandbox for it."""


@dataclass(frozen=True)
class Step:
    """One command that may run a project's build code.

    `what` names it in errors ("building evilpkg==1.0 from source"); `builds` says whether it
    may run build code at all (False only for wheels-only steps, which then may run where no
    sandbox can be made); `readable` and `writable` are the folders it needs beyond the system
    and the Python; `network` whether it reaches an index."""

    command: list[str]
    what: str
    builds: bool = True
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    network: bool = True
    cwd: Path | None = None
    timeout: float = 1800.0


def sandbox() -> dict | None:
    """This machine's bubblewrap, tried for real (boundary.probe), or None where there is none.
    macOS's sandbox-exec profile is not used for builds: it was never run on a Mac."""
    found = boundary.probe()
    return found if found.get("ok") and found.get("kind") == "bubblewrap" else None


def unavailable_reason() -> str:
    found = boundary.probe()
    if found.get("ok"):
        return f"builds run only in bubblewrap, and this machine has {found.get('kind')}"
    return found.get("why") or "no sandbox can be made here"


def environ(home: Path, tmp: Path, python: str, outer: dict[str, str] | None = None) -> dict[str, str]:
    """What a build step starts with: a fresh home and temporary folder, the Python's own folder
    first on PATH, the machine's network settings and pip's index settings; never LD_*, PYTHON*,
    DYLD_*, a session bus, an agent socket or anything a job declared."""
    outer = dict(os.environ if outer is None else outer)
    env = {k: outer[k] for k in _MACHINE_NAMES if k in outer}
    env.update({k: v for k, v in outer.items() if k.startswith("PIP_")})
    env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH") or boundary.OUTSIDE_ENV["PATH"]])
    env.update({"HOME": str(home), "TMPDIR": str(tmp), "LC_ALL": env.get("LC_ALL", "C.UTF-8"),
                "PYTHONNOUSERSITE": "1", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def hidden() -> list[str]:
    """What a build step never sees, wherever it lies: gpu-router's home and config, the
    person's home, the session's runtime folder (the same list as a local job's)."""
    hide = [str(paths.home()), str(paths.user_config_file().parent), os.path.expanduser("~")]
    if os.environ.get("XDG_RUNTIME_DIR"):
        hide.append(os.environ["XDG_RUNTIME_DIR"])
    return hide


def run(step: Step, python: str = sys.executable) -> subprocess.CompletedProcess:
    """Run `step` inside the sandbox (or, for a wheels-only step where none can be made,
    outside it with the same written environment). Raises NoBuildSandbox for a step that could
    run build code where no sandbox can be made. `python` is the interpreter in `command`."""
    found = sandbox()
    if found is None and step.builds:
        raise NoBuildSandbox(
            f"{step.what} runs the package's own build code, which gpu-router runs only inside a "
            f"sandbox, and this machine cannot make one: {unavailable_reason()}",
            fix="install bubblewrap on this machine (Debian/Ubuntu: `sudo apt-get install bubblewrap`; "
                "Fedora: `sudo dnf install bubblewrap`), or pin versions that publish wheels for the "
                "target (no source builds, URLs or local paths in the requirements), or run on a "
                "target that reaches a package index (`offline: false`; Kaggle: `internet: true`)")
    # the step's own home and temporary folder: fresh, where pip's temporary files would go
    # anyway, never inside gpu-router's home
    scratch = Path(tempfile.mkdtemp(prefix="gr-build-"))
    try:
        home, tmp = scratch / "home", scratch / "tmp"
        home.mkdir()
        tmp.mkdir()
        env = environ(home, tmp, python)
        cwd = step.cwd or tmp
        if found is None:  # wheels only, no build code: pip reads the person's own configuration
            env["HOME"] = os.environ.get("HOME", str(home))
            return subprocess.run(step.command, capture_output=True, text=True, timeout=step.timeout,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        return _boxed(found, step, python, env, scratch, cwd)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _boxed(found: dict, step: Step, python: str, env: dict[str, str], scratch: Path,
           cwd: Path) -> subprocess.CompletedProcess:
    mark = scratch / "mark"
    mark.write_text("wheelhouse build\n")
    plan = {"ro": [*boundary.python_roots(python), *(str(p) for p in step.readable), *_pip_config_file(),
                   *_pip_find_links()],
            "ro_at": pip_configs(scratch / "home"),
            "rw": [str(scratch / "home"), str(scratch / "tmp"), *(str(p) for p in step.writable)],
            "hide": hidden(), "workdir": str(cwd), "mark": str(mark), "network": step.network,
            "home": str(scratch / "home"), "tmpdir": str(scratch / "tmp")}
    argv = boundary.wrap(found, plan, step.command)
    # the variables go in through a file descriptor, set only inside; bubblewrap itself starts
    # with a fixed environment, and `ps` never shows a value (an index password)
    fd = boundary.env_args_fd(env, "gpu-router-build-env")
    argv = [argv[0], "--args", str(fd), *argv[1:]]
    scoped = found.get("features", {}).get("landlock_scopes") and not boundary.setuid_binary(found["tool"])
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=step.timeout,
                              stdin=subprocess.DEVNULL, env=dict(boundary.OUTSIDE_ENV), pass_fds=(fd,),
                              preexec_fn=boundary.restrict_self if scoped else None)
    finally:
        os.close(fd)


def pip_configs(home: Path, person: Path | None = None) -> list[tuple[str, str]]:
    """The person's own pip configuration files (the index to use), each bound read-only where
    pip looks for it under the step's private home: pip reads it as it would outside; nothing
    else of that home shows."""
    person = Path(os.path.expanduser("~")) if person is None else person
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or person / ".config")
    found = []
    for src, dest in ((xdg / "pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"),
                      (person / ".pip" / "pip.conf", home / ".pip" / "pip.conf")):
        if src.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.touch()  # the place a file is bound over
            found.append((str(src.resolve()), str(dest)))
    return found


def _pip_config_file() -> list[str]:
    """PIP_CONFIG_FILE, where it names a file (read-only at its place)."""
    named = os.environ.get("PIP_CONFIG_FILE", "")
    return [named] if named and os.path.isfile(named) and named != os.devnull else []


def _pip_find_links() -> list[str]:
    """The local folders PIP_FIND_LINKS of the supervisor's environment names (a person's own
    wheel folder), read-only at their place, so pip finds them inside as outside."""
    found = []
    for link in os.environ.get("PIP_FIND_LINKS", "").split():
        path = link[len("file://"):] if link.lower().startswith("file://") else link
        if "://" not in path and os.path.isabs(path) and os.path.isdir(path):
            found.append(path)
    return found


