"""What a person is told about a bundle beside its file list: which paths the job names that
will not be there, and a hint only where something left out is something the job uses.

A hint printed under every bundle that left anything out (a `.venv/`, a `.pytest_cache/`) is
noise a newcomer learns to skip, so it then goes unread the one time it matters. Here the
hint is earned: a left-out folder or file is named only when the script's own text or its
arguments refer to it (a quoted path, an import, an argument), and it says what to do for that
path in particular.
"""

from __future__ import annotations

import ast
import itertools
import os
import posixpath
import re
import shlex
from pathlib import Path

from core.packaging.leftout import find_left_out

SOURCE_CAP = 1 << 20  # bytes of the script read to look for references
_EDGE = r"""["'/\\]"""  # a path in a script stands in quotes or between slashes


def _tokens(script: str, args: list[str], is_python: bool) -> list[tuple[str, str]]:
    """(label, path-like token) of the script and each argument, `--x=VALUE` as VALUE."""
    out: list[tuple[str, str]] = []
    if script and is_python:
        out.append(("script", script))
    elif script:
        try:
            out += [("script", t) for t in shlex.split(script)[1:]]
        except ValueError:
            pass
    for i, arg in enumerate(args):
        out.append((f"args[{i}]", arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg))
    return out


def ship_warnings(project: Path, project_rel: str, script: str, args: list[str], is_python: bool,
                  shipped: set[str]) -> list[str]:
    """Warn about the script or a path in args that exists here but will not ship."""
    prefix = f"{project_rel}/" if project_rel else ""
    warnings = []
    folders: set[str] | None = None
    for label, token in _tokens(script, args, is_python):
        if not token or token.startswith("-") or os.path.isabs(token) or "://" in token:
            continue
        local = project / token
        try:  # an argument is often no path at all: too long a name, a NUL, no permission
            is_dir = local.is_dir()
            if not is_dir and not local.exists():
                continue
        except (OSError, ValueError):
            continue
        rel = os.path.normpath(prefix + token).replace(os.sep, "/")
        if is_dir and folders is None:
            folders = _folders(shipped)
        if not _ships(rel, is_dir, shipped, folders):
            warnings.append(f"{label} {token!r} does not ship (git-ignored or withheld): "
                            f"add code with include, datasets with --data NAME={token}")
    return warnings


def _script_sources(project: Path, script: str, is_python: bool) -> list[tuple[str, str]]:
    """(name, text) of the files the job runs: the .py script, or the files a command line
    names that exist in the project (`bash jobs/run.sh`)."""
    names = [script] if is_python else [t for _, t in _tokens(script, [], False)]
    out = []
    for name in names:
        path = project / name
        try:
            if not path.is_file() or path.is_symlink():
                continue
            with open(path, "rb") as f:
                out.append((name, f.read(SOURCE_CAP).decode("utf-8", "replace")))
        except (OSError, ValueError):
            continue
    return out


_QUOTED = re.compile(r"""(?P<q>["'])(?P<path>[^"'\n\\{}]{1,255})(?P=q)""")
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(?P<a>[A-Za-z_][\w.]*)[ \t]+import|import[ \t]+(?P<b>[A-Za-z_][\w., \t]*))",
                     re.MULTILINE)
MAX_REFERENCES = 2000


def _references(text: str) -> list[str]:
    """Project-relative paths a script's text names: quoted relative paths, and the files or
    packages its imports would load from its own folder ("helpers" -> helpers.py, helpers/)."""
    out: list[str] = []
    for m in _QUOTED.finditer(text):
        path = m.group("path").strip()
        if path and not os.path.isabs(path) and "://" not in path and not path.startswith("-"):
            out.append(path.removeprefix("./").rstrip("/"))
        if len(out) >= MAX_REFERENCES:
            return out
    out += _joined_paths(text)[:MAX_REFERENCES - len(out)]
    for m in _IMPORT.finditer(text):
        names = [m.group("a")] if m.group("a") else re.split(r"[ \t]*,[ \t]*", m.group("b"))
        for name in names:
            name = name.split(" as ")[0].strip().split(" ")[0]
            if name and not name.startswith("."):
                module = name.split(".")[0]
                out += [module + ".py", module]
    return out[:MAX_REFERENCES]


JOINED_CAP = 16  # values one name or expression may stand for (a name set in many places)


