"""Installing a job's dependencies with uv: which uv, whether it can take these lines, its
commands, and the name of an environment by the packages it holds.

Standard library only (it runs beside the launcher on every target). Why uv: pip builds every
environment from nothing (CPU torch: about 27 s and 800 MB each time, per project); uv keeps one
cache per host (ROOT/uv-cache, beside ROOT/venvs) and links the cached files into each
environment (hard links on Linux, clones on macOS), so an environment from cached packages takes
about a second and almost no new disk.

How an environment is built with uv (core/runtime/launch.py drives it):

1. resolve: `uv pip compile` gives the exact set of packages (inside the job's sandbox where it
   has one: it reaches the index; wheels only, every uv step runs with --no-build); the environment is
   named by that set (`resolved_key`), not by how the project wrote its requirements, so two
   projects that resolve to the same packages share one environment, found right here.
2. fetch: a missing environment's set is installed into a scratch environment in the job's own
   tmp folder (symlinks into the cache, so it costs nothing but the download), in the sandbox
   too: the step that downloads. The only new writable folder in the sandbox is the uv cache,
   and no build code runs there: a set that needs an sdist built (or the project itself) is
   pip's, in the job's own environment, so no project can change the files the cache lends
   to other projects' environments.
3. link: `uv pip install --offline --no-build` of the set into ROOT/venvs/KEY, outside the
   sandbox: no network and no build, so no project code runs, and the hard links into the
   cache work (a link never crosses the sandbox's bind mounts, which would make it a copy).

pip stays where uv cannot be used: no uv on the host, `GPU_ROUTER_INSTALLER=pip` in the
launcher's environment (the supervisor's, or a target's `env`), requirement lines uv reads
differently (editable VCS URLs, pip-only options), a set that needs a build (uv refuses it:
--no-build), or uv failing where pip might not.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil

CHOICE_VAR = "GPU_ROUTER_INSTALLER"  # auto (default) | uv | pip
CACHE_DIR = "uv-cache"  # beside venvs/ under the root: one cache per host, never in a job folder
# option lines of a requirements file that uv reads as pip does; any other one keeps pip
UV_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--no-index", "--no-binary",
              "--only-binary")
# pip's environment variables for the index, as uv spells them (pip separates lists by spaces,
# uv's UV_FIND_LINKS by commas)
PIP_TO_UV = {"PIP_INDEX_URL": "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
             "PIP_FIND_LINKS": "UV_FIND_LINKS", "PIP_NO_INDEX": "UV_NO_INDEX",
             "PIP_TRUSTED_HOST": "UV_INSECURE_HOST"}
# uv settings that would move its cache, its Python or its link mode: gpu-router decides those
UV_KEPT_OUT = {"UV_CACHE_DIR", "UV_NO_CACHE", "UV_LINK_MODE", "UV_PYTHON", "UV_CONFIG_FILE",
               "UV_SYSTEM_PYTHON", "UV_BREAK_SYSTEM_PACKAGES", "UV_PYTHON_DOWNLOADS", "UV_OFFLINE",
               "UV_NO_BUILD", "UV_PROJECT_ENVIRONMENT"}
COMMON_FLAGS = ["--no-config", "--color", "never"]
# pip looks at every index for the best version; uv by default stops at the first that has the
# package. The same project must get the same packages whichever installer runs.
# --no-build everywhere: uv's cache is shared by every project on the host and its files are
# linked into their environments, so no project's build code (an sdist's setup.py, which an
# agent may have written) ever runs with that cache writable; a set that needs a build is
# installed by pip, into that job's own environment only
INSTALL_FLAGS = ["--index-strategy", "unsafe-best-match", "--no-progress", "--no-build"]


def find_uv(given: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The uv binary to install with, or None for pip: the one the spec names (the home side's
    `uv` package), else one on PATH, else the usual install places in the home folder."""
    env = os.environ if environ is None else environ
    choice = env.get(CHOICE_VAR, "auto").strip().lower() or "auto"
    if choice == "pip":
        return None
    home = env.get("HOME") or os.path.expanduser("~")
    candidates = [given, shutil.which("uv", path=env.get("PATH", "")),
                  os.path.join(home, ".local", "bin", "uv"), os.path.join(home, ".cargo", "bin", "uv")]
    for cand in candidates:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    if choice == "uv":
        raise RuntimeError(f"{CHOICE_VAR}=uv, but no uv was found (on PATH, ~/.local/bin, ~/.cargo/bin): "
                           "install it (`pip install uv`) or set the variable to auto")
    return None


VCS_URL = re.compile(r"\b(?:git|hg|svn|bzr)\+[a-z]+:", re.IGNORECASE)


