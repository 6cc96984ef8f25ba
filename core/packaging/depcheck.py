"""A pin no index can satisfy, said at submit: the project's requirements asked of the index the
local target installs from (`uv pip compile`, nothing built), before the job takes a slot; and,
from the same answer, what the environment will download (each file's size, less what uv's cache
holds) for the plan. For a host (ssh, Slurm, PBS), only the size: resolved here for the host's
Python and platform as its last probe saw them (size_on_host).
"""

from __future__ import annotations

import os
import re

from core.errors import UserError
from core.packaging.requirements import Dependencies, deps_spec

CHECK_VAR = "GPU_ROUTER_DEPS_CHECK"  # "0": no look at the index at submit
CHECK_TIMEOUT_S = 20.0  # past this (a slow or unreachable index) the submit goes on unchecked
CHECK_FRESH_S = 86400.0  # a set found resolvable is not asked about again for a day
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def check_at_submit(deps: Dependencies | None, *, python: str, version: str, venvs_dir: str,
                    uv: str | None, environ: dict[str, str] | None = None,
                    seen: dict | None = None) -> str | None:
    """Refuse, with a UserError naming the file and the requirement line, a project whose
    requirements the index cannot satisfy (a version or a package it does not have, a
    conflict), before the job takes a slot: asked of the index the target installs from (the
    local target's: this machine's settings, the uv installed with gpu-router, `uv pip compile`
    as the launcher runs it, nothing built, no cache written).

    The common submit pays nothing: no check where an environment built from these lines is
    ready, or where the same lines (and Python) were found resolvable in the last day; it is
    skipped where it cannot say for sure (no uv, lines with local paths, `${NAME}`, pip-only
    options or VCS URLs; an index that does not answer within CHECK_TIMEOUT_S; any failure that
    is not a resolution's, such as a package that needs a build). Returns what it did, for
    tests: "ready", "checked", "ok", "skipped".

    `seen` (a dict) is filled with what the environment will take, for the plan: {"state":
    "cached"}, {"state": "not cached", "bytes", "files", ...} (uvenv.to_download: the files of
    the resolved set uv's cache lacks, their sizes the index's), or {"state": "unknown"} where
    the look was skipped. The resolved files are kept beside the day's mark, so a second submit
    of the same lines says the size again without asking the index."""

    from core.runtime import uvenv

    seen = {} if seen is None else seen
    seen.update({"state": "unknown"})
    env = dict(os.environ if environ is None else environ)
    if deps is None or not uv or env.get(CHECK_VAR, "1").strip() == "0":
        return "skipped"
    spec = deps_spec(deps, python=python, version=version, venvs_dir=venvs_dir, uv=uv)
    lines = [*deps.options, *deps.requirements, *deps.constraints]
    if deps.local or uvenv.unfit(spec) or any("${" in line for line in lines):
        return "skipped"
    backend = uvenv.torch_backend(spec, env)
    keys = {spec["hash"], uvenv.with_backend(spec["hash"], backend)}
    for key in keys:
        pointer = os.path.join(venvs_dir, key + ".to")
        try:
            with open(pointer) as f:
                named = f.read().strip()
        except OSError:
            named = key
        if named and os.path.exists(os.path.join(venvs_dir, named, ".ready")):
            seen.update({"state": "cached"})
            return "ready"
    mark = os.path.join(os.path.dirname(venvs_dir.rstrip("/")), "deps-checked", uvenv.with_backend(spec["hash"], backend))
    # uv's cache of this machine, as the launcher uses it (what the look fetches, the install
    # will not fetch again; nothing is built: --no-build); while `gpu gc` holds it, none at all
    cache = os.path.join(os.path.dirname(venvs_dir.rstrip("/")), uvenv.CACHE_DIR)
    files = _marked_files(mark, fresh=True)
    if files is not None:  # a mark from before sizes were kept: asked again, once
        seen.update({"state": "not cached", **uvenv.to_download(files, cache)})
        return "checked"
    import fcntl

    lock = None
    try:
        if env.get(uvenv.CHOICE_VAR, "").strip().lower() == "pip":  # pip installs: no uv cache here
            raise OSError("pip installs")
        os.makedirs(cache, exist_ok=True)
        lock = open(cache + ".lock", "a")  # noqa: SIM115 - closed below
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        caching = ["--cache-dir", cache]
    except OSError:
        caching = ["--no-cache"]
    try:
        done = _ask_index(deps, uv, python, backend, caching, env, mark)
    finally:
        if lock is not None:
            lock.close()
    files = _marked_files(mark) if done == "ok" else None
    if files is not None:
        seen.update({"state": "not cached", **uvenv.to_download(files, cache if caching[0] == "--cache-dir" else None)})
    return done


