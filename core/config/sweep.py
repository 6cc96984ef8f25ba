"""A sweep: one request run at many points, each point a set of named values.

Parsed here, once, from every form a person or an agent writes it in:
`--sweep KEY=V1,V2` (repeatable: the grid of every combination), `--sweep-list FILE` (a YAML list
of mappings, or JSON lines), `sweep:` in gpu.yaml (a mapping KEY: [values] for a grid, or a list
of mappings for explicit points) and the MCP tools' `sweep` argument (the same two shapes).

Each point reaches its run three ways (`point_request`): as environment variables named by its
keys, as `gpu.params()` (the JSON in GPU_ROUTER_PARAMS, read by the job-side `gpu` module), and
as `{KEY}` in the args, replaced by the value. A key must therefore be an environment name that
gpu-router and the job's interpreter do not already use: a key that is not one is refused here,
with the fix, before anything is packed.

A value is substituted once: `{KEY}` is read in one pass over what the person wrote, never in a
value just put in, and a value that itself holds a placeholder (`A=ghp_{K0}{K1}`) is refused.
Each point's final args, script line and env are what gets stored and run, so they pass the
checks a request written whole passes (`check_point`): values that are nothing alone can be
joined into a token (`--x ghp_{K0}{K1}{K2}`), and a value becomes an `env` entry, held to
`env`'s rules (a name like a secret's, a token's short form, a long random key).
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.errors import UserError, shorten

KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
PARAMS_VAR = "GPU_ROUTER_PARAMS"  # the point's values as JSON: gpu.params() reads it
MAX_POINTS = 1000
MAX_KEYS = 32
MAX_VALUE_CHARS = 1024
# names a key may not take: gpu-router's own, and those the launcher sets for the interpreter
RESERVED = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONSTARTUP",
                      "HOME", "TMPDIR", "USER", "SHELL", "LANG", "PWD", "LD_PRELOAD",
                      "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                      "WANDB_MODE", "WANDB_DIR", "WANDB_SILENT", "VIRTUAL_ENV"})
RESERVED_PREFIXES = ("GPU_ROUTER_", "SLURM_", "PBS_", "KAGGLE_", "MODAL_", "LD_", "BASH_FUNC_")
_FLOAT_RE = re.compile(r"^-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?\Z")
# `{KEY}` as the args and a command line hold it: a key's shape in braces
PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")

Point = dict[str, Any]


def key_problem(key: Any) -> str | None:
    """Why `key` cannot name a sweep value, or None when it can."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        return (f"{shorten(key)} is not an environment variable name (letters, digits and _, "
                "not starting with a digit, at most 64)")
    if key.upper() in RESERVED or key.upper().startswith(RESERVED_PREFIXES):
        return f"{key} is an environment variable gpu-router or the job's interpreter sets itself"
    return None


def _check_key(key: Any, where: str) -> str:
    problem = key_problem(key)
    if problem:
        raise UserError(f"sweep key {problem}", where=where,
                        fix="name sweep values like LR or batch_size (your script reads them with "
                            "os.environ or gpu.params())")
    return key


def _check_value(key: str, value: Any, where: str) -> Any:
    if isinstance(value, bool) or isinstance(value, (int, float, str)):
        if isinstance(value, float) and value != value:
            raise UserError(f"sweep value of {key} is NaN", where=where, fix="give a number or text")
        if len(str(value)) > MAX_VALUE_CHARS or (isinstance(value, str) and not value.isprintable()):
            raise UserError(f"sweep value of {key} ({shorten(value)}) is too long or not printable",
                            where=where, fix=f"values are printable text of at most {MAX_VALUE_CHARS} characters")
        found = PLACEHOLDER_RE.search(value) if isinstance(value, str) else None
        if found:  # a value is put in as it is: {K} in it would read as a second substitution
            raise UserError(f"sweep value of {key} ({shorten(value)}) holds the placeholder "
                            f"{found.group()}: a value is substituted once, never filled in from "
                            "another key", where=where,
                            fix="write each point's whole value (list the points with --sweep-list), "
                                "or put the placeholders side by side in the args, e.g. -- --x {A}{B}")
        return value
    raise UserError(f"sweep value of {key} is {type(value).__name__}, not a number or text",
                    where=where, fix="each value is a number, true/false or text")


