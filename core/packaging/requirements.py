"""The project's dependencies, read once, the way pip reads them, for every target.

One reader serves the local target, the SSH/Slurm/PBS hosts, Kaggle and Modal, and the check at
submit: it takes the project's files through a small interface (`ProjectFiles`: a folder's
shipped listing at submit, the bundle tar at launch), so every target installs the same thing and
an error shows at submit, before anything is uploaded.

What it reads, in this order: `pyproject.toml` when the request names `extras` (the optional
groups are its), else `requirements.txt`, else `pyproject.toml` `[project] dependencies`; all
in the job's working folder. A requirements file is read as pip reads it:

- lines joined at a trailing backslash, `#` comments dropped (at a line's start or after space);
- `-r FILE` / `--requirement` and `-c FILE` / `--constraint` relative to the file that names
  them (pip's rule), nested to any depth, flattened here; a file outside the bundle, one that
  does not ship (git-ignored, withheld as a credential) or a cycle is refused with the reason;
  a requirements file from a URL is refused (its content would change what is installed with
  nothing here to notice);
- index options (`--index-url`, `--extra-index-url`, `--no-index`, `--find-links`,
  `--trusted-host`, `--pre`, `--prefer-binary`, `--only-binary`, `--no-binary`,
  `--require-hashes`, `--use-feature`) kept as lines, in order, so pip applies them on the
  target as it would have here (the last `--index-url` wins); a `--find-links` folder is
  resolved against the file that names it, as pip does;
- a requirement is checked with `packaging` and kept as written: environment markers are pip's
  to judge on the target (its Python, its platform), `--hash` options stay on their line;
- a local path (`.`, `./pkg`, `wheels/x.whl`, `file:` URLs) is relative to the job's working
  folder, where pip runs (pip's rule for paths, unlike `-r`); it must ship, and its files are
  part of the hash. `-e PATH` is installed as a regular install: the environment is cached and
  shared by every job with the same dependencies, so an editable install would point into one
  job's folder. `-e git+URL` stays editable (it clones into the environment itself);
- `${NAME}` is left for pip, which fills it in on the target from the job's environment (a
  keychain secret named under `secrets:`); a URL with a written-out password is refused like a
  secret (core.packaging.credentials.url_credential, the one judge).

The result's `hash` covers everything that changes what gets installed (the flattened lines and
the content of local paths), not comments, spacing or file names; a target adds its Python.

How the project's files are seen is depfiles.py; the look at the index at submit, depcheck.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import re
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

# optparse, tarfile, tomllib and `packaging` are imported inside the functions that use them:
# a submit whose project declares no requirements never needs them, and importing them costs
# about 10 ms of every `gpu submit` (bench/submit_latency.py).
if TYPE_CHECKING:
    import optparse

from core.errors import UserError
from core.packaging.credentials import url_credential
from core.packaging.depfiles import BundleFiles

REQUIREMENTS = "requirements.txt"
PYPROJECT = "pyproject.toml"
MAX_FILES = 200  # nested requirement files in one project: past this it is a loop in disguise

_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's COMMENT_RE
_SCHEME = re.compile(r"^(?:http|https|file|ftp)://", re.I)  # a requirements file pip would fetch
_VCS = re.compile(r"^(?:git|hg|svn|bzr)\+", re.I)
_FILE_URL = re.compile(r"^\s*file:", re.I)  # a path on this machine, however many slashes follow
_ARCHIVE = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar")
_SECRET_FIX = ("keep the password out of the project: write the URL as https://USER:${PIP_PASSWORD}@HOST/..., "
               "store the value with `gpu secrets set PIP_PASSWORD` and name it under `secrets:` in gpu.yaml "
               "(pip fills it in on the target), or set PIP_INDEX_URL in the target machine's environment")


class ProjectFiles(Protocol):
    """The project as the reader sees it: paths are relative to the bundle's root, `/`-separated."""

    def read(self, rel: str) -> bytes | None:
        """A regular file's bytes (a link inside the bundle followed), or None: not there."""

    def files_under(self, rel: str) -> list[str]:
        """The regular files at or below `rel`, sorted (a local path requirement's content)."""

    def missing_reason(self, rel: str) -> str | None:
        """Why `rel` does not ship, when it exists but was left out (git-ignored, withheld)."""

    def digest(self, rel: str) -> bytes:
        """sha256 of the regular file `rel` (one of files_under's answers)."""


