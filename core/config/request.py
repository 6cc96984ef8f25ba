"""The request: `gpu.yaml` in the project root, overridden by the command's arguments.

Validated once, here. A bad file gets an error naming the file, line and key and what is
allowed; nothing downstream re-checks types.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from core.errors import UserError

PROJECT_FILE = "gpu.yaml"
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class DataSpec:
    """One data set: a local path (absolute once resolved) or an hf://datasets/ URI."""

    name: str
    source: str
    kind: str  # "path" or "hf"

    @classmethod
    def parse(cls, text: str, project_dir: Path, where: str) -> "DataSpec":
        text = text.strip()
        name, sep, source = text.partition("=")
        if not sep:  # a bare PATH or URI: the name is its last part
            source, name = text, ""
        if source.startswith("hf://"):
            if not source.startswith("hf://datasets/") or len(source) <= len("hf://datasets/"):
                raise UserError(f"data {text!r} is not an hf://datasets/OWNER/NAME URI",
                                where=where, fix="write it as hf://datasets/OWNER/NAME")
            name = name or source.rstrip("/").rsplit("/", 1)[-1]
            kind = "hf"
        else:
            path = Path(os.path.expanduser(source))
            path = path if path.is_absolute() else project_dir / path
            if not path.exists():
                raise UserError(f"data {text!r}: {path} does not exist", where=where,
                                fix="give NAME=PATH with a path relative to the project or absolute")
            source = str(path.resolve())
            name = name or path.name
            kind = "path"
        if not NAME_RE.match(name):
            raise UserError(f"data name {name!r} is not allowed", where=where,
                            fix="use letters, digits, '.', '_' or '-' (NAME=PATH)")
        return cls(name=name, source=source, kind=kind)


@dataclass
class JobRequest:
    project_dir: str
    script: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)
    data: list[DataSpec] = field(default_factory=list)
    hours: float | None = None
    gpu: str | None = None
    vram_gb: float | None = None
    provider: str | None = None
    name: str | None = None
    request_id: str | None = None
    smoke: bool = False
    wait_s: float = 10.0
    verbose: bool = False
    # what a scheduler (slurm, pbs) is asked for; other targets ignore them
    cpus: int | None = None
    gpus: int | None = None
    memory_gb: float | None = None
    time_minutes: int | None = None
    partition: str | None = None
    modules: list[str] = field(default_factory=list)
    container: str | None = None

    def resources(self) -> dict[str, Any]:
        """The scheduler resources that were asked for (none: an empty dict)."""
        return {k: getattr(self, k) for k in RESOURCE_KEYS if getattr(self, k) not in (None, [])}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def is_python_file(self) -> bool:
        """A `.py` path runs with the target's Python; anything else is a command line."""
        return is_python_file(self.script or "", Path(self.project_dir))

    def command(self) -> list[str]:
        """The job's argv before the interpreter is chosen: ["train.py", *args] or a split line."""
        assert self.script
        if self.is_python_file():
            return [self.script, *self.args]
        return [*shlex.split(self.script), *self.args]

    def display_name(self) -> str:
        if self.name:
            return self.name
        first = shlex.split(self.script or "job")[0] if self.script else "job"
        if not self.is_python_file() and len(shlex.split(self.script)) > 1:
            first = shlex.split(self.script)[-1]
        stem = Path(first).stem or "job"
        return re.sub(r"[^A-Za-z0-9._-]", "-", stem)[:64] or "job"


def is_python_file(script: str, project_dir: Path | None = None) -> bool:
    """`train.py` and `sub dir/train.py` (a file that exists) are scripts; `python x.py` is a line."""
    if not script.endswith(".py"):
        return False
    if project_dir is not None and (project_dir / script).is_file():
        return True
    try:
        return len(shlex.split(script)) == 1
    except ValueError:
        return True


# -- the schema ----------------------------------------------------------------------------

def _str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise TypeError("a non-empty string")
    return v


def _str_list(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v):
        raise TypeError("a list of strings")
    return [str(x) for x in v]


def _args(v: Any) -> list[str]:
    if isinstance(v, str):
        return shlex.split(v)
    return _str_list(v)


def _env(v: Any) -> dict[str, str]:
    if isinstance(v, list):
        out = {}
        for item in v:
            if not isinstance(item, str) or "=" not in item:
                raise TypeError("a mapping NAME: value, or a list of NAME=value")
            k, _, val = item.partition("=")
            out[k] = val
        v = out
    if not isinstance(v, dict):
        raise TypeError("a mapping NAME: value")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str) or not ENV_NAME_RE.match(k):
            raise TypeError(f"environment names like MY_VAR (got {k!r})")
        if isinstance(val, (dict, list)) or val is None:
            raise TypeError(f"a string value for {k}")
        out[k] = str(val).lower() if isinstance(val, bool) else str(val)
    return out