def _marked_files(mark: str, fresh: bool = False) -> list[dict] | None:
    """The resolved set's files (name, file, url, size) kept in a day's mark, or None for a
    mark without them (or, with `fresh`, one older than CHECK_FRESH_S)."""
    import json
    import time

    try:
        if fresh and time.time() - os.path.getmtime(mark) >= CHECK_FRESH_S:
            return None
        with open(mark) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    return files if isinstance(files, list) else None


def _ask_index(deps: Dependencies, uv: str, python: str | list[str], backend: str | None, caching: list[str],
               env: dict[str, str], mark: str) -> str:
    """`uv pip compile` of the lines (check_at_submit's look): "ok", "skipped", or a UserError.
    Its output is a pylock.toml, whose entries name each file with the size the index gave
    (PEP 691/700); sizes an HTML-only index left out are asked with HEAD (uvenv.fill_sizes,
    bounded), for the files uv's cache does not hold. The files are written into the mark.
    `python`: the interpreter, or the arguments that name another machine's Python
    (`--python-version`, `--python-platform`: host_platform_args)."""
    import subprocess
    import tempfile
    import time

    from core.runtime import uvenv

    with tempfile.TemporaryDirectory(prefix="gpu-deps-check-") as tmp:
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w") as f:
            f.write("\n".join([*deps.options, *deps.requirements]) + "\n")
        args = [req]
        if deps.constraints:
            con = os.path.join(tmp, "constraints.txt")
            with open(con, "w") as f:
                f.write("\n".join(deps.constraints) + "\n")
            args += ["-c", con]
        cmd = [uv, "pip", "compile", *uvenv.COMMON_FLAGS, "--index-strategy", "unsafe-best-match", "--no-build",
               "--no-progress", "--quiet", *caching, *(["--python", python] if isinstance(python, str) else python),
               "--no-header", "--no-annotate",
               "--format", "pylock.toml", "--output-file", os.path.join(tmp, uvenv.LOCK_NAME),
               *(["--torch-backend", backend] if backend else []), *args]
        run_env = uvenv.environ({k: v for k, v in env.items() if not k.startswith("UV_")} | {"HOME": tmp},
                                env)
        try:
            done = subprocess.run(cmd, env=run_env, cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=CHECK_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return "skipped"
        try:
            with open(os.path.join(tmp, uvenv.LOCK_NAME)) as f:
                files = uvenv.lock_files(f.read())
        except OSError:
            files = []
    if done.returncode == 0:
        import json

        held = caching[1] if caching[0] == "--cache-dir" else None  # sizes matter for what is to come
        uvenv.fill_sizes([f for f in files if not (held and uvenv.in_cache(held, f))])
        try:
            os.makedirs(os.path.dirname(mark), exist_ok=True)
            with open(mark, "w") as f:
                json.dump({"time": time.time(), "files": files}, f)
        except OSError:
            pass
        return "ok"
    reason, pip_may_help = uvenv.uv_failure(done.stdout + done.stderr)
    if not reason or pip_may_help or (isinstance(python, str) and uvenv.has_installed(python, reason)):
        return "skipped"  # pip would take that one, or nothing to name
    line = _line_named(reason, deps)
    named = f" (the line `{line}`)" if line and not reason.startswith(line + ":") else ""
    raise UserError(f"{reason}{named}: the job was not submitted", where=deps.source,
                    fix="change the requirement to a version the index has (`pip index versions NAME` lists "
                        f"them); to submit anyway, set {CHECK_VAR}=0")


def _line_named(reason: str, deps: Dependencies) -> str | None:
    """The requirement line of the package the reason names (`numpy==0.0.1: ...`)."""
    m = _NAME.match(reason)
    if not m:
        return None
    want = re.sub(r"[-_.]+", "-", m.group(1)).lower()
    for line in [*deps.requirements, *deps.constraints]:
        got = _NAME.match(line)
        if got and re.sub(r"[-_.]+", "-", got.group(1)).lower() == want:
            return line
    return None


# uv's `--python-platform` names for glibc Linux: the newest of these at or below the host's glibc
_MANYLINUX = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)