@dataclass
class Dependencies:
    """What a target installs: the flattened lines and the hash that names the environment."""

    source: str  # the file read first, relative to the bundle's root
    requirements: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # pip's option lines, in order
    files: list[str] = field(default_factory=list)  # every requirements/constraints file read
    notes: list[str] = field(default_factory=list)  # what the launcher tells the job's log
    local: dict[str, str] = field(default_factory=dict)  # local path -> hash of its content
    hash: str = ""

    def spec(self) -> dict:
        """The launcher's `deps` keys this reader owns (core/runtime/venvbuild.py reads them)."""
        return {"requirements": self.requirements, "constraints": self.constraints,
                "options": self.options, "file": self.source, "notes": self.notes}


# -- reading -------------------------------------------------------------------------------


@functools.cache
def _parser_once() -> optparse.OptionParser:
    """The one parser, built on the first requirement file read (not at import)."""
    return _parser()


def _parser() -> optparse.OptionParser:
    """pip's requirements-file options (pip/_internal/req/req_file.py SUPPORTED_OPTIONS and
    SUPPORTED_OPTIONS_REQ), with optparse as pip uses it: `--opt=V`, `--opt V`, `-iV` and
    unambiguous long prefixes all mean what they mean to pip."""
    import optparse

    p = optparse.OptionParser(add_help_option=False)

    def err(msg: str):  # optparse exits on an error; pip turns that into its own error too
        raise ValueError(msg)

    p.error = err  # type: ignore[method-assign]
    for flags, kw in (
        (("-i", "--index-url"), {}), (("--extra-index-url",), {"action": "append"}),
        (("--no-index",), {"action": "store_true"}), (("-c", "--constraint"), {"action": "append"}),
        (("-r", "--requirement"), {"action": "append"}), (("-e", "--editable"), {"action": "append"}),
        (("-f", "--find-links"), {"action": "append"}), (("--no-binary",), {"action": "append"}),
        (("--only-binary",), {"action": "append"}), (("--prefer-binary",), {"action": "store_true"}),
        (("--require-hashes",), {"action": "store_true"}), (("--pre",), {"action": "store_true"}),
        (("--trusted-host",), {"action": "append"}), (("--use-feature",), {"action": "append"}),
        (("--global-option",), {"action": "append"}), (("--hash",), {"action": "append"}),
        (("--config-settings",), {"action": "append"}),
    ):
        p.add_option(*flags, dest=flags[-1].lstrip("-").replace("-", "_"), **kw)
    return p




def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """pip's preprocess without the env expansion: join at `\\`, drop comments and blanks."""
    joined: list[str] = []
    first = 0
    out: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if joined:
                joined.append(line)
                out.append((first, "".join(joined)))
                joined = []
            else:
                out.append((number, line))
        else:
            if not joined:
                first = number
            joined.append(line.strip("\\"))
    if joined:
        out.append((first, "".join(joined)))
    for number, line in out:
        line = _COMMENT.sub("", line).strip()
        if line:
            yield number, line


def _split(line: str) -> tuple[str, str]:
    """pip's break_args_options: the requirement is everything before the first `-` token."""
    words = line.split(" ")
    for i, word in enumerate(words):
        if word.startswith("-"):
            return " ".join(words[:i]), " ".join(words[i:])
    return line, ""


def _outside(rel: str) -> bool:
    return rel == ".." or rel.startswith("../") or rel.startswith("/")


