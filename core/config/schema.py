"""What gpu.yaml and a submit's arguments may hold: each key's checker and its one-line help.

`SCHEMA` maps a key to (checker, allowed); a checker takes what a front gave (a YAML value, an
argument, JSON) and returns the value the request holds, or raises TypeError/ValueError with the
words that finish "KEY must be ...". The limits here are what a job could start with; the request
itself (core.config.request) merges the file and the arguments and checks the whole.
docs/reference/configuration.md is generated from `SCHEMA` (docs/gen_reference.py).
"""

from __future__ import annotations

import math
import os
import re
import shlex
from typing import Any, Callable

from core.config import killrules
from core.config.limits import MAX_COMMAND_BYTES, MAX_ITEM_BYTES, text_bytes  # noqa: F401 (read from here too)
from core.errors import shorten

# `\Z`, not `$`: `$` also matches before a final newline, which would let "gpu\n" through
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
GPU_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}\Z")
# `TYPE:COUNT`, Modal's own spelling of several GPUs of one type (H100:4): gpu and gpus at once
GPU_COUNT_RE = re.compile(r"^(?P<type>[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}):(?P<count>[0-9]{1,6})\Z")
MAX_GPUS = 1000  # GPUs per job: past this a count is a typo (a target says how many it has)
# An OCI image reference, as `docker pull` and modal.Image.from_registry take it (the grammar of
# github.com/distribution/reference): [HOST[:PORT]/]PATH[:TAG][@DIGEST], the path in lower case
_IMAGE_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(rf"^(?:{_IMAGE_DOMAIN}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
                      r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                      r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z")
MAX_IMAGE_NAME = 255  # the reference's name part (before the tag), as the grammar caps it

# what a request may hold: past these a job could never start (the kernel's limits on file
# names and on a process's arguments) or the number is a typo (a 10 000-hour estimate)
MAX_HOURS = 720.0
MAX_WAIT_S = 3600.0
MAX_VRAM_GB = 1_000_000.0  # far past any GPU: a smaller typo is for the router to refuse
MAX_ITEMS = 1000  # entries in one list (include, secrets, data, modules)
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_REQUEST_ID = 128
SHIP_SCOPES = ("repo", "project")  # what a bundle holds: the git repository, or the folder only


def path_problem(text: str) -> str | None:
    """Why `text` can name no file on any system gpu-router runs on; None when it might."""
    try:
        size = text_bytes(text)
    except ValueError as exc:
        return f"is not a path: it must be {exc}"
    if size > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    if any(len(part) > MAX_NAME_BYTES for part in os.fsencode(text).split(b"/")):
        return f"has a part longer than {MAX_NAME_BYTES} bytes, the most a file name can have"
    return None





def _str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise TypeError("a non-empty string")
    text_bytes(v)
    return v


def _item_text(x: Any) -> str:
    """A list item as text: strings, and numbers a YAML file or JSON may give instead."""
    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
        raise TypeError("a list of strings")
    if isinstance(x, int) and x.bit_length() > 200:
        raise ValueError("a list of strings (a number that long is not allowed)")
    return x if isinstance(x, str) else str(x)


def _str_list(v: Any) -> list[str]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list):
        raise TypeError("a list of strings")
    if len(items) > MAX_ITEMS:
        raise ValueError(f"a list of at most {MAX_ITEMS} entries (it has {len(items)})")
    out = [_item_text(x) for x in items]
    for i, item in enumerate(out):
        _bounded_text(item, f"entry {i}")
    return out


def _bounded_text(text: str, what: str) -> int:
    """The size of one argument-like string; ValueError naming `what` when it cannot be one."""
    try:
        size = text_bytes(text)
    except ValueError as exc:
        raise ValueError(f"{exc} ({what} is not)") from None
    if size > MAX_ITEM_BYTES:
        raise ValueError(f"at most {MAX_ITEM_BYTES // 1024} KiB per entry ({what} has {size} bytes)")
    return size


def _script(v: Any) -> str:
    v = _str(v)
    _bounded_text(v, "the script line")
    return v