def host_platform_args(tags: dict) -> list[str] | None:
    """uv's arguments for resolving as the host would (core/runtime/hostpy.py's answer: its
    Python version and manylinux tags), or None where uv has no name for that platform (a
    musl or non-x86/arm host, an old glibc): no size then, rather than a wrong one."""
    version = str(tags.get("python_version") or "")
    if not re.fullmatch(r"3\.\d+", version):
        return None
    for tag in tags.get("platforms") or []:
        m = re.fullmatch(r"manylinux_2_(\d+)_(x86_64|aarch64)", str(tag))
        if m:
            fits = [v for v in _MANYLINUX if v <= int(m.group(1))]
            if fits:
                return ["--python-version", version, "--python-platform", f"{m.group(2)}-manylinux_2_{fits[-1]}"]
    return None


def size_on_host(deps: Dependencies | None, *, tags: dict | None, gpu: bool, uv: str | None, host: str,
                 marks_dir: str, environ: dict[str, str] | None = None) -> dict:
    """What the environment of `deps` downloads on a host that has not built it before: the
    set resolved here (`uv pip compile`, nothing built, no cache) for the host's Python and
    platform as its last probe told (`tags`, hostpy's answer kept beside the host facts), the
    torch build chosen as the host's installer would (CPU on a host without a GPU), each file's
    size the index's. The host's own index settings are its target's `env`, given in
    `environ`; a pip.conf on the host is out of sight, so the figure is "about". The answer is
    kept in `marks_dir` for a day (CHECK_FRESH_S), as the local target's check keeps its own:
    a second submit of the same lines to the same kind of host asks the index nothing.

    Never refuses: the host's index may hold what this machine's does not. Returns
    {"state": "host", "host", "bytes", "files", "packages", ...} (uvenv.to_download with nothing
    counted as cached), or {"state": "unknown", "why"}."""
    import hashlib
    import json

    from core.runtime import uvenv

    env = dict(os.environ if environ is None else environ)
    if deps is None or not deps.requirements:
        return {"state": "unknown", "why": "no requirements"}
    if env.get(CHECK_VAR, "1").strip() == "0":
        return {"state": "unknown", "why": f"not looked up: {CHECK_VAR}=0"}
    if not uv:
        return {"state": "unknown", "why": "uv is not installed here"}
    if tags is None:
        return {"state": "unknown", "why": f"{host}'s Python not seen yet (known once a job has run there)"}
    where = host_platform_args(tags)
    lines = [*deps.options, *deps.requirements, *deps.constraints]
    if where is None or deps.local or any("${" in line for line in lines):
        return {"state": "unknown", "why": "not sized for that platform or requirement set"}
    spec = {"options": list(deps.options)}
    backend = uvenv.torch_backend(spec, env, gpu=gpu)
    backend = "cpu" if backend == "cpu" else None  # `auto` reads this machine's driver: the index's build
    indexes = {k: v for k, v in env.items() if k.startswith(("PIP_", "UV_")) and ("INDEX" in k or "FIND_LINKS" in k)}
    key = hashlib.sha256(json.dumps([lines, where, backend, sorted(indexes.items())]).encode()).hexdigest()[:32]
    mark = os.path.join(marks_dir, f"host-{key}")
    files = _marked_files(mark, fresh=True)
    if files is None:
        try:
            done = _ask_index(deps, uv, where, backend, ["--no-cache"], env, mark)
        except UserError as exc:
            return {"state": "unknown", "why": f"this machine's index cannot resolve it ({exc.what[:200]})"}
        files = _marked_files(mark) if done == "ok" else None
    if files is None:
        return {"state": "unknown", "why": "the index did not answer in time"}
    return {"state": "host", "host": host, **uvenv.to_download(files, None)}