class _Reader:
    def __init__(self, files: ProjectFiles, workdir: str) -> None:
        self.files = files
        self.workdir = workdir
        self.deps = Dependencies(source="")
        self.stack: list[str] = []

    def where(self, rel: str, number: int | None = None) -> str:
        return f"{rel}:{number}" if number else rel

    def refuse_url(self, value: str, rel: str, number: int) -> None:
        what = url_credential(value)
        if what:
            raise UserError(f"refused: {what} in the project's dependencies (it would ship with the "
                            "code and show in pip's output)", where=self.where(rel, number), fix=_SECRET_FIX)

    def read_text(self, rel: str, named_by: str | None) -> str:
        data = self.files.read(rel)
        if data is None:
            why = self.files.missing_reason(rel)
            said = f"it names {rel}" if named_by else rel
            if why:
                raise UserError(f"{said}, which does not ship ({why})", where=named_by,
                                fix="a credential never ships: see the reason; a git-ignored file ships "
                                    "when you add it to `include:` in gpu.yaml")
            raise UserError(f"{said}, which is not in the project", where=named_by,
                            fix="add the file, or take the line out")
        return data.decode("utf-8", errors="replace")

    def read_file(self, rel: str, constraint: bool, named_by: str | None) -> None:
        if rel in self.stack:
            chain = " -> ".join([*self.stack[self.stack.index(rel):], rel])
            raise UserError(f"requirement files name each other in a loop: {chain}", where=named_by,
                            fix="take out the -r/-c line that closes the loop")
        if len(self.deps.files) >= MAX_FILES:
            raise UserError(f"more than {MAX_FILES} nested requirement files", where=named_by,
                            fix="flatten the requirement files")
        text = self.read_text(rel, named_by)
        self.stack.append(rel)
        self.deps.files.append(rel)
        for number, line in _logical_lines(text):
            self.line(rel, number, line, constraint)
        self.stack.pop()

    def line(self, rel: str, number: int, line: str, constraint: bool) -> None:
        args, opt_text = _split(line)
        try:
            opts, rest = _parser_once().parse_args(shlex.split(opt_text))
        except ValueError as exc:
            raise UserError(f"pip cannot read this line: {line!r} ({exc})", where=self.where(rel, number),
                            fix="see `pip install --help` for the options a requirements file may hold") from None
        if rest:
            raise UserError(f"pip cannot read this line: {line!r} (unexpected {' '.join(rest)!r})",
                            where=self.where(rel, number), fix="one requirement or option per line")
        here = self.where(rel, number)
        nested = [(p, False) for p in opts.requirement or []] + [(p, True) for p in opts.constraint or []]
        if not args and nested:
            path, is_constraint = nested[0]  # pip reads the first one a line names
            if _SCHEME.match(path) or "${" in path:
                raise UserError(f"{path} is not a file of the project: gpu-router reads only requirement "
                                "files that ship with the code", where=here,
                                fix="copy the file into the project and name it by its path")
            target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path))
            if path.startswith("/") or _outside(target):
                raise UserError(f"{path} is outside the project (nothing outside it ships)", where=here,
                                fix="move the file into the project, or ship more of it (`ship: repo`)")
            self.read_file(target, is_constraint, here)
            return
        if args or opts.editable:
            self.requirement(args or opts.editable[0], bool(opts.editable) and not args, opt_text if args else "",
                             constraint, here)
            return
        self.option(opts, rel, number)

    def option(self, opts: optparse.Values, rel: str, number: int) -> None:
        out = self.deps.options
        here = self.where(rel, number)
        if opts.no_index:
            out.append("--no-index")
        for url in [opts.index_url or "", *(opts.extra_index_url or [])]:
            if _FILE_URL.match(url):
                raise UserError(f"{url} is a path on this machine (a file: URL), not an index", where=here,
                                fix="name an index by its http(s) address, or put the wheels in a project folder "
                                    "and name it with a relative find-links line (-f vendor/)")
        if opts.index_url:
            self.refuse_url(opts.index_url, rel, number)
            out.append(f"--index-url {opts.index_url}")
        for url in opts.extra_index_url or []:
            self.refuse_url(url, rel, number)
            out.append(f"--extra-index-url {url}")
        for value in opts.find_links or []:
            self.refuse_url(value, rel, number)
            out.append(f"--find-links {self.find_links(value, rel, here)}")
        for host in opts.trusted_host or []:
            out.append(f"--trusted-host {host}")
        for name in ("no_binary", "only_binary", "use_feature"):
            for value in getattr(opts, name) or []:
                out.append(f"--{name.replace('_', '-')} {value}")
        for name in ("pre", "prefer_binary", "require_hashes"):
            if getattr(opts, name):
                out.append(f"--{name.replace('_', '-')}")
        if opts.hash:
            self.deps.notes.append(f"{here}: --hash with no requirement on its line is ignored by pip")

    def find_links(self, value: str, rel: str, here: str) -> str:
        """A local --find-links folder: pip takes it relative to the file when it exists there.
        A `file:` URL is an absolute path on this machine, refused as one: pip would read
        (and build) whatever lies there, wherever the wheelhouse is made."""
        if _FILE_URL.match(value):
            raise UserError(f"--find-links {value} is a path on this machine (a file: URL), not in the project",
                            where=here, fix="put the wheels in a project folder and name it relative to the file")
        if re.match(r"^[a-z][a-z0-9+.-]*://", value, re.I) or "${" in value:
            return value
        if value.startswith("/"):
            raise UserError(f"--find-links {value} is a path on this machine, not in the project", where=here,
                            fix="put the wheels in a project folder and name it relative to the file")
        by_file = posixpath.normpath(posixpath.join(posixpath.dirname(rel), value))
        by_cwd = posixpath.normpath(posixpath.join(self.workdir, value))
        for target in (by_file, by_cwd):
            if not _outside(target) and self.files.files_under(target):
                self.hash_local(target)
                return posixpath.relpath(target, self.workdir or ".")
        raise UserError(f"--find-links {value}: no such folder ships with the project", where=here,
                        fix="add the folder (git add, or `include:` in gpu.yaml), or take the line out")

    def requirement(self, text: str, editable: bool, opt_text: str, constraint: bool, here: str) -> None:
        what = url_credential(text)
        if what:
            raise UserError(f"refused: {what} in the project's dependencies", where=here, fix=_SECRET_FIX)
        target = self.constraints if constraint else self.requirements
        path = _local_path(text)
        if path is not None:
            target.append(self.local(path, text, editable, here) + (f" {opt_text}" if opt_text else ""))
            return
        if editable and not _VCS.match(text):
            raise UserError(f"-e {text}: pip installs only a path or a VCS URL in editable mode", where=here,
                            fix="drop -e for a package from the index")
        if _VCS.match(text) or re.match(r"^[a-z]+://", text, re.I):
            target.append(("-e " if editable else "") + text)  # a URL: pip's to fetch, nothing to check
            return
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise UserError(f"not a requirement pip can read: {text!r} ({exc})", where=here,
                            fix="write NAME, NAME==VERSION, NAME[extra]>=V; python_version < \"3.12\", "
                                "or NAME @ URL") from None
        if _FILE_URL.match(Requirement(text).url or ""):
            raise UserError(f"{text} names a path on this machine (a file: URL): the target cannot see it", where=here,
                            fix="put the package in the project and name it relative to the working folder")
        target.append(text + (f" {opt_text}" if opt_text else ""))

    @property
    def requirements(self) -> list[str]:
        return self.deps.requirements

    @property
    def constraints(self) -> list[str]:
        return self.deps.constraints

    def local(self, path: str, text: str, editable: bool, here: str) -> str:
        """A local path requirement: it must ship; its files join the hash; -e is dropped."""
        bare = re.sub(r"\[[^\]]*\]$", "", path)
        if bare.startswith(("/", "~")) or "${" in bare:
            raise UserError(f"{text} is a path on this machine: the target cannot see it", where=here,
                            fix="put the package in the project and name it relative to the working folder")
        target = posixpath.normpath(posixpath.join(self.workdir, bare))
        if _outside(target):
            raise UserError(f"{text} is outside the project (nothing outside it ships)", where=here,
                            fix="move the package into the project")
        if not self.files.files_under("" if target == "." else target):
            why = self.files.missing_reason(target)
            raise UserError(f"{text} does not ship with the project" + (f" ({why})" if why else ""), where=here,
                            fix="add it (git add, or `include:` in gpu.yaml), or take the line out")
        self.hash_local(target)
        if editable:
            self.deps.notes.append(f"{here}: -e {path} is installed as a regular install (the environment is "
                                   "shared by jobs with the same dependencies; an editable install would "
                                   "point into one job's folder)")
        return text

    def hash_local(self, target: str) -> None:
        h = hashlib.sha256()
        for rel in self.files.files_under("" if target == "." else target):
            h.update(rel.encode() + b"\0" + self.files.digest(rel))
        self.deps.local[target] = h.hexdigest()