def _args(v: Any) -> list[str]:
    if isinstance(v, str):
        if len(v) > MAX_COMMAND_BYTES:
            raise ValueError(f"at most {MAX_COMMAND_BYTES // 1024} KiB of arguments")
        try:
            v = shlex.split(v)
        except ValueError as exc:
            raise ValueError(f"a list of strings, or one line a shell can split ({exc})") from None
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
    if len(v) > MAX_ITEMS:
        raise ValueError(f"at most {MAX_ITEMS} variables (it has {len(v)})")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str) or not ENV_NAME_RE.match(k):
            raise TypeError(f"environment names like MY_VAR (got {shorten(k)})")
        if k.upper().startswith("GPU_ROUTER_"):  # the launcher reads its folders from these
            raise ValueError(f"{k}: names starting GPU_ROUTER_ are gpu-router's own (it sets them "
                             "for the job: gpu.output_dir() and the like read them)")
        if isinstance(val, (dict, list)) or val is None:
            raise TypeError(f"a string value for {k}")
        out[k] = str(val).lower() if isinstance(val, bool) else _item_text(val)
        _bounded_text(f"{k}={out[k]}", k)
    return out


def _data(v: Any) -> list[str]:
    if isinstance(v, dict):
        v = [f"{_item_text(k)}={_item_text(val)}" for k, val in v.items()]
    return _str_list(v)


def _paths(v: Any) -> list[str]:
    items = _str_list(v)
    for item in items:
        problem = path_problem(item)
        if problem:
            raise ValueError(f"globs of paths ({shorten(item)} {problem})")
    return items


def _relative_globs(v: Any) -> list[str]:
    """Paths or globs inside the job's folder: never absolute, never climbing out with `..`."""
    items = _paths(v)
    for item in items:
        parts = item.replace("\\", "/").split("/")
        if item.startswith(("/", "~")) or ".." in parts or not item.strip("/."):
            raise ValueError(f"paths inside the job's folder ({shorten(item)} is not)")
    return items


def _relative_folder(v: Any) -> str:
    """One folder inside the job's working folder (the checkpoint folder): never absolute,
    never climbing out with `..`, no glob, and not the working folder itself."""
    item = _str(v)
    problem = path_problem(item)
    parts = [p for p in item.replace("\\", "/").split("/") if p not in ("", ".")]
    if problem:
        raise ValueError(f"a folder path ({shorten(item)} {problem})")
    if item.startswith(("/", "~")) or ".." in parts or not parts or any(c in item for c in "*?["):
        raise ValueError(f"a folder inside the job's working folder, e.g. checkpoints "
                         f"({shorten(item)} is not)")
    return "/".join(parts)


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("a number")
    try:
        return float(v)
    except OverflowError:
        return math.inf


def _positive(most: float) -> Callable[[Any], float]:
    def check(v: Any) -> float:
        n = _number(v)
        if not (0 < n <= most):  # also refuses NaN
            raise ValueError(f"a finite number above 0 and at most {most:.12g}")
        return n
    return check


def _ship(v: Any) -> str:
    v = _str(v)
    if v not in SHIP_SCOPES:
        raise ValueError("`repo` (the whole git repository holding the project, the default) or "
                         "`project` (only the project's own folder)")
    return v


def _non_negative(most: float) -> Callable[[Any], float]:
    def check(v: Any) -> float:
        n = _number(v)
        if not (0 <= n <= most):
            raise ValueError(f"a finite number of 0 or more and at most {most:.12g}")
        return n
    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("true or false")
    return v


def _name(v: Any) -> str:
    v = _str(v)
    if not NAME_RE.match(v):
        raise ValueError("letters, digits, '.', '_' or '-' (at most 64)")
    return v


def _gpu(v: Any) -> str:
    """A GPU type (T4), or a type and a count (H100:4): the request splits the count off into
    `gpus` (core.config.request)."""
    v = _str(v)
    counted = GPU_COUNT_RE.match(v)
    if counted and not 1 <= int(counted["count"]) <= MAX_GPUS:
        raise ValueError(f"a GPU type with a count from 1 to {MAX_GPUS} after the colon, e.g. "
                         f"{counted['type']}:1 or {counted['type']}:4")
    if not (counted or GPU_RE.match(v)):
        raise ValueError("a GPU type of letters, digits, spaces and . _ + - (at most 64), e.g. T4, "
                         "or a type and a count, e.g. H100:4")
    return v


def split_gpu(text: str) -> tuple[str, int | None]:
    """`H100:4` -> ("H100", 4); `T4` -> ("T4", None). `text` passed `_gpu`."""
    counted = GPU_COUNT_RE.match(text)
    return (counted["type"], int(counted["count"])) if counted else (text, None)


