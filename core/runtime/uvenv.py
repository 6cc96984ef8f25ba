"""Installing a job's dependencies with uv: which uv, whether it can take these lines, its
commands, and the name of an environment by the packages it holds.

Standard library only (it runs beside the launcher on every target). Why uv: pip builds every
environment from nothing (CPU torch: about 27 s and 800 MB each time, per project); uv keeps one
cache per host (ROOT/uv-cache, beside ROOT/venvs) and links the cached files into each
environment (hard links on Linux, clones on macOS), so an environment from cached packages takes
about a second and almost no new disk.

How an environment is built with uv (core/runtime/venvbuild.py drives it):

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
--no-build), or uv failing where pip might not: a crash, a network failure, not a version or
package the index lacks (`uv_failure` reads uv's words: pip would fail the same way, at length).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys

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
                offline: bool = False, torch_backend: str | None = None, quiet: bool = False) -> list[str]:
    """`uv pip install`: `torch_backend` (see `torch_backend`) picks torch's build; `quiet`
    where another step already listed the packages (the link from the cache: the log would
    show each package twice)."""
    cmd = [uv, "pip", "install", *COMMON_FLAGS, *INSTALL_FLAGS, "--cache-dir", cache, "--python", python]
    if link:
        cmd += ["--link-mode", link]
    if offline:  # from the cache only: no network (and, as every uv step, no build)
        cmd += ["--offline"]
    if torch_backend:
        cmd += ["--torch-backend", torch_backend]
    if quiet:
        cmd += ["--quiet"]
    return cmd + args


def compile_cmd(uv: str, python: str, cache: str, args: list[str], out: str, *,
                torch_backend: str | None = None) -> list[str]:
    """The exact set `args` resolve to for `python`, one `name==version` (or `name @ URL`) a
    line, into `out` (with torch's build for `torch_backend`: `torch==2.5.1+cpu`)."""
    return [uv, "pip", "compile", *COMMON_FLAGS, *INSTALL_FLAGS, "--quiet", "--cache-dir", cache,
            "--python", python, "--no-header", "--no-annotate", "--output-file", out,
            *(["--torch-backend", torch_backend] if torch_backend else []),
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


# -- why an install failed, in one line ----------------------------------------------------

# The start of a job's end reason when its dependencies could not be installed: the supervisor
# records the launcher's line as it is (core/engine/failure.py), never "exited with status N"
FAILED = "installing dependencies failed: "
REASON_CAP = 300
_NO_VERSION = re.compile(r"there is no version of (?P<req>\S+?)(?: and| which|,|$)")
_NOT_FOUND = re.compile(r"(?:Because |and )(?P<name>[A-Za-z0-9][\w.\-\[\]]*) was not found in the "
                        r"(?P<where>package registry|provided package locations)")
_ONLY = re.compile(r"Because only (?P<have>.+?) (?:is|are) available and you require (?P<req>[^,]+?), we can conclude")
_CONFLICT = re.compile(r"Because you require (?P<reqs>.+?), we can conclude that your requirements are unsatisfiable")
_NO_BUILD = ("has no usable wheels", "building from source is disabled", "--no-build", "no wheels with a matching")


def _cap(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CAP else text[:REASON_CAP - 1] + "…"


def uv_failure(output: str) -> tuple[str | None, bool]:
    """What a failed uv step's output says, as (one line a person can act on, or None; whether
    pip may do better). pip gets its turn where uv cannot do what pip can (a set that needs a
    build: every uv step runs --no-build), where uv crashed or said something not known here;
    never after a resolution failure (a version or package the index does not have, a
    conflict): pip would fail the same way after printing a page of versions."""
    text = output.replace("\r", "")
    if any(word in text for word in _NO_BUILD):
        return None, True
    if "No solution found when resolving" not in text and "unsatisfiable" not in text:
        return None, True  # a crash, a network failure, something uv does not do: pip may
    m = _NO_VERSION.search(text)
    if m:
        return _cap(f"{m.group('req')}: no such version on the index (uv)"), False
    m = _NOT_FOUND.search(text)
    if m:
        where = "on the index" if m.group("where") == "package registry" else "in the package locations given"
        return _cap(f"{m.group('name')}: no such package {where} (uv)"), False
    m = _ONLY.search(text)
    if m and "depend" not in m.group("req"):
        return _cap(f"{m.group('req')}: no such version on the index, only {m.group('have')} (uv)"), False
    m = _CONFLICT.search(text)
    if m:
        return _cap(f"the requirements conflict: {m.group('reqs')} (uv)"), False
    causes = [ln.strip().removeprefix("cause:").strip() for ln in text.splitlines()
              if ln.strip().startswith(("cause:", "And because"))]
    if causes:
        return _cap(" ".join(causes) + " (uv)"), False
    return None, False


_PIP_NO_MATCH = re.compile(r"No matching distribution found for (?P<req>\S+)")
_PIP_ERROR = re.compile(r"^ERROR: (?P<text>.+)$", re.MULTILINE)


def pip_failure(output: str) -> str | None:
    """A failed `pip install`'s reason, in one line: the requirement no version satisfies
    (pip's list of the versions it saw is dropped), else pip's last ERROR line; None when pip
    printed no error."""
    m = _PIP_NO_MATCH.search(output)
    if m:
        return _cap(f"{m.group('req')}: no such version on the index (pip)")
    errors = [e.group("text").strip() for e in _PIP_ERROR.finditer(output)]
    errors = [e for e in errors if not e.startswith(("Could not find a version", "Ignored the following"))]
    if errors:
        return _cap(re.sub(r"\(from versions: [^)]*\)", "", errors[-1]) + " (pip)")
    return None


# -- which build of torch ------------------------------------------------------------------

TORCH_BACKEND_VAR = "UV_TORCH_BACKEND"


def has_gpu(environ: dict[str, str] | None = None) -> bool:
    """Whether this machine has a GPU torch could use: an NVIDIA driver (its device nodes, its
    kernel module, nvidia-smi) or ROCm's. Cheap: no process is started."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    marks = ("/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia/version", "/sys/module/nvidia/version",
             "/dev/kfd")
    return any(os.path.exists(p) for p in marks) or bool(shutil.which("nvidia-smi", path=env.get("PATH", "")))


def torch_backend(deps: dict, outer: dict[str, str], gpu: bool | None = None) -> str | None:
    """uv's `--torch-backend` for this install, or None to leave torch to the index: `cpu` on
    a machine without a GPU (PyPI's Linux torch is the CUDA build, gigabytes of nvidia-*
    wheels no CPU uses), `auto` on one with a GPU (uv picks the build for its driver). Left to
    the index where the project or the machine chose where packages come from: a wheelhouse
    (--no-index, --find-links), an index of its own (--index-url, PIP_INDEX_URL and uv's
    spellings: uv would fetch torch from download.pytorch.org instead), or a backend already
    set (UV_TORCH_BACKEND, or deps' `torch_backend` from the target's config); on macOS,
    whose torch has no CUDA build. `gpu`: whether the machine has one (None: look)."""
    if deps.get("torch_backend"):
        return str(deps["torch_backend"])
    if outer.get(TORCH_BACKEND_VAR) or sys.platform == "darwin" or deps.get("wheelhouse"):
        return None
    if any(line.startswith(("--index-url", "-i", "--no-index", "--find-links", "-f", "--extra-index-url"))
           for line in deps.get("options") or []):
        return None
    if any(outer.get(n) for n in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
                                  "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL",
                                  "UV_FIND_LINKS", "UV_NO_INDEX")):
        return None
    return "auto" if (has_gpu(outer) if gpu is None else gpu) else "cpu"


def with_backend(key: str, backend: str | None) -> str:
    """An environment's name (the requirements' hash) with the torch build chosen for it: a
    CPU target's environment is never the one a GPU target reuses, nor the other way."""
    if not backend:
        return key
    return hashlib.sha256(f"{key}\0torch-backend={backend}".encode()).hexdigest()[:32]


def phase_detail(phase: str) -> str:
    """A provisioning attempt's reason from its phase file (the launcher writes "installing:
    fetching 12 packages" at each step of an install): "installing dependencies: fetching 12
    packages", or plain "installing dependencies"."""
    text = (phase or "").strip()
    step = text[len("installing: "):] if text.startswith("installing: ") else ""
    return f"installing dependencies: {step[:120]}" if step else "installing dependencies"


_REASON_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def has_installed(python: str, reason: str) -> bool:
    """Whether `python` (the target's, whose packages a pip environment sees through system
    site packages) already has the package `reason` names (`torch==2.3.1: no such ...`): pip
    would take that one where uv, which resolves from the index alone, found nothing."""
    import subprocess

    m = _REASON_NAME.match(reason or "")
    if not m:
        return False
    probe = "import importlib.metadata as m, sys\ntry:\n    m.distribution(sys.argv[1])\nexcept Exception:\n    sys.exit(1)\n"
    try:
        return subprocess.run([python, "-I", "-c", probe, m.group(1)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# -- how much an environment downloads, and how much of it has come --------------------------

LOCK_NAME = "pylock.toml"  # the name uv insists on for `--format pylock.toml`
FILES_SHOWN = 20  # the biggest files a plan lists (its total counts them all)
SIZE_HEAD_S = 5.0  # asking the index for the sizes it did not list: at most this long, all together
_LOCK_WHEEL = re.compile(r'url = "(?P<url>[^"]+)"(?:, size = (?P<size>\d+))?')
_LOCK_NAME = re.compile(r'^name = "(?P<name>[^"]+)"', re.MULTILINE)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def human_bytes(n: float) -> str:
    """"864.0 MB": decimal units, as the index and `du --si` count them."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _tag_rank(filename: str) -> tuple[int, str]:
    """How specific a wheel's tags are: uv installs the most specific of those the target can
    use (a platform's over `any`, an ABI's over `none`, CPython's over `py3`); a pylock.toml
    from `uv pip compile --python X` lists only wheels X can use, so the most specific is the
    one the install downloads (variants of one version differ little in size anyway)."""
    parts = filename[:-len(".whl")].split("-")
    py, abi, plat = (parts[-3:] + ["", "", ""])[:3]
    return ((plat != "any") * 4 + (abi != "none") * 2 + py.startswith("cp"), filename)


def lock_files(text: str) -> list[dict]:
    """The file each package of a pylock.toml (uv's) downloads: [{"name", "file", "url",
    "size" (bytes, None where the index did not say)}], one a package: its most specific
    wheel, or its sdist. Read with tomllib where the Python has it, else with a pattern for
    the lines uv writes (the launcher runs on any target's Python)."""
    try:
        import tomllib

        packages = tomllib.loads(text).get("packages") or []
    except ImportError:  # Python < 3.11: uv's own layout, one [[packages]] table after another
        packages = []
        for chunk in text.split("[[packages]]")[1:]:
            m = _LOCK_NAME.search(chunk)
            entries = [{"url": w.group("url"), **({"size": int(w.group("size"))} if w.group("size") else {})}
                       for w in _LOCK_WHEEL.finditer(chunk)]
            wheels = [e for e in entries if e["url"].endswith(".whl")]
            sdists = [e for e in entries if not e["url"].endswith(".whl")]
            packages.append({"name": m.group("name") if m else "?", "wheels": wheels,
                             **({"sdist": sdists[0]} if sdists else {})})
    except ValueError:
        return []
    out = []
    for pkg in packages:
        wheels = [w for w in pkg.get("wheels") or [] if w.get("url")]
        if wheels:
            chosen = max(wheels, key=lambda w: _tag_rank(w["url"].rsplit("/", 1)[-1]))
        elif (pkg.get("sdist") or {}).get("url"):
            chosen = pkg["sdist"]
        else:  # a directory or a VCS URL: nothing to download from an index
            continue
        url = chosen["url"]
        out.append({"name": str(pkg.get("name", "?")), "file": url.rsplit("/", 1)[-1].split("#")[0],
                    "url": url, "size": chosen.get("size")})
    return out


def fill_sizes(files: list[dict], budget_s: float = SIZE_HEAD_S) -> None:
    """The sizes the index's pages did not give (an HTML-only index: PEP 503 has no sizes,
    PEP 691's JSON has), asked with HEAD (its Content-Length), all at once and within
    `budget_s`; a size still unknown stays None."""
    import threading
    import urllib.request

    def head(item: dict) -> None:
        try:
            req = urllib.request.Request(item["url"], method="HEAD")
            with urllib.request.urlopen(req, timeout=budget_s) as resp:  # noqa: S310 - the index's own URL
                length = resp.headers.get("Content-Length")
                if length and length.isdigit():
                    item["size"] = int(length)
        except Exception:  # noqa: BLE001 - any failure leaves the size unknown
            pass

    todo = [f for f in files if f.get("size") is None and f["url"].startswith(("http://", "https://"))]
    threads = [threading.Thread(target=head, args=(f,), daemon=True) for f in todo[:32]]
    for t in threads:
        t.start()
    import time

    end = time.monotonic() + budget_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))


def in_cache(cache: str, item: dict) -> bool:
    """Whether uv's cache holds this wheel already: uv writes
    `wheels-vN/<index>/<hash>/<name>/<version>-<tags>.http` once a wheel is downloaded and
    unpacked (an sdist: never, it is built: counted as not held)."""
    import glob

    fname = item["file"]
    if not fname.endswith(".whl"):
        return False
    stem = fname[:-len(".whl")].split("-", 1)[-1]
    name = glob.escape(_norm(item["name"]))
    for pattern in (f"wheels-v*/*/{name}/{glob.escape(stem)}.http", f"wheels-v*/*/*/{name}/{glob.escape(stem)}.http"):
        if glob.glob(os.path.join(glob.escape(cache), pattern)):
            return True
    return False


def to_download(files: list[dict], cache: str | None) -> dict:
    """What an environment of `files` downloads with `cache` as it is: {"bytes": known total,
    "unknown": files of unknown size, "files": [{"name", "file", "size"}] biggest first (the
    FILES_SHOWN biggest: the plan is kept with the job), "packages": how many the set holds,
    "in_cache": how many of them are cached already}."""
    missing = [f for f in files if not (cache and in_cache(cache, f))]
    missing.sort(key=lambda f: -(f.get("size") or 0))
    return {"bytes": sum(f.get("size") or 0 for f in missing),
            "unknown": sum(1 for f in missing if f.get("size") is None),
            "files": [{"name": f["name"], "file": f["file"], "size": f.get("size")} for f in missing[:FILES_SHOWN]],
            "packages": len(files), "in_cache": len(files) - len(missing)}


def download_text(info: dict | None) -> str:
    """The plan's line: "environment: not cached, about 1.2 GB to download (torch 864.0 MB,
    nvidia-cudnn-cu12 634.0 MB, ...)", "environment: cached", or with the size unknown; for a
    host (state "host", whose cache is out of sight at submit): "environment: about 1.2 GB to
    download on gpubox unless it built this environment before (...)"."""
    state = (info or {}).get("state")
    if state not in ("cached", "not cached", "host"):
        why = (info or {}).get("why") or "not looked up at submit"
        return f"environment: download size unknown ({why})"
    if state == "cached":
        return "environment: cached"
    files = info.get("files") or []
    coming = max(len(files), int(info.get("packages") or 0) - int(info.get("in_cache") or 0))
    head = "environment: not cached," if state == "not cached" else "environment:"
    tail = f" on {info.get('host')} unless it built this environment before" if state == "host" else ""
    if not files:
        return f"environment: not cached, nothing to download (all {info.get('packages', 0)} packages in uv's cache)"
    sized = [f for f in files if f.get("size")]
    if not sized:
        return f"{head} {count_text(coming, 'package')} to download{tail}, size unknown"
    named = ", ".join(f"{f['name']} {human_bytes(f['size'])}" for f in sized[:3])
    more = ", ..." if coming - int(info.get("unknown") or 0) > 3 else ""
    unknown = f", {info['unknown']} more of unknown size" if info.get("unknown") else ""
    return f"{head} about {human_bytes(info['bytes'])} to download{tail} ({named}{more}){unknown}"


def fetched_bytes(cache: str, files: list[dict]) -> int:
    """How much of `files` (those an install downloads, sizes known) has come, as the cache
    shows it. Why the cache: uv prints no byte counts off a terminal (only "Downloading torch
    (864.0MiB)" as each large file starts), and its sockets are inside the job's sandbox, out of
    the launcher's sight; what uv writes is in sight. A wheel done is its `.http` entry (its
    size is the index's, exact); a wheel coming is unpacked as it streams into a `.tmp*`
    folder at the cache's top: those bytes (unpacked, so larger than the download) count only
    up to what the unfinished wheels weigh, so the figure never passes the total."""
    done = sum(f.get("size") or 0 for f in files if in_cache(cache, f))
    left = sum(f.get("size") or 0 for f in files) - done
    coming = 0
    try:
        tops = [e.path for e in os.scandir(cache) if e.name.startswith(".tmp") and e.is_dir(follow_symlinks=False)]
    except OSError:
        tops = []
    for top in tops:
        for here, _dirs, names in os.walk(top):
            for n in names:
                try:
                    coming += os.lstat(os.path.join(here, n)).st_size
                except OSError:
                    pass
    return done + min(coming, max(0, left - 1)) if left else done


def count_text(n: int, noun: str) -> str:
    """"1 package", "12 packages"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def progress_text(done: int, total: int) -> str:
    """"412.0 MB of 1.2 GB" (the phase's words while an install downloads)."""
    return f"{human_bytes(done)} of {human_bytes(total)}"


_UNITS = {"B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3}
_PROGRESS = re.compile(r"installing dependencies: fetching (\d+) packages?, (\d+(?:\.\d+)?) (B|KB|MB|GB) of "
                       r"(\d+(?:\.\d+)?) (B|KB|MB|GB)")


def install_progress(reason: str | None) -> dict | None:
    """The numbers in a provisioning job's reason ("installing dependencies: fetching 12
    packages, 412.0 MB of 1.2 GB"), for `gpu status --json` and an agent that weighs how long
    to wait: {"packages", "downloaded_bytes", "total_bytes", "fraction"}. The reason is the one
    record of the install's progress (the target's poll carries it home as text, from any
    host), so the bytes are as precise as its units (a tenth of the unit); None for any other
    reason."""
    m = _PROGRESS.search(reason or "")
    if m is None:
        return None
    done = round(float(m.group(2)) * _UNITS[m.group(3)])
    total = round(float(m.group(4)) * _UNITS[m.group(5)])
    return {"packages": int(m.group(1)), "downloaded_bytes": done, "total_bytes": total,
            "fraction": round(min(1.0, done / total), 3) if total else None}