def _local_path(text: str) -> str | None:
    """The path a requirement names, when it is a local path as pip sees one, else None."""
    if text.lower().startswith("file:"):
        rest = re.sub(r"^file:(//)?", "", text, flags=re.I)
        return rest if rest else "."
    first = text.split(";")[0].strip()
    if first in (".", "..") or first.startswith(("./", "../", "/", "~")):
        return first
    if "@" not in first and (first.lower().endswith(_ARCHIVE) or "/" in first):
        return first
    return None


def _pyproject(files: ProjectFiles, rel: str, extras: Iterable[str], deps: Dependencies) -> None:
    """[project] dependencies and the named optional groups, a group naming the project's own
    extras (`mypkg[train]`) read as that group too, as pip would install them."""
    import tomllib

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    text = files.read(rel)
    if text is None:
        raise UserError(f"`extras` names optional groups of {rel}, which is not in the project",
                        where=rel, fix="add pyproject.toml with [project.optional-dependencies], or drop `extras`")
    try:
        project = tomllib.loads(text.decode("utf-8", errors="replace")).get("project") or {}
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"pip cannot read it: {exc}", where=rel, fix="fix the TOML") from None
    own = canonicalize_name(str(project.get("name") or ""))
    groups = project.get("optional-dependencies") or {}
    wanted, seen = list(extras), set()
    lines: list[str] = [str(d) for d in project.get("dependencies") or []]
    for extra in wanted:
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in groups:
            known = ", ".join(sorted(groups)) or "none"
            raise UserError(f"`extras` names {extra!r}, not an optional group of {rel} (it has: {known})",
                            where=rel, fix="name one of its [project.optional-dependencies] groups")
        lines += [str(d) for d in groups[extra]]
    out: list[str] = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise UserError(f"not a requirement pip can read: {line!r} ({exc})", where=rel,
                            fix="fix the entry in [project]") from None
        what = url_credential(line)
        if what:
            raise UserError(f"refused: {what} in the project's dependencies", where=rel, fix=_SECRET_FIX)
        if _FILE_URL.match(req.url or ""):
            raise UserError(f"{line} names a path on this machine (a file: URL): the target cannot see it",
                            where=rel, fix="publish the package to an index, or list it in requirements.txt "
                                           "by its path relative to the working folder")
        if own and canonicalize_name(req.name) == own:  # the project's own extras: their groups
            wanted += [e for e in sorted(req.extras) if e not in seen]
            for extra in sorted(req.extras):
                if extra not in seen and extra in groups:
                    seen.add(extra)
                    lines += [str(d) for d in groups[extra]]
            continue
        out.append(line)
    if "dependencies" in (project.get("dynamic") or []):
        deps.notes.append(f"{rel}: dependencies are dynamic (set by the build backend); gpu-router installs "
                          "only what is written out: list them in requirements.txt")
    deps.requirements = out
    deps.files.append(rel)