def unfit(deps: dict) -> str | None:
    """Why these lines are for pip, not uv, or None when uv reads them as pip would."""
    for line in deps.get("options") or []:
        if not line.startswith(UV_OPTIONS):
            return f"the option {line.split()[0]} is pip's"
    for line in [*(deps.get("requirements") or []), *(deps.get("constraints") or [])]:
        if line.startswith("-e "):
            return f"an editable URL ({line[3:].split()[0]})"
        if VCS_URL.search(line):
            # uv runs git (with the job's home, config and variables) while the shared cache is
            # writable: a job could rewrite files other projects' environments link to
            return f"a version-control URL ({VCS_URL.search(line).group(0)}...)"
    return None


# Variables that load or choose code in whatever process starts with them: the dynamic loader's
# (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT; macOS's DYLD_*), glibc's (GCONV_PATH, LOCPATH,
# GLIBC_TUNABLES, MALLOC_*), interpreters' (PYTHON*, PERL5*, RUBY*, NODE_OPTIONS, BASH_ENV),
# the programs found (PATH) and the settings of the tools an install runs that could choose a
# program or a folder (UV_*, GIT_*, HOME and the XDG folders they read config from; pip's are
# the launcher's own, and a job's `${PIP_PASSWORD}` is a value pip fills in). A job's `env`
# sets them for the job's own process only; never for an install step, gpu-router's code.
CODE_PREFIXES = ("LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "NODE_", "GIT_", "UV_", "MALLOC_",
                 "XDG_", "CONDA", "VIRTUAL_ENV")
CODE_NAMES = frozenset({"PATH", "HOME", "TMPDIR", "BASH_ENV", "ENV", "GCONV_PATH", "LOCPATH", "NLSPATH",
                        "GLIBC_TUNABLES", "HOSTALIASES", "RES_OPTIONS", "SSL_CERT_FILE", "SSL_CERT_DIR",
                        "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC", "JAVA_TOOL_OPTIONS", "SHELL"})


def loads_code(name: str) -> bool:
    """Whether a variable set by a job would choose code (or its configuration) in an install
    step: such a variable is the job's own process's only (see CODE_PREFIXES)."""
    return name in CODE_NAMES or name.upper().startswith(CODE_PREFIXES)


def environ(base: dict[str, str], outer: dict[str, str]) -> dict[str, str]:
    """uv's environment: `base` (the job's rules) plus the index settings of the launcher's own
    environment, pip's spelled uv's way, with nothing that moves the cache or the Python."""
    env = dict(base)
    for name, value in outer.items():
        if name.startswith("UV_") and name not in UV_KEPT_OUT:
            env[name] = value
    for pip_name, uv_name in PIP_TO_UV.items():
        value = outer.get(pip_name)
        if value and uv_name not in env:
            env[uv_name] = ",".join(value.split()) if uv_name == "UV_FIND_LINKS" else value
    env["UV_PYTHON_DOWNLOADS"] = "never"  # the target's Python, never one uv would fetch
    env["UV_NO_PROGRESS"] = "1"
    return env


def venv_cmd(uv: str, python: str, venv: str, cache: str) -> list[str]:
    return [uv, "venv", *COMMON_FLAGS, "--quiet", "--cache-dir", cache, "--python", python,
            "--system-site-packages", venv]


def install_cmd(uv: str, python: str, cache: str, args: list[str], *, link: str | None = None,
                offline: bool = False) -> list[str]:
    cmd = [uv, "pip", "install", *COMMON_FLAGS, *INSTALL_FLAGS, "--cache-dir", cache, "--python", python]
    if link:
        cmd += ["--link-mode", link]
    if offline:  # from the cache only: no network (and, as every uv step, no build)
        cmd += ["--offline"]
    return cmd + args


def compile_cmd(uv: str, python: str, cache: str, args: list[str], out: str) -> list[str]:
    """The exact set `args` resolve to for `python`, one `name==version` (or `name @ URL`) a
    line, into `out`."""
    return [uv, "pip", "compile", *COMMON_FLAGS, *INSTALL_FLAGS, "--quiet", "--cache-dir", cache,
            "--python", python, "--no-header", "--no-annotate", "--output-file", out,
            *[a for a in args if a != "-r"]]  # compile takes its requirement files bare


def resolved_key(python: str, options: list[str], frozen: list[str]) -> str:
    """The environment's name: the target's Python (`python`: its path and version, hashed by
    the home side) and the exact packages (and where from), whatever the project wrote to get
    them."""
    h = hashlib.sha256()
    for part in ("uv", python, *options, "--", *sorted(frozen)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def frozen_lines(text: str) -> list[str]:
    """`uv pip compile` output as requirement lines (comments and blank lines dropped)."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