def _joined_paths(text: str) -> list[str]:
    """Paths a Python script builds from string literals: `os.path.join('data', 'train.bin')`,
    `Path('data') / 'train.bin'`, `f"{data_dir}/train.bin"`, `'data/' + name`, also through
    names set to such values (`data_dir = os.path.join('data', dataset)` with
    `dataset = 'openwebtext'`: nanoGPT's way). A name set in several places stands for each
    of its values; anything not built from literals (a variable read from the arguments, a
    call) is left alone. Not Python, or too deep to parse: none."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: dict[str, set[str]] = {}
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
    for _ in range(3):  # a name built from a name set further down the file (rare): a few rounds
        for node in assigns:
            values = _values(node.value, names)
            if not values:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    have = names.setdefault(target.id, set())
                    have |= set(itertools.islice(values, JOINED_CAP - len(have)))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Call, ast.BinOp, ast.JoinedStr)):
            for value in _values(node, names):
                path = value.strip()
                if path and "/" in path and not os.path.isabs(path) and "://" not in path \
                        and not path.startswith("-") and len(path) <= 255:
                    out.append(posixpath.normpath(path).removeprefix("./"))
        if len(out) >= MAX_REFERENCES:
            break
    return out


_JOINERS = {"join", "Path", "PurePath", "PosixPath", "PurePosixPath"}


def _values(node: ast.AST, names: dict[str, set[str]]) -> set[str]:
    """The strings `node` stands for when built from literals and known names; empty if not."""
    if isinstance(node, ast.Constant):
        return {node.value} if isinstance(node.value, str) else set()
    if isinstance(node, ast.Name):
        return names.get(node.id, set())
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)):
        glue = posixpath.join if isinstance(node.op, ast.Div) else (lambda a, b: a + b)
        return _combine([node.left, node.right], names, glue)
    if isinstance(node, ast.JoinedStr):
        parts: list[ast.AST] = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                if part.format_spec is not None or part.conversion not in (-1, ord("s")):
                    return set()
                parts.append(part.value)
            else:
                parts.append(part)
        return _combine(parts, names, lambda a, b: a + b)
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "joinpath" and isinstance(func, ast.Attribute):
            return _combine([func.value, *node.args], names, posixpath.join)
        if name in ("str", "fspath") and len(node.args) == 1:
            return _values(node.args[0], names)
        if name in _JOINERS and node.args and not any(isinstance(a, ast.Starred) for a in node.args):
            if name == "join" and not _is_os_path(func):
                return set()  # "sep".join(...) and the like
            return _combine(node.args, names, posixpath.join)
    return set()


def _is_os_path(func: ast.AST) -> bool:
    """`os.path.join`, `path.join`, `posixpath.join`, `osp.join`: a path join, not str.join."""
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, (ast.Attribute, ast.Name)):
        return False
    owner = func.value.attr if isinstance(func.value, ast.Attribute) else func.value.id
    return owner in ("path", "posixpath", "osp", "ntpath")


def _combine(parts: list[ast.AST], names: dict[str, set[str]], glue) -> set[str]:
    out: set[str] = {""}
    first = True
    for part in parts:
        values = _values(part, names)
        if not values:
            return set()
        out = {v if first else glue(o, v) for o in out for v in values}
        out = set(itertools.islice(out, JOINED_CAP))
        first = False
    return out


def _row(rel: str, left_out: list[dict]) -> tuple[str, str]:
    """The report's row for `rel`: (its path, its reason), its own or the folder's holding it."""
    item = find_left_out(rel, left_out)
    if item is None:
        return rel, "left out"
    return str(item.get("path", "")) or rel, str(item.get("reason", "left out"))


def _advice(path: str, reason: str) -> str:
    name = path.rstrip("/")
    if "credential" in reason or "env template" in reason:
        return ("a credential never ships: keep its values in the keychain (`gpu secrets set "
                "NAME`) and list the names under `secrets:` in gpu.yaml")
    if reason.startswith("withheld"):
        return "it cannot ship as it is (see why): copy what the job needs into the project"
    if name.endswith(".py"):
        return f"ship it with `include: [{path}]` in gpu.yaml"
    base = os.path.basename(name) or name
    return (f"pass it as data (`--data {base}={name}`, read at gpu.data_dir()/{base}) or, if it "
            f"is code, ship it with `include: [{path}]`")


def left_out_hint(project: Path, project_rel: str, script: str, is_python: bool,
                  left_out: list[dict], shipped: set[str], outputs: list[str] = ()) -> str | None:
    """One sentence for each path the job's script refers to that exists here and did not
    ship, or None when there is none: the hint is said only where it applies.

    Paths under the job's declared `outputs` are what it writes, not what it reads."""
    if not script or not left_out:
        return None
    prefix = f"{project_rel}/" if project_rel else ""
    said: dict[str, str] = {}
    dirs = _folders(shipped)
    for source, text in _script_sources(project, script, is_python):
        for ref in dict.fromkeys(_references(text)):
            if any(_declared(ref, o) for o in outputs):
                continue
            local = project / ref
            try:
                is_dir = local.is_dir() and not local.is_symlink()
                if not is_dir and not os.path.lexists(local):
                    continue
            except (OSError, ValueError):
                continue
            rel = os.path.normpath(prefix + ref).replace(os.sep, "/")
            if rel in (".", "..") or rel.startswith("../") or _ships(rel, is_dir, shipped, dirs):
                continue
            row, reason = _row(rel, left_out)
            if row == "./" or not row.startswith(prefix) or len(row) <= len(prefix) or (
                    row.endswith("/") and row.rstrip("/") in dirs):
                row = rel  # the row is the project folder itself, or one that ships in part: name the path
            shown = row[len(prefix):]  # else the left-out folder holding it: the data set
            if shown not in said:
                said[shown] = (f"{source} refers to {shown}, which did not ship ({reason}): "
                               f"{_advice(shown, reason)}")
    return "; ".join(list(said.values())[:5]) or None


def _declared(ref: str, output: str) -> bool:
    folder = output.strip().removeprefix("./").rstrip("/")
    return bool(folder) and (ref == folder or ref.startswith(folder + "/"))


def _folders(shipped: set[str]) -> set[str]:
    """Every folder that holds a shipped file, so a folder question costs one look-up."""
    out: set[str] = set()
    for path in shipped:
        parent = posixpath.dirname(path)
        while parent and parent not in out:
            out.add(parent)
            parent = posixpath.dirname(parent)
    return out


def _ships(rel: str, is_dir: bool, shipped: set[str], folders: set[str] | None = None) -> bool:
    if is_dir:
        return rel in (folders if folders is not None else _folders(shipped))
    return rel in shipped