def typed(text: str) -> Any:
    """A value typed on the command line: a whole number or a plain decimal becomes a number
    (so gpu.params() gives 0.1, not "0.1"); anything else stays text, as typed."""
    text = text.strip()
    if re.fullmatch(r"-?\d{1,18}", text):
        return int(text)
    if _FLOAT_RE.match(text) and str(float(text)) == text:
        return float(text)
    return text


def env_text(value: Any) -> str:
    """A value as its environment variable and `{KEY}` in args hold it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def from_flags(flags: list[str], where: str = "argument --sweep") -> dict[str, list[Any]]:
    """`--sweep KEY=V1,V2` flags as a grid: {KEY: [V1, V2]} (a key given twice is refused)."""
    grid: dict[str, list[Any]] = {}
    for flag in flags:
        key, sep, values = flag.partition("=")
        if not sep or not values.strip():
            raise UserError(f"--sweep {shorten(flag)} is not KEY=V1,V2,...", where=where,
                            fix="e.g. --sweep LR=0.1,0.01 --sweep BATCH=32,64")
        key = _check_key(key.strip(), where)
        if key in grid:
            raise UserError(f"sweep key {key} is given twice", where=where,
                            fix="give all of a key's values in one --sweep KEY=V1,V2")
        grid[key] = [typed(v) for v in values.split(",")]
    return grid


def read_list(path: str | Path, where: str = "argument --sweep-list") -> list[Point]:
    """The points of a `--sweep-list` file: a YAML list of mappings, or one JSON object a line."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the sweep list {path}: {exc}", where=where,
                        fix="give a YAML list of mappings or a JSONL file, one point a line") from None
    where = str(path)
    if path.suffix in (".jsonl", ".ndjson"):
        points = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    points.append(json.loads(line))
                except ValueError as exc:
                    raise UserError(f"line {number} is not JSON: {exc}", where=f"{where}:{number}",
                                    fix='one object a line, e.g. {"LR": 0.1, "BATCH": 32}') from None
        return points
    from core.config import safeyaml

    node = safeyaml.compose(text, where)
    return [] if node is None else safeyaml.construct(node, where)


def points(spec: Any, where: str = "sweep") -> list[Point]:
    """Every point of a sweep spec, in order: a mapping {KEY: [values]} is the grid of every
    combination (the first key varies slowest); a list of mappings is those points as given.
    Keys and values are checked; an empty sweep, a point with other keys than the first, a
    repeated point and more than MAX_POINTS points are refused."""
    if isinstance(spec, dict):
        if not spec or len(spec) > MAX_KEYS:
            raise UserError(f"a sweep needs 1 to {MAX_KEYS} keys", where=where,
                            fix="e.g. sweep: {LR: [0.1, 0.01], BATCH: [32, 64]}")
        grid = {}
        for key, values in spec.items():
            key = _check_key(key, where)
            values = values if isinstance(values, list) else [values]
            if not values:
                raise UserError(f"sweep key {key} has no values", where=where, fix=f"{key}: [V1, V2]")
            grid[key] = [_check_value(key, v, where) for v in values]
        count = 1
        for values in grid.values():
            count *= len(values)
            if count > MAX_POINTS:
                break
        _check_count(count, where)
        out = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    elif isinstance(spec, list):
        _check_count(len(spec), where)
        out = []
        for n, item in enumerate(spec, start=1):
            if not isinstance(item, dict) or not item:
                raise UserError(f"point {n} is not a mapping of KEY: value", where=where,
                                fix="each point is a mapping, e.g. {LR: 0.1, BATCH: 32}")
            if len(item) > MAX_KEYS:
                raise UserError(f"point {n} has more than {MAX_KEYS} keys", where=where)
            out.append({_check_key(k, where): _check_value(k, v, where) for k, v in item.items()})
        if any(set(p) != set(out[0]) for p in out):
            raise UserError("the points name different keys", where=where,
                            fix="give every point the same keys (a missing one would leave its "
                                "variable unset in that run)")
    else:
        raise UserError(f"a sweep is a mapping of KEY: [values] or a list of points, not "
                        f"{type(spec).__name__}", where=where,
                        fix="e.g. sweep: {LR: [0.1, 0.01]} or sweep: [{LR: 0.1}, {LR: 0.01}]")
    seen: set[str] = set()
    for p in out:
        label = json.dumps(p, sort_keys=True)
        if label in seen:
            raise UserError(f"point {label} is given twice", where=where, fix="give each point once")
        seen.add(label)
    return out


