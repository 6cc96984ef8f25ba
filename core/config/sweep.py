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


def point_request(req: Any, point: Point) -> Any:
    """The request (a core.config.request.JobRequest: not imported, it imports this module's
    checks) one point runs: its values in env and in GPU_ROUTER_PARAMS, `{KEY}` in the
    args replaced, the sweep itself gone (a point is an ordinary job), no request_id (the group
    holds it)."""
    env = {**req.env, **{k: env_text(v) for k, v in point.items()},
           PARAMS_VAR: json.dumps(point, sort_keys=True, separators=(",", ":"))}
    args, script = list(req.args), req.script
    line = bool(script) and "{" in script and not req.is_python_file()  # compute_job's command
    for key, value in point.items():
        args = [a.replace("{" + key + "}", env_text(value)) for a in args]
        if line:
            script = script.replace("{" + key + "}", shlex.quote(env_text(value)))
    return replace(req, env=env, args=args, script=script, sweep=None, max_parallel=None,
                   request_id=None)
