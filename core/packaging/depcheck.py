"""A pin no index can satisfy, said at submit: the project's requirements asked of the index the
local target installs from (`uv pip compile`, nothing built), before the job takes a slot; and,
from the same answer, what the environment will download (each file's size, less what uv's cache
holds) for the plan.
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
    import time

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
    try:
        if time.time() - os.path.getmtime(mark) < CHECK_FRESH_S:
            files = _marked_files(mark)
            if files is not None:  # a mark from before sizes were kept: asked again, once
                seen.update({"state": "not cached", **uvenv.to_download(files, cache)})
                return "checked"
    except OSError:
        pass
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


def _marked_files(mark: str) -> list[dict] | None:
    """The resolved set's files (name, file, url, size) kept in a day's mark, or None for a
    mark without them."""
    import json

    try:
        with open(mark) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    return files if isinstance(files, list) else None


def _ask_index(deps: Dependencies, uv: str, python: str, backend: str | None, caching: list[str],
               env: dict[str, str], mark: str) -> str:
    """`uv pip compile` of the lines (check_at_submit's look): "ok", "skipped", or a UserError.
    Its output is a pylock.toml, whose entries name each file with the size the index gave
    (PEP 691/700); sizes an HTML-only index left out are asked with HEAD (uvenv.fill_sizes,
    bounded), for the files uv's cache does not hold. The files are written into the mark."""
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
               "--no-progress", "--quiet", *caching, "--python", python, "--no-header", "--no-annotate",
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
    if not reason or pip_may_help or uvenv.has_installed(python, reason):  # pip would take that one
        return "skipped"
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
