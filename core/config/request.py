"""The request: `gpu.yaml` in the project root, overridden by the command's arguments.

Validated once, here. A bad file gets an error naming the file, line and key and what is
allowed; nothing downstream re-checks types.
"""

from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from core.config.gitroot import find_root
from core.config.limits import check_command_size
from core.config.schema import (
    ENV_NAME_RE,
    NAME_RE,
    RESOURCE_KEYS,
    SCHEMA,
    path_problem,
    split_gpu,
)
from core.errors import UserError, shorten
from core.secrets.scan import check_env, check_request_text

PROJECT_FILE = "gpu.yaml"
HF_RE = re.compile(r"^hf://datasets/(?P<owner>[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
                   r"/(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
                   r"(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._%-]{0,127}))?"
                   r"(?P<path>/[^\x00-\x1f\x7f\\]*)?\Z")
HF_FORM = "hf://datasets/OWNER/NAME[@REVISION][/PATH]"


def _stat_is(path: Path, kind: str) -> bool:
    """`path.exists()` / `is_file()` / `is_dir()` that answer False where the OS refuses to look."""
    try:
        return bool(getattr(path, kind)())
    except (OSError, ValueError):
        return False


def resolve_project(project_dir: str | Path, where: str = "argument --project-dir") -> Path:
    """The project folder, absolute; a clear error when it cannot be one."""
    text = os.fspath(project_dir)
    problem = path_problem(text)
    if problem:
        raise UserError(f"project directory {shorten(text)} {problem}", where=where,
                        fix="pass --project-dir with the folder that holds your script")
    project = Path(os.path.expanduser(text))
    if not _stat_is(project, "is_dir"):
        raise UserError(f"project directory {shorten(str(project))} does not exist", where=where,
                        fix="pass --project-dir with the folder that holds your script")
    return project.resolve()


# the Hub's own rules for OWNER and NAME (huggingface_hub's validate_repo_id): no `--` or `..`,
# and neither may end with `-` or `.`
_HF_ID_BAD = re.compile(r"--|\.\.|[-.]\Z")
# a revision is a branch, tag or commit; `/` inside one (refs/pr/1) is written %2F in the URI
_HF_REV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}\Z")


def parse_hf(uri: str) -> dict[str, str | None]:
    """The parts of an hf://datasets/ URI: owner, repo, revision (decoded, so `refs%2Fpr%2F1` is
    `refs/pr/1`) and path, None where absent. ValueError names the form when it is not one."""
    m = HF_RE.match(uri)
    path = (m.group("path") or "/")[1:] if m else ""
    path = path[:-1] if path.endswith("/") else path  # one trailing slash: a folder
    revision = urllib.parse.unquote(m.group("revision")) if m and m.group("revision") else None
    if (m is None or (path and any(part in ("", ".", "..") for part in path.split("/")))
            or any(_HF_ID_BAD.search(m.group(k)) for k in ("owner", "repo"))
            or (revision is not None and not _hf_revision_ok(revision))):
        raise ValueError(f"data {shorten(uri)} is not a URI of the form {HF_FORM}")
    return {"owner": m.group("owner"), "repo": m.group("repo"),
            "revision": revision, "path": path or None}


def _hf_revision_ok(revision: str) -> bool:
    """What git allows in a ref name, as far as a URI can tell (no `..`, `//`, `@{`, or a
    trailing `/`, `.` or `.lock`)."""
    return bool(_HF_REV_RE.match(revision)) and not (
        ".." in revision or "//" in revision or revision.endswith(("/", ".", ".lock")))