def _check_count(count: int, where: str) -> None:
    if count < 1 or count > MAX_POINTS:
        raise UserError(f"a sweep has 1 to {MAX_POINTS} points ({'more' if count else 'none'} here)",
                        where=where, fix="split a larger sweep into several")


def check_clash(pts: list[Point], env: dict[str, str], where: str = "sweep") -> None:
    """A sweep key that is also in the request's `env` would hide one of the two: refused."""
    both = sorted(set(pts[0]) & set(env)) if pts else []
    if both:
        raise UserError(f"sweep key {', '.join(both)} is also set in env", where=where,
                        fix="drop it from env (the sweep gives each run its value) or rename the key")


def label(point: Point) -> str:
    """A point as one short text: `LR=0.1 BATCH=32`."""
    return " ".join(f"{k}={env_text(v)}" for k, v in point.items())


def substitute(template: str, point: Point, quote: bool = False) -> str:
    """`template` with each `{KEY}` of the point's keys replaced by its value (shell-quoted
    for a command line), in one pass: what a value brings in is never read again, so no value
    is substituted twice. `{X}` that names no key stays as written."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in point:
            return m.group()
        text = env_text(point[m.group(1)])
        return shlex.quote(text) if quote else text

    return PLACEHOLDER_RE.sub(one, template)


def point_request(req: Any, point: Point, where: str = "sweep", number: int | None = None) -> Any:
    """The request (a core.config.request.JobRequest: not imported, it imports this module's
    checks) one point runs: its values in env and in GPU_ROUTER_PARAMS, `{KEY}` in the
    args replaced (once, `substitute`), the sweep itself gone (a point is an ordinary job), no
    request_id (the group holds it). Its final args, script line and env are checked as a
    request written whole (`check_point`), whichever door made it."""
    env = {**req.env, **{k: env_text(v) for k, v in point.items()},
           PARAMS_VAR: json.dumps(point, sort_keys=True, separators=(",", ":"))}
    args = [substitute(a, point) for a in req.args]
    script = req.script
    if script and "{" in script and not req.is_python_file():  # compute_job's command line
        script = substitute(script, point, quote=True)
    run = replace(req, env=env, args=args, script=script, sweep=None, max_parallel=None,
                  request_id=None)
    check_point(run, point, where, number)
    return run


def check_point(run: Any, point: Point, where: str = "sweep", number: int | None = None) -> None:
    """Refuse a point whose final values a request written whole could not hold: its args and
    command line by the args check, its env by the env check (names and values), their size by
    the command size check. Said as the point (by number and keys, never its values) and then
    as the check says it, with the check's fix.

    GPU_ROUTER_PARAMS is left to its parts: it is the point's values as JSON (each one checked
    as its own env entry), and JSON's quotes and the keys' capitals read as a random key."""
    from core.config.limits import check_command_size
    from core.secrets.scan import check_args, check_env, secret_name_part

    which = f"sweep point {number}" if number else "a sweep point"
    keys = ", ".join(point)
    try:
        check_args(list(run.args), where)
        if run.script and not run.is_python_file():
            try:
                parts = shlex.split(run.script)
            except ValueError:
                parts = [run.script]
            check_args(parts, where, field="the script line")
        check_env({k: v for k, v in run.env.items() if k != PARAMS_VAR}, where, plain=set(run.not_secret))
        check_command_size(run, where)
    except UserError as exc:
        fix = exc.fix
        named = [k for k in point if secret_name_part(k) and f" {k} " in f" {exc.what} "]
        if named:  # the key is the env name refused: most often an ordinary setting (MAX_TOKENS)
            fix = (f"a sweep key is also the name of an env variable, held to env's rules: for an "
                   f"ordinary setting, rename {named[0]} (e.g. without the word part named) and "
                   f"read it with os.environ or gpu.params(); for a secret, {fix}")
        raise UserError(f"{which} (keys {keys}), with its values put in: {exc.what}",
                        where=where, fix=fix) from None


def check_points(req: Any, where: str = "sweep") -> None:
    """Every point of a request's sweep made and checked (`point_request`): at submit, before
    anything is packed, so a point that could not run is refused where the sweep was written."""
    for n, point in enumerate(req.sweep or [], start=1):
        point_request(req, point, where, n)