def _data(v: Any) -> list[str]:
    if isinstance(v, dict):
        return [f"{k}={val}" for k, val in v.items()]
    return _str_list(v)


def _positive(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("a number")
    if v <= 0 or not math.isfinite(v):
        raise ValueError("a finite number above 0")
    return float(v)


def _non_negative(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("a number")
    if v < 0 or not math.isfinite(v):
        raise ValueError("a finite number of 0 or more")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("true or false")
    return v


def _name(v: Any) -> str:
    v = _str(v)
    if not NAME_RE.match(v):
        raise ValueError("letters, digits, '.', '_' or '-' (at most 64)")
    return v


def _whole(minimum: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("a whole number")
        if v < minimum:
            raise ValueError(f"a whole number of {minimum} or more")
        return v
    return check


# scheduler values land in batch-script directives: no spaces, quotes or newlines
SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9._:/@,+=%-]{1,200}$")


def _safe_value(v: Any) -> str:
    v = _str(v)
    if not SAFE_VALUE_RE.match(v):
        raise ValueError("letters, digits and . _ - : / @ , + = % only (no spaces or quotes)")
    return v


def _modules(v: Any) -> list[str]:
    items = _str_list(v)
    for item in items:
        if not SAFE_VALUE_RE.match(item):
            raise ValueError(f"module names like cuda/12.1 (got {item!r})")
    return items


def _request_id(v: Any) -> str:
    v = _str(v) if not isinstance(v, int) or isinstance(v, bool) else str(v)
    if len(v) > 200 or any(ord(c) < 32 for c in v):
        raise ValueError("a printable string of at most 200 characters")
    return v


SCHEMA: dict[str, tuple[Callable[[Any], Any], str]] = {
    "script": (_str, "the script to run, e.g. train.py, or a command line like `bash run.sh`"),
    "args": (_args, "arguments for the script, a list of strings"),
    "env": (_env, "non-secret environment variables, NAME: value"),
    "secrets": (_str_list, "names of keychain secrets the job reads"),
    "include": (_str_list, "globs of git-ignored code that must ship"),
    "data": (_data, "data sets, NAME=PATH or hf://datasets/OWNER/NAME"),
    "hours": (_positive, "an honest wall-clock estimate in hours, above 0"),
    "gpu": (_str, "a GPU type, e.g. T4"),
    "vram_gb": (_positive, "GB of GPU memory needed, above 0"),
    "provider": (_name, "a target name, e.g. local"),
    "name": (_name, "a short job name"),
    "request_id": (_request_id, "an id that makes the submit idempotent"),
    "smoke": (_bool, "true for a quick smoke test"),
    "wait_s": (_non_negative, "seconds to wait for the job to be placed"),
    "verbose": (_bool, "true for full documents"),
    "cpus": (_whole(1), "CPU cores per job on a scheduler target (Slurm --cpus-per-task)"),
    "gpus": (_whole(0), "GPUs per job on a scheduler target (Slurm --gpus, or --gres with gpu)"),
    "memory_gb": (_positive, "GB of memory per job on a scheduler target (Slurm --mem)"),
    "time_minutes": (_whole(1), "the scheduler's time limit in minutes (default: from hours)"),
    "partition": (_safe_value, "the Slurm partition or PBS queue, e.g. gpu"),
    "modules": (_modules, "environment modules to load first, e.g. [cuda/12.1]"),
    "container": (_safe_value, "an Apptainer/Singularity image to run the job in"),
}

RESOURCE_KEYS = ("cpus", "gpus", "memory_gb", "time_minutes", "partition", "modules", "container")


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, SCHEMA, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_project_file(project_dir: Path) -> tuple[dict[str, Any], dict[str, int], Path]:
    """The validated keys of gpu.yaml, the line of each key, and the file's path."""
    import yaml

    path = project_dir / PROJECT_FILE
    if not path.exists():
        return {}, {}, path
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc}", where=str(path)) from exc
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
            return {}, {}, path  # empty, only comments, or a bare `---`
        if not isinstance(node, yaml.MappingNode):
            raise UserError("must be a mapping of keys to values (key: value)",
                            where=f"{path}:{node.start_mark.line + 1}",
                            fix=f"allowed keys: {', '.join(SCHEMA)}")
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = loader.construct_object(key_node, deep=True)
            where = f"{path}:{line}"
            if not isinstance(key, str) or key not in SCHEMA:
                raise UserError(f"unknown key {key!r}{_did_you_mean(str(key))}", where=where,
                                fix=f"allowed keys: {', '.join(SCHEMA)}")
            if key in values:
                raise UserError(f"key {key!r} appears twice (first on line {lines[key]})", where=where)
            raw = loader.construct_object(value_node, deep=True)
            values[key] = _check(key, raw, where)
            lines[key] = line
            if key == "env":
                lines.update(_env_entry_lines(value_node))
        return values, lines, path
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"not valid YAML: {getattr(exc, 'problem', exc)}", where=where,
                        fix="check indentation and quoting") from exc
    finally:
        loader.dispose()