@dataclass
class DataSpec:
    """One data set: a local path (absolute once resolved) or an hf://datasets/ URI.

    An hf:// set is resolved at submit (`core.packaging.hfdata`): from then on it is a "path"
    (gpu-router's downloaded copy) whose `origin` is the URI pinned to its commit sha."""

    name: str
    source: str
    kind: str  # "path" or "hf"
    origin: str | None = None  # hf://datasets/OWNER/NAME@SHA[/PATH] of a resolved hf:// set

    @classmethod
    def parse(cls, text: str, project_dir: Path, where: str) -> "DataSpec":
        text = text.strip()
        name, sep, source = ("", "", text) if text.startswith("hf://") else text.partition("=")
        if not sep:  # a bare PATH or URI: the name is its last part
            source, name = text, ""
        elif not name.strip():
            raise UserError(f"data {shorten(text)} has an empty NAME", where=where,
                            fix="write it as NAME=PATH, e.g. corpus=data/corpus")
        if source.startswith("hf://"):
            try:
                parts = parse_hf(source)
            except ValueError as exc:
                raise UserError(str(exc), where=where, fix=f"write it as {HF_FORM}") from None
            name = name or (parts["path"] or "").rsplit("/", 1)[-1] or str(parts["repo"])
            kind = "hf"
        else:
            source, name = cls._local(text, source, name, project_dir, where)
            kind = "path"
        if not NAME_RE.match(name) or name in (".", ".."):
            raise UserError(f"data name {shorten(name)} is not allowed", where=where,
                            fix="use letters, digits, '.', '_' or '-', not . or .. (NAME=PATH)")
        return cls(name=name, source=source, kind=kind)

    @staticmethod
    def _local(text: str, source: str, name: str, project_dir: Path, where: str) -> tuple[str, str]:
        """(absolute path, name) of a local data set that exists."""
        fix = "give NAME=PATH with a path relative to the project or absolute"
        if not source.strip():
            raise UserError(f"data {shorten(text)} has no PATH", where=where, fix=fix)
        problem = path_problem(source)
        if problem:
            raise UserError(f"data {shorten(text)}: the path {problem}", where=where, fix=fix)
        path = Path(os.path.expanduser(source))
        path = path if path.is_absolute() else project_dir / path
        if not _stat_is(path, "exists"):
            raise UserError(f"data {shorten(text)}: {path} does not exist",
                            where=where, fix=fix)
        return str(path.resolve()), name or path.name


@dataclass
class JobRequest:
    project_dir: str
    script: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    not_secret: list[str] = field(default_factory=list)  # env names a person vouches for (plan, hold)
    include: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)  # pyproject.toml optional groups to install
    ship: str = "repo"
    outputs: list[str] = field(default_factory=list)
    checkpoint: str | None = None  # <workdir>/<checkpoint> is the job's ckpt/ (core/runtime/workdir.py)
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
    # the Modal image: built from this registry image (else Debian slim), with these pip
    # requirements installed besides the project's; only a modal target runs a job that sets them
    image: str | None = None
    packages: list[str] = field(default_factory=list)
    # what happens when a session ends or the job fails (core.engine.supervisor)
    network: bool = True  # False: the job runs with no network (the local sandbox has loopback only)
    restart: str = "never"  # "allow": a job with no checkpoint may start again from the top
    retry_on_exit_codes: list[int] = field(default_factory=list)
    max_retries: int = 1
    kill_rules: list[dict] = field(default_factory=list)  # core.config.killrules, as JSON
    # a sweep: the points (core.config.sweep) this request runs at, one job each, as one group
    sweep: list[dict] | None = None
    max_parallel: int | None = None  # a sweep's points running at once (None: the free slots)

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
    if project_dir is not None and _stat_is(project_dir / script, "is_file"):
        return True
    try:
        return len(shlex.split(script)) == 1
    except ValueError:
        return True



def _did_you_mean(key: str) -> str:
    import difflib  # only for a misspelt key: not on every submit's import path

    close = difflib.get_close_matches(key, SCHEMA, n=1) if len(key) <= 64 else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_project_file(project_dir: Path) -> tuple[dict[str, Any], dict[str, int], Path]:
    """The validated keys of gpu.yaml, the line of each key, and the file's path."""
    from core.config import yamlfile

    path = project_dir / PROJECT_FILE
    source = str(path)
    text = yamlfile.read_text(path)
    entries = [] if text is None else yamlfile.remembered(path, text, "project-file/1",
                                                          lambda t: _entries(t, source))
    return _checked(entries, source) + (path,)