def _image(v: Any) -> str:
    v = _str(v)
    head, colon, tail = v.split("@", 1)[0].rpartition(":")
    name = head if colon and "/" not in tail else v.split("@", 1)[0]  # without its tag
    if not IMAGE_RE.match(v) or len(name) > MAX_IMAGE_NAME:
        raise ValueError("an image reference as `docker pull` takes it: [REGISTRY/]NAME[:TAG][@DIGEST], "
                         "the name in lower case, e.g. python:3.11-slim or nvcr.io/nvidia/pytorch:24.01-py3")
    return v


def _packages(v: Any) -> list[str]:
    """pip requirement strings (PEP 508: `torch==2.3.1`, `transformers>=4.40`, `pkg[extra]`);
    no pip options, paths or files: they are installed while the image is built."""
    from packaging.requirements import InvalidRequirement, Requirement

    items = _str_list(v)
    for item in items:
        try:
            url = Requirement(item).url or ""
        except InvalidRequirement:
            raise ValueError(f"a list of pip requirements like torch==2.3.1 or transformers>=4.40 "
                             f"({shorten(item)} is not one; options, paths and -r files belong in "
                             f"requirements.txt)") from None
        if url.lower().startswith("file:"):
            raise ValueError(f"a list of pip requirements from an index or a URL ({shorten(item)} names "
                             "a file on this machine, which the image build cannot reach)")
    return list(dict.fromkeys(items))


def _whole(least: int, most: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("a whole number")
        if not least <= v <= most:
            raise ValueError(f"a whole number from {least} to {most}")
        return v
    return check


# scheduler values land in batch-script directives: no spaces, quotes or newlines
SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9._:/@,+=%-]{1,200}\Z")


def _safe_value(v: Any) -> str:
    v = _str(v)
    if not SAFE_VALUE_RE.match(v):
        raise ValueError("letters, digits and . _ - : / @ , + = % only (no spaces or quotes)")
    return v


def _modules(v: Any) -> list[str]:
    items = _str_list(v)
    for item in items:
        if not SAFE_VALUE_RE.match(item):
            raise ValueError(f"module names like cuda/12.1 (got {shorten(item)})")
    return items


def _request_id(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):  # `request_id: 42` in YAML
        v = str(v) if v.bit_length() < 400 else "x" * (MAX_REQUEST_ID + 1)
    v = _str(v)
    if len(v) > MAX_REQUEST_ID or not v.isprintable():
        raise ValueError(f"printable text of at most {MAX_REQUEST_ID} characters")
    return v


def _restart(v: Any) -> str:
    if v not in ("allow", "never"):
        raise ValueError("allow (a job with no checkpoint may start again from the beginning "
                         "when it moves) or never")
    return v


MAX_RETRY_CODES = 10


def _exit_codes(v: Any) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or len(v) > MAX_RETRY_CODES or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in v):
        raise ValueError(f"a list of at most {MAX_RETRY_CODES} exit codes from 1 to 255, e.g. [75]")
    return sorted(set(v))


EXTRA_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?\Z")  # PEP 685's names


def _extras(v: Any) -> list[str]:
    out = _str_list(v)
    for item in out:
        if not EXTRA_RE.match(item):
            raise ValueError(f"a list of optional-group names like train or gpu ({shorten(item)} is not one)")
    return list(dict.fromkeys(out))


def _kill_rules(v: Any) -> list[dict]:
    return killrules.to_json(killrules.parse(v))


def _sweep(v: Any) -> list[dict]:
    from core.config import sweep  # the one parser of every form a sweep is written in

    return sweep.points(v)