def _env_entry_lines(node: Any) -> dict[str, int]:
    """The line of each `env:` entry ("env:NAME" -> line), so a refusal points at it."""
    import yaml

    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            out[f"env:{key_node.value}"] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            if isinstance(item, yaml.ScalarNode):
                out[f"env:{str(item.value).partition('=')[0]}"] = item.start_mark.line + 1
    return out


def _check(key: str, raw: Any, where: str) -> Any:
    check, allowed = SCHEMA[key]
    try:
        return check(raw)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{key} must be {exc} (got {raw!r})", where=where,
                        fix=f"{key}: {allowed}") from None


def _argument(key: str) -> str:
    """How the command line spells the option for `key` (`--secret` is the one singular)."""
    return "argument --secret" if key == "secrets" else f"argument --{key.replace('_', '-')}"


def build_request(project_dir: str | Path, overrides: dict[str, Any]) -> JobRequest:
    """gpu.yaml merged with the caller's arguments (which win; lists add, env merges)."""
    project = Path(project_dir).expanduser()
    if not project.is_dir():
        raise UserError(f"project directory {project} does not exist",
                        fix="pass --project-dir with the folder that holds your script")
    project = project.resolve()
    values, lines, path = read_project_file(project)

    def where(key: str) -> str:
        return f"{path}:{lines[key]}" if key in lines else _argument(key)

    # where each data item and secret name came from, so an error blames the right one
    origin = {(key, item): where(key) for key in ("data", "secrets") for item in values.get(key, [])}
    env_origin: dict[str, str] = {}
    for key, raw in overrides.items():
        if raw is None or key not in SCHEMA:
            continue
        checked = _check(key, raw, _argument(key))
        if key in ("data", "secrets"):
            for item in checked:
                origin.setdefault((key, item), _argument(key))
        if key == "env":
            values["env"] = {**values.get("env", {}), **checked}
            env_origin.update(dict.fromkeys(checked, _argument(key)))
        elif key in ("include", "secrets"):
            values[key] = list(dict.fromkeys([*values.get(key, []), *checked]))
        elif key == "data":
            values["data"] = [*values.get("data", []), *checked]
        elif key in ("args",) and not checked and "args" in values:
            continue
        else:
            values[key] = checked
            lines.pop(key, None)

    data_specs: dict[str, DataSpec] = {}
    for item in values.pop("data", []):
        spec = DataSpec.parse(item, project, origin.get(("data", item), where("data")))
        data_specs[spec.name] = spec  # a later NAME (the argument) replaces the file's
    for name in values.get("secrets", []):
        if not ENV_NAME_RE.match(name):
            raise UserError(f"secret name {name!r} is not allowed",
                            where=origin.get(("secrets", name), where("secrets")),
                            fix="secret names are environment names like HF_TOKEN")
    _refuse_secret_env(values.get("env", {}), env_origin, lines, path)
    req = JobRequest(project_dir=str(project), data=list(data_specs.values()), **values)
    if not req.script:
        raise UserError("no script to run", where=str(path) if path.exists() else "gpu submit",
                        fix="pass the script (gpu submit train.py) or set `script:` in gpu.yaml")
    _check_script(req, project, where("script"))
    return req


def _refuse_secret_env(env: dict[str, str], origin: dict[str, str], lines: dict[str, int],
                       path: Path) -> None:
    """A secret-looking `env` entry is refused where it was written: gpu.yaml's file and the
    entry's line, or the --env argument."""
    from core.secrets.scan import check_env

    where = {name: origin.get(name) or f"{path}:{lines.get(f'env:{name}', lines.get('env', 0))}"
             for name in env}
    check_env(env, where)


def _check_script(req: JobRequest, project: Path, where: str) -> None:
    script = req.script or ""
    if is_python_file(script, project):
        if os.path.isabs(script):
            raise UserError(f"script {script!r} is an absolute path", where=where,
                            fix="give the script relative to the project directory")
        target = (project / script)
        if not target.is_file():
            raise UserError(f"script {script!r} does not exist in {project}", where=where,
                            fix="check the name, or pass --project-dir with the folder that holds it")
        inside = os.path.realpath(target)
        if os.path.commonpath([str(project), inside]) != str(project) and not _inside_git_root(project, inside):
            raise UserError(f"script {script!r} is outside the project", where=where,
                            fix="move it into the project directory")
    else:
        try:
            parts = shlex.split(script)
        except ValueError as exc:
            raise UserError(f"script {script!r} cannot be split like a shell would: {exc}",
                            where=where, fix="check the quotes") from None
        if not parts:
            raise UserError("script is empty", where=where, fix="name a script or a command line")


def _inside_git_root(project: Path, target: str) -> bool:
    from core.packaging.bundle import find_root

    root, _ = find_root(project)
    return os.path.commonpath([str(root), target]) == str(root)