def _checked(entries: list[list[Any]], source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The entries' keys and values checked against SCHEMA, in the file's order: (values, the
    line of each key and `env:` entry). Run on every read, remembered or not."""
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key, line, raw, env_lines in entries:  # no file, empty, only comments, `---`: none
        _check_key(key, f"{source}:{line}", lines)
        values[key] = _check(key, raw, f"{source}:{line}")
        lines[key] = line
        if key == "env":
            lines.update(env_lines)
    return values, lines


def _check_key(key: Any, where: str, seen: dict[str, int]) -> None:
    if not isinstance(key, str) or key not in SCHEMA:
        raise UserError(f"unknown key {shorten(key)}{_did_you_mean(str(key)[:65])}", where=where,
                        fix=f"allowed keys: {', '.join(SCHEMA)}")
    if key in seen:
        raise UserError(f"key {key!r} appears twice (first on line {seen[key]})", where=where)


def _entries(text: str, source: str) -> list[list[Any]]:
    """gpu.yaml's top-level entries as parsed: [key, line, value, the line of each `env:`
    entry] each (what yamlfile remembers for a text it has seen). Each entry is checked as it
    is built, so a file with several mistakes names the first one, as `_checked` would."""
    from core.config import safeyaml  # PyYAML only when the file's text is new

    node = safeyaml.compose(text, source)
    if node is None:
        return []
    if node.id != "mapping":
        raise UserError("must be a mapping of keys to values (key: value)",
                        where=f"{source}:{safeyaml.line_of(node)}",
                        fix=f"allowed keys: {', '.join(SCHEMA)}")
    entries: list[list[Any]] = []
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        key, line = safeyaml.construct(key_node, source), safeyaml.line_of(key_node)
        _check_key(key, f"{source}:{line}", seen)
        raw = safeyaml.construct(value_node, source)
        _check(key, raw, f"{source}:{line}")
        seen[key] = line
        entries.append([key, line, raw, _env_entry_lines(value_node) if key == "env" else {}])
    return entries


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
    except UserError as exc:  # a check with its own words (a sweep's): said where it was written
        raise UserError(exc.what, where=where, fix=exc.fix) from None
    except (TypeError, ValueError) as exc:
        raise UserError(f"{key} must be {exc} (got {shorten(raw)})", where=where,
                        fix=f"{key}: {allowed}") from None


def _cli_argument(key: str) -> str:
    """How the command line spells the option for `key` (`--secret`, `--output` are singular)."""
    special = {"secrets": "argument --secret", "outputs": "argument --output", "script": "argument SCRIPT",
               "not_secret": "argument --not-secret",
               "args": "arguments after --"}
    return special.get(key, f"argument --{key.replace('_', '-')}")


def build_request(project_dir: str | Path, overrides: dict[str, Any], *,
                  argument: Callable[[str], str] | None = None,
                  command: str = "gpu submit") -> JobRequest:
    """gpu.yaml merged with the caller's arguments (which win; lists add, env merges).

    Every front (the CLI, the dashboard, the MCP server) builds its request here: each value
    passes its SCHEMA check, and the finished request `_check_request`, so nothing downstream
    meets a value a job could not start with. `argument(key)` says where a bad argument came
    from in the front's own words ("argument --hours", "gpu_submit argument hours"); `command`
    is the one its errors name (`gpu plan` says `gpu plan`; a tool's name, `gpu_submit`, for MCP).
    """
    _argument = argument or _cli_argument
    project = resolve_project(project_dir, _argument("project_dir"))
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
        elif key in ("include", "secrets", "not_secret", "outputs", "packages"):
            values[key] = list(dict.fromkeys([*values.get(key, []), *checked]))
        elif key == "data":
            values["data"] = [*values.get("data", []), *checked]
        elif key in ("args",) and not checked and "args" in values:
            continue
        else:
            values[key] = checked
            lines.pop(key, None)

    # a token in args, the script line, a name, a path or a sweep's values would be stored with
    # the job and printed in its plan: refused as in env, where it was set
    check_request_text(values, where)
    data_specs: dict[str, DataSpec] = {}
    for item in values.pop("data", []):
        spec = DataSpec.parse(item, project, origin.get(("data", item), where("data")))
        data_specs[spec.name] = spec  # a later NAME (the argument) replaces the file's
    for name in values.get("secrets", []):
        if not ENV_NAME_RE.match(name) or len(name) > 128:
            raise UserError(f"secret name {shorten(name)} is not allowed",
                            where=origin.get(("secrets", name), where("secrets")),
                            fix="secret names are environment names like HF_TOKEN")
    _refuse_secret_env(values.get("env", {}), env_origin, lines, path, values.get("not_secret", []), where)
    _split_gpu_count(values, lines, where)
    req = JobRequest(project_dir=str(project), data=list(data_specs.values()), **values)
    if not req.script:
        example = f"{command} train.py" if " " in command else f'{command}(script="train.py")'
        raise UserError("no script to run", where=str(path) if _stat_is(path, "exists") else command,
                        fix=f"pass the script ({example}) or set `script:` in {project / PROJECT_FILE}")
    if req.sweep:
        from core.config.sweep import check_clash

        check_clash(req.sweep, req.env, where("sweep"))
    _check_script(req, project, where("script"))
    check_command_size(req, where("args") if req.args else where("env"))
    if req.sweep:  # each point's final args and env, as if written whole (issue 36)
        from core.config.sweep import check_points

        check_points(req, where("sweep"))
    return req


def _split_gpu_count(values: dict[str, Any], lines: dict[str, int], where: Callable[[str], str]) -> None:
    """`gpu: H100:4` (Modal's spelling) is `gpu: H100` with `gpus: 4`. An argument wins over the
    file, as everywhere: `--gpu H100:4` over the file's `gpus: 2`, and an argument `gpus` over the
    count in the file's `gpu`; the two written in one place must agree."""
    kind, count = split_gpu(values.get("gpu") or "")
    if count is None:
        return
    values["gpu"] = kind
    gpus = values.get("gpus")
    if gpus is None or gpus == count or (("gpu" in lines) != ("gpus" in lines)):
        if gpus is None or "gpus" in lines:  # the count in gpu, unless an argument gave gpus
            values["gpus"] = count
        return
    raise UserError(f"gpu {kind}:{count} asks for {count} GPUs and gpus for {gpus}", where=where("gpus"),
                    fix=f"give the count once: gpu: {kind}:{count}, or gpu: {kind} with gpus: {gpus}")


def _refuse_secret_env(env: dict[str, str], origin: dict[str, str], lines: dict[str, int],
                       path: Path, not_secret: list[str], where_key: Callable[[str], str]) -> None:
    """A secret-looking `env` entry is refused where it was written: gpu.yaml's file and the
    entry's line, or the --env argument; unless a person named it in `not_secret`, which must
    name entries of env (a name vouched for and not passed is a slip, said at once)."""
    for name in not_secret:
        if not ENV_NAME_RE.match(name) or len(name) > 128:
            raise UserError(f"not_secret name {shorten(name)} is not an environment name",
                            where=where_key("not_secret"), fix="name env entries, like MAX_TOKENS")
        if name not in env:
            raise UserError(f"not_secret names {name}, which is not an env entry", where=where_key("not_secret"),
                            fix=f"pass it with --env {name}=VALUE (or under env: in gpu.yaml), or leave "
                                f"it out of not_secret")
    where = {name: origin.get(name) or f"{path}:{lines.get(f'env:{name}', lines.get('env', 0))}"
             for name in env}
    check_env(env, where, plain=set(not_secret))


def _check_script(req: JobRequest, project: Path, where: str) -> None:
    script = req.script or ""
    if is_python_file(script, project):
        if os.path.isabs(script):
            raise UserError(f"script {shorten(script)} is an absolute path", where=where,
                            fix="give the script relative to the project directory")
        problem = path_problem(script)
        if problem:
            raise UserError(f"script {shorten(script)} {problem}", where=where,
                            fix="check the name of the script")
        target = (project / script)
        if not _stat_is(target, "is_file"):
            raise UserError(f"script {shorten(script)} does not exist in {project}", where=where,
                            fix="check the name, or pass --project-dir with the folder that holds it")
        inside = os.path.realpath(target)
        outside = os.path.commonpath([str(project), inside]) != str(project)
        if outside and (req.ship == "project" or not _inside_git_root(project, inside)):
            raise UserError(f"script {shorten(script)} is outside the project", where=where,
                            fix="move it into the project directory")
    else:
        try:
            parts = shlex.split(script)
        except ValueError as exc:
            raise UserError(f"script {shorten(script)} cannot be split like a shell would: {exc}",
                            where=where, fix="check the quotes") from None
        if not parts:
            raise UserError("script is empty", where=where, fix="name a script or a command line")


def _inside_git_root(project: Path, target: str) -> bool:
    root, _ = find_root(project)
    return os.path.commonpath([str(root), target]) == str(root)