def read_dependencies(files: ProjectFiles, workdir: str = "", extras: Iterable[str] = ()) -> Dependencies | None:
    """The job's dependencies, from the files of its working folder `workdir` (relative to the
    bundle's root), or None when it declares none. Raises UserError with the file, the line and
    what to do, for anything pip would trip on or that must not ship."""
    workdir = posixpath.normpath(workdir) if workdir not in ("", ".") else ""
    prefix = f"{workdir}/" if workdir else ""
    extras = list(extras)
    reader = _Reader(files, workdir)
    deps = reader.deps
    req_file = prefix + REQUIREMENTS
    if extras:
        deps.source = prefix + PYPROJECT
        _pyproject(files, deps.source, extras, deps)
    elif files.read(req_file) is not None or files.missing_reason(req_file):
        deps.source = req_file
        reader.read_file(req_file, False, None)
    elif files.read(prefix + PYPROJECT) is not None:
        deps.source = prefix + PYPROJECT
        _pyproject(files, deps.source, (), deps)
    if not deps.requirements:
        return None
    canon = {"requirements": deps.requirements, "constraints": deps.constraints, "options": deps.options,
             "local": sorted(deps.local.items())}
    deps.hash = hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()
    return deps


# -- the launcher's spec -------------------------------------------------------------------