SCHEMA: dict[str, tuple[Callable[[Any], Any], str]] = {
    "script": (_script, "the script to run, e.g. train.py, or a command line like `bash run.sh`"),
    "args": (_args, "arguments for the script, a list of strings"),
    "env": (_env, "non-secret environment variables, NAME: value"),
    "secrets": (_str_list, "names of keychain secrets the job reads"),
    "not_secret": (_str_list, "names of env entries you vouch are not secrets, passed as written "
                              "where the secret check would refuse them (never a vendor token or a "
                              "key block); shown in the plan, and an agent's job that uses it is "
                              "held for you"),
    "include": (_paths, "globs of git-ignored code that must ship"),
    "extras": (_extras, "optional dependency groups of pyproject.toml to install too, e.g. [train] "
                        "([project.optional-dependencies]; pyproject.toml is then what is read)"),
    "ship": (_ship, "what ships: repo (the whole git repository, the default) or project (only this folder)"),
    "outputs": (_relative_globs, "paths or globs, relative to the job's folder, that come home to runs/<id>/ "
                                 "(e.g. outputs/ or models/*.pkl)"),
    "checkpoint": (_relative_folder, "the folder, relative to the job's working folder, where the "
                                     "script keeps its checkpoints (e.g. checkpoints): it is the job's "
                                     "gpu.checkpoint_dir(), so it is mirrored home while the job runs "
                                     "and restored when it resumes or moves (docs/checkpoints.md)"),
    "data": (_data, "data sets, NAME=PATH or hf://datasets/OWNER/NAME"),
    "hours": (_positive(MAX_HOURS), f"an honest wall-clock estimate in hours, above 0, at most {MAX_HOURS:g}"),
    "gpu": (_gpu, "a GPU type, e.g. T4; TYPE:COUNT asks for several of one type, e.g. H100:4 "
                  "(Modal's spelling; the same as gpu: H100 with gpus: 4)"),
    "vram_gb": (_positive(MAX_VRAM_GB), "GB of GPU memory needed, above 0"),
    "provider": (_name, "a target kind (local, ssh, slurm, pbs, kaggle, modal; colab is refused with "
                         "the way to attach one) or a target name, e.g. kaggle or kg: a name wins, "
                         "and among several targets of a kind gpu-router chooses, saying why"),
    "name": (_name, "a short job name"),
    "request_id": (_request_id, f"an id that makes the submit idempotent (at most {MAX_REQUEST_ID} characters)"),
    "smoke": (_bool, "true for a quick smoke test"),
    "wait_s": (_non_negative(MAX_WAIT_S), f"seconds to wait for the job to be placed (0 to {MAX_WAIT_S:g})"),
    "verbose": (_bool, "true for full documents"),
    "cpus": (_whole(1, 10_000), "CPU cores per job on a scheduler target (Slurm --cpus-per-task)"),
    "gpus": (_whole(0, MAX_GPUS), "GPUs per job: Modal gives 1 to 8 of one type (A10G: 4); a Slurm "
                                  "or PBS target is asked for them (--gpus, or --gres with gpu); a local "
                                  "or ssh target must have that many (gpu: H100:4 says type and count)"),
    "memory_gb": (_positive(1_000_000), "GB of memory per job on a scheduler target (Slurm --mem)"),
    "time_minutes": (_whole(1, int(MAX_HOURS * 60)), "the scheduler's time limit in minutes (default: from hours)"),
    "partition": (_safe_value, "the Slurm partition or PBS queue, e.g. gpu"),
    "modules": (_modules, "environment modules to load first, e.g. [cuda/12.1]"),
    "container": (_safe_value, "an Apptainer/Singularity image to run the job in"),
    "image": (_image, "a registry image the Modal image is built from, e.g. python:3.11-slim or "
                      "nvcr.io/nvidia/pytorch:24.01-py3 (it must have Python 3.10+ and pip); only a "
                      "modal target runs a job that sets it"),
    "packages": (_packages, "pip requirements installed into the Modal image besides requirements.txt "
                            "or pyproject.toml's, e.g. [torch==2.3.1, einops]; only a modal target "
                            "runs a job that sets it (elsewhere: list them in requirements.txt)"),
    "network": (_bool, "false to run the job with no network (loopback only) where the target can "
                       "(the local sandbox); true, the default, leaves it on"),
    "restart": (_restart, "allow or never (the default): whether a job that moves to another target "
                          "with no checkpoint at home starts again from the beginning"),
    "retry_on_exit_codes": (_exit_codes, "exit codes that mean 'try again', e.g. [75]; any other "
                                         "non-zero exit fails the job"),
    "max_retries": (_whole(1, 3), "how many times a listed exit code is retried (1 to 3, default 1)"),
    "sweep": (_sweep, "run the job at many points as one group, approved once: a mapping KEY: "
                      "[values] (the grid of every combination) or a list of mappings (the "
                      "points); each run gets its values as environment variables, gpu.params() "
                      "and {KEY} in args (docs/sweeps.md)"),
    "max_parallel": (_whole(1, 1000), "a sweep's points that run at once (default: as many as "
                                      "the targets' free slots allow)"),
    "kill_rules": (_kill_rules, "rules that stop the job, added to your own: nan_metric, "
                                "no_improvement, gpu_util_below, over_budget (docs/checkpoints.md)"),
}

RESOURCE_KEYS = ("cpus", "gpus", "memory_gb", "time_minutes", "partition", "modules", "container")