_CACHE: dict[tuple[str, str, tuple[str, ...]], Dependencies | None | UserError] = {}
_CACHE_LOCK = threading.Lock()


def bundle_dependencies(bundle: Path, workdir: str, extras: Iterable[str] = ()) -> Dependencies | None:
    """`read_dependencies` over a stored bundle (content-addressed, so cached by its path)."""
    key = (str(bundle), workdir, tuple(extras))
    with _CACHE_LOCK:
        hit = _CACHE.get(key, _CACHE)
    if hit is _CACHE:
        try:
            hit = read_dependencies(BundleFiles(bundle), workdir, extras)
        except UserError as exc:
            hit = exc
        with _CACHE_LOCK:
            _CACHE[key] = hit
    if isinstance(hit, UserError):
        raise hit
    return hit  # type: ignore[return-value]


def deps_spec(deps: Dependencies | None, *, python: str, version: str, venvs_dir: str,
              uv: str | None = None) -> dict | None:
    """The launcher's `deps`: the flattened lines and a hash that also names the target's
    Python, so a venv is reused only by jobs that would install the very same thing; where uv
    installs, its one cache on that host (beside `venvs_dir`), the uv binary the home side
    has (`uv`, for the local target; a host uses its own or pip), and the key of the Python
    that names an environment by the packages it holds (core/runtime/uvenv.py)."""
    if deps is None:
        return None
    h = hashlib.sha256()
    for part in (python, version, deps.hash):
        h.update(part.encode() + b"\0")
    py = hashlib.sha256(f"{python}\0{version}".encode()).hexdigest()[:16]
    cache = posixpath.join(posixpath.dirname(venvs_dir.rstrip("/")), "uv-cache")
    local = hashlib.sha256(json.dumps(sorted(deps.local.items())).encode()).hexdigest()[:16] if deps.local else ""
    return {"hash": h.hexdigest()[:32], **deps.spec(), "venvs_dir": venvs_dir, "uv_cache": cache,
            "python_key": py, **({"local_key": f"local:{local}"} if local else {}), **({"uv": uv} if uv else {})}


def home_uv() -> str | None:
    """The uv binary of the `uv` package installed beside gpu-router (the local target installs
    with it), or None where it is missing: the launcher then looks for one, else uses pip."""
    with _HOME_UV_LOCK:  # launches run on threads: uv's lookup reads sysconfig, whose first
        # read is not thread-safe (two at once: get_config_var("EXE") is None, a TypeError in
        # uv's code; a sweep's points launching together met it)
        if "uv" not in _HOME_UV:
            try:
                import sysconfig

                sysconfig.get_config_vars()
                import uv
                _HOME_UV["uv"] = uv.find_uv_bin()
            except (ImportError, FileNotFoundError):
                _HOME_UV["uv"] = None
        return _HOME_UV["uv"]


_HOME_UV: dict[str, str | None] = {}
_HOME_UV_LOCK = threading.Lock()
