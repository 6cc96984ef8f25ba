"""A wheelhouse: a project's dependencies, resolved on the submitting machine for the platform
of a target that cannot reach a package index (a Kaggle kernel without internet, a cluster's
compute node), so that the target installs with `pip install --no-index --find-links`.

pip itself does the work, as it would on the target: `pip install --dry-run --report` resolves
the requirements for the target's Python and platform tags (`--only-binary=:all:` with
`--platform`, `--python-version`, `--implementation`, `--abi`), then `pip download --no-deps`
fetches exactly the wheels that ship. A requirement published only as a source distribution
is built here with `pip wheel --no-deps`, and kept only when the result is pure Python
(`py3-none-any`) and is that package's wheel alone: a compiled build made on this machine would
not run there. Anything else is named, with the way forward, before anything is uploaded.

Every pip step goes through `_pip`, and so through core/packaging/buildbox.py: building a
wheel runs the package's own build code (an sdist's backend, a version-control checkout, a
local path), and even the resolve builds a URL or path requirement to read its metadata, so
each step runs in the same sandbox as a local job's install, seeing only its inputs (read-only)
and its own output folder (writable); the network only when an index is needed. The cached
result is shared by every project with the same inputs, so what a step leaves behind is kept
only when it is what was asked for (the built package's own wheel; the downloaded pins).

A project's own `--find-links` folders (relative to its working folder: `--no-index`,
`--find-links vendor`, wheels or sdists it ships) are not where pip runs here: pip's folder is
the wheelhouse's work folder, and inside the sandbox it sees nothing else. So their files, as
shipped in the job's bundle (LocalFolders: the manifest and the folders' content hashes,
core.packaging.requirements.Dependencies.local), are copied into the work folder, each checked
against its content hash, and pip's `--find-links` points at the copy; the folders' hashes are
part of the cache key, so a changed vendor folder makes a new wheelhouse. An sdist found there
is built in the sandbox like any other, and `--no-index` with only such folders needs no network.

Packages the target's image already has at a version the project's pins accept are pinned to
that version during the resolve and then left out: they are not shipped.

The result is cached by (dependency hash, platform, image) under the gpu-router home; a second
build with the same inputs does nothing. The inputs are plain lists (requirement specifiers,
constraints, pip index options) so that whatever reads requirements files hands them over as is.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from core import paths
from core.errors import UserError
from core.packaging import buildbox
from core.runtime import codetree, objstore

Say = Callable[[str], None]
PIP_TIMEOUT_S = 1800  # one pip call: a large wheel over a slow link still fits
MAX_SDIST_BUILDS = 50  # source-only requirements built before giving up (a loop guard)
_NO_MATCH = re.compile(r"No matching distribution found for (.+)")


@dataclass(frozen=True)
class TargetPlatform:
    """What a target's Python accepts: `python_version` "3.12", `implementation` "cp", `abi`
    "cp312", `platforms` ("manylinux_2_35_x86_64", ...; pip also accepts older manylinux
    tags for a newer glibc one)."""

    python_version: str
    implementation: str
    abi: str
    platforms: tuple[str, ...]

    def pip_options(self) -> list[str]:
        opts = ["--only-binary=:all:", "--python-version", self.python_version,
                "--implementation", self.implementation, "--abi", self.abi]
        for p in self.platforms:
            opts += ["--platform", p]
        return opts

    def describe(self) -> str:
        return f"{self.implementation}{self.python_version.replace('.', '')} {'/'.join(self.platforms)}"

    def to_json(self) -> dict:
        return {"python_version": self.python_version, "implementation": self.implementation,
                "abi": self.abi, "platforms": list(self.platforms)}


class Unbuildable(UserError):
    """A requirement with no wheel for the target's platform and no pure-Python build."""


@dataclass
class Wheelhouse:
    key: str  # the cache key: (dependency hash, platform, image)
    path: Path  # a folder of .whl files
    files: list[str]
    size: int
    content_hash: str  # over the wheels themselves: names a shipped copy
    skipped: dict[str, str] = field(default_factory=dict)  # name -> version the image has
    built_now: bool = True  # False: the cache had it

    def archive(self) -> Path:
        """The wheels as one uncompressed tar (wheels are zip files already), made once."""
        out = self.path.parent / f"{self.path.name}.tar"
        if not out.exists():
            tmp = out.with_suffix(f".part{os.getpid()}")
            with tarfile.open(tmp, "w") as tar:
                for name in self.files:
                    tar.add(self.path / name, arcname=name, recursive=False)
            os.replace(tmp, out)
        return out


@dataclass(frozen=True)
class LocalFolders:
    """Where the project's relative `--find-links` folders are: the job's bundle (its manifest
    over content-addressed objects, core.packaging.objects), the job's working folder (the
    folders are named relative to it, as pip on the target reads them) and each folder's
    content hash by its path in the bundle (requirements.Dependencies.local, which may also
    name local path requirements: all of it goes into the cache key)."""

    manifest: Path
    workdir: str
    hashes: dict[str, str]


def local_folders(local: dict[str, str], manifest: Path, workdir: str) -> LocalFolders | None:
    """What `build` needs to read the project's own folders (None when it names none): for a
    caller holding a job's Dependencies.local and its bundle's manifest."""
    return LocalFolders(manifest=manifest, workdir=workdir, hashes=dict(local)) if local else None


def cache_key(requirements: list[str], constraints: list[str], pip_args: list[str],
              platform: TargetPlatform, image_packages: dict[str, str],
              local: dict[str, str] | None = None) -> str:
    """The wheelhouse's name in the cache. `local` (a local folder's bundle path -> its content
    hash) joins the key only when there is one: `--find-links vendor` names a folder, not its
    content, and every key written before local folders counted stays what it was."""
    doc = {"requirements": list(requirements), "constraints": list(constraints), "pip_args": list(pip_args),
           "platform": platform.to_json(),
           "image": sorted((canonicalize_name(k), v) for k, v in image_packages.items())}
    if local:
        doc["local"] = sorted(local.items())
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def wheelhouses_dir() -> Path:
    d = paths.cache_dir() / "wheelhouse"
    d.mkdir(parents=True, exist_ok=True)
    return d


def build(requirements: list[str], constraints: list[str], pip_args: list[str], platform: TargetPlatform,
          image_packages: dict[str, str] | None = None, *, say: Say = print,
          python: str = sys.executable, local: LocalFolders | None = None) -> Wheelhouse:
    """The wheelhouse for these inputs: from the cache, or resolved, built and downloaded now.
    `local`: where the project's relative `--find-links` folders are (their files are copied
    into the work folder only when the wheelhouse is built now)."""
    image = {canonicalize_name(k): v for k, v in (image_packages or {}).items()}
    key = cache_key(requirements, constraints, pip_args, platform, image, local.hashes if local else None)
    top = wheelhouses_dir()
    final = top / key
    with open(top / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two jobs with the same dependencies build it once
        done = _load(final, key)
        if done is not None:
            say(f"dependencies: wheelhouse {key[:12]} for {platform.describe()} is cached "
                f"({len(done.files)} wheels, {_mb(done.size)})")
            return done
        work = top / f"{key}.part{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            args = _place_links(work, pip_args, local, say)
            _build(work, requirements, constraints, args, platform, image, say, python)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(work / "wheels", final)
            (work / "manifest.json").replace(final / "manifest.json")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        built = _load(final, key)
        assert built is not None
        built.built_now = True
        return built


def _load(folder: Path, key: str) -> Wheelhouse | None:
    try:
        doc = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return Wheelhouse(key=key, path=folder, files=doc["files"], size=doc["bytes"],
                      content_hash=doc["content_hash"], skipped=doc.get("skipped", {}), built_now=False)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _pip(python: str, args: list[str], *, what: str, work: Path, out: Path, builds: bool,
         network: bool) -> subprocess.CompletedProcess:
    """One pip step of a wheelhouse: the one way pip runs here (buildbox: sandboxed, `work`
    readable, `out` writable). `-I`: no folder of the step (nor any PYTHON* variable) is on
    pip's own import path."""
    return buildbox.run(buildbox.Step(
        command=[python, "-I", "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        what=what, builds=builds, readable=(work,), writable=(out,), network=network, cwd=work,
        timeout=PIP_TIMEOUT_S), python)


def only_wheels(requirements: list[str], constraints: list[str], pip_args: list[str]) -> bool:
    """Whether pip, resolving these lines with `--only-binary=:all:`, can run no build code:
    every line a requirement by name (no URL, path, version-control or editable line, which
    pip builds whatever --only-binary says), and no --no-binary option."""
    if any(a == "--no-binary" or a.startswith("--no-binary=") for a in pip_args):
        return False
    for line in [*requirements, *constraints]:
        try:
            req = Requirement(line.split(" --", 1)[0].strip())  # a line's own --hash options after it
        except InvalidRequirement:
            return False
        if req.url:
            return False
    return True


def needs_network(pip_args: list[str], environ: dict[str, str] | None = None) -> bool:
    """Whether pip reaches out for these options: not with --no-index and only local
    --find-links folders (the wheelhouse's own `built` folder among them)."""
    env = os.environ if environ is None else environ
    no_index = "--no-index" in pip_args or env.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on")
    links = [pip_args[i + 1] for i, a in enumerate(pip_args[:-1]) if a in ("--find-links", "-f")]
    links += [a.split("=", 1)[1] for a in pip_args if a.startswith("--find-links=")]
    links += env.get("PIP_FIND_LINKS", "").split()
    return not no_index or any(re.match(r"^[a-z][a-z0-9+.-]*://", link, re.I) for link in links)


def _remote_link(value: str) -> bool:
    """A --find-links value pip fetches (a URL) or fills in itself (`${NAME}`): not a folder
    of the project."""
    return bool(re.match(r"^[a-z][a-z0-9+.-]*://", value, re.I)) or "${" in value


def _place_links(work: Path, pip_args: list[str], local: LocalFolders | None, say: Say) -> list[str]:
    """pip's options with each relative --find-links folder copied from the bundle into
    `work/links/N` and named by that path: pip runs in `work` on this machine (sandboxed, seeing
    only `work`), not in the job's working folder where the name points on the target."""
    out = list(pip_args)
    placed: dict[str, str] = {}
    for i, arg in enumerate(pip_args):
        if arg in ("--find-links", "-f") and i + 1 < len(pip_args):
            at, value, prefix = i + 1, pip_args[i + 1], ""
        elif arg.startswith("--find-links="):
            at, value, prefix = i, arg.split("=", 1)[1], "--find-links="
        else:
            continue
        if _remote_link(value):
            continue
        rel = posixpath.normpath(posixpath.join(local.workdir if local else "", value))
        if local is None or rel not in local.hashes:
            raise UserError(f"--find-links {value}: the folder is not among the project's shipped folders, so "
                            "the wheelhouse cannot read it",
                            fix="name a folder of the project relative to the requirements file, or take the "
                                "line out")
        if rel not in placed:
            dest = work / "links" / str(len(placed))
            _copy_folder(local.manifest, rel, local.hashes[rel], dest)
            placed[rel] = str(dest)
            say(f"dependencies: the project's folder {value} is read from the job's bundle "
                f"({len(list(dest.iterdir()))} files)")
        out[at] = prefix + placed[rel]
    return out


def _copy_folder(manifest: Path, rel: str, digest: str, dest: Path) -> None:
    """The bundle's regular files directly in the folder `rel` (pip reads a --find-links folder
    one level deep, as os.scandir does) copied to `dest` from the object store, each checked
    against its object's hash; the folder's rows must also give `digest` (its content hash as
    the requirements reader made it, core.packaging.requirements hash_local), so what is
    copied is what the cache key names."""
    rows = codetree.read_manifest(str(manifest))
    prefix = "" if rel in ("", ".") else rel + "/"
    under = sorted((r[0], r[2]) for r in rows if r[1] != "l" and r[0].startswith(prefix))
    whole = hashlib.sha256()
    for path, ref in under:
        whole.update(path.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(ref))
    if whole.hexdigest() != digest:
        raise UserError(f"the project's folder {rel} in the job's bundle is not the one its dependencies were "
                        "read from", fix="submit the job again")
    dest.mkdir(parents=True)
    store = str(paths.objects_dir())
    packs = objstore.packed(store)
    for path, ref in under:
        name = path[len(prefix):]
        if "/" in name or not codetree.safe_rel(name):
            continue  # a subfolder's file: pip does not look there
        f, size = objstore.open_object(store, ref, packs)
        h = hashlib.sha256()
        with f, open(dest / name, "xb") as out:
            left = size
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                out.write(chunk)
                left -= len(chunk)
        if h.hexdigest() != ref:
            raise UserError(f"{path}: the stored copy of this file is not what the bundle says (its object "
                            f"{ref[:12]} changed)", fix="submit the job again (the object is packed anew)")


def _tail(proc: subprocess.CompletedProcess, lines: int = 6) -> str:
    text = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return "\n".join(text[-lines:])


def _image_pins(image: dict[str, str], requirements: list[str], constraints: list[str]) -> list[str]:
    """`name==version` for each package the image has, unless the project's own specifiers
    for that name refuse the image's version (then a newer one ships)."""
    wanted: dict[str, list[Requirement]] = {}
    for line in [*requirements, *constraints]:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        wanted.setdefault(canonicalize_name(req.name), []).append(req)
    pins = []
    for name, version in sorted(image.items()):
        if all(r.specifier.contains(version, prereleases=True) for r in wanted.get(name, [])):
            pins.append(f"{name}=={version}")
    return pins


def _not_in_image(image: dict[str, str], requirements: list[str],
                  constraints: list[str]) -> tuple[list[str], dict[str, str]]:
    """The requirements the image does not already satisfy, and those it does (name ->
    version): a requirement the image meets (no extras, its version accepted by the
    requirement and the constraints) needs no index at all."""
    limits: dict[str, list[Requirement]] = {}
    for line in constraints:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        limits.setdefault(canonicalize_name(req.name), []).append(req)
    left, had = [], {}
    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            left.append(line)
            continue
        name = canonicalize_name(req.name)
        version = image.get(name)
        if version and not req.extras and not req.url and all(
                r.specifier.contains(version, prereleases=True) for r in [req, *limits.get(name, [])]):
            had[name] = version
        else:
            left.append(line)
    return left, had


def _build(work: Path, requirements: list[str], constraints: list[str], pip_args: list[str],
           platform: TargetPlatform, image: dict[str, str], say: Say, python: str) -> None:
    built = work / "built"  # pure-Python wheels made here from source-only requirements
    wheels = work / "wheels"
    built.mkdir()
    wheels.mkdir()
    requirements, had = _not_in_image(image, requirements, constraints)
    (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
    (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
    pins = _image_pins(image, requirements, constraints)
    (work / "image.txt").write_text("\n".join(pins) + "\n")
    say(f"dependencies: resolving {len(requirements)} requirements for {platform.describe()} "
        f"({len(image)} packages already on the target: its image or its Python)")
    started = time.monotonic()
    use_pins, tried = True, set()
    resolved = work / "resolve"  # the resolve's one writable folder
    resolved.mkdir()
    report = resolved / "report.json"
    report.write_text('{"install": []}')
    network = needs_network(pip_args)
    wheels_only = only_wheels(requirements, constraints, pip_args)
    for _ in range(MAX_SDIST_BUILDS if requirements else 0):  # nothing left: no pip at all
        cmd = ["install", "--dry-run", "--ignore-installed", "--target", str(resolved / "t"), "--report", str(report),
               *platform.pip_options(), "--find-links", str(built), "-r", str(work / "requirements.txt"),
               "-c", str(work / "constraints.txt"), *pip_args]
        if use_pins and pins:
            cmd += ["-c", str(work / "image.txt")]
        proc = _pip(python, cmd, what=f"resolving the requirements for {platform.describe()}", work=work,
                    out=resolved, builds=not wheels_only, network=network)
        if proc.returncode == 0:
            break
        missing = _NO_MATCH.search(proc.stderr or "")
        if missing:
            spec = missing.group(1).strip().split(" (from")[0]
            name = canonicalize_name(_name_of(spec))
            if name in tried:
                raise _unbuildable(spec, platform, "its source built, yet pip still finds no match")
            tried.add(name)
            _build_sdist(spec, work, built, constraints, pip_args, platform, say, python, network)
            continue
        if use_pins and pins and "ResolutionImpossible" in (proc.stderr or ""):
            say("dependencies: the image's versions conflict with the project's; resolving without them "
                "(newer versions ship)")
            use_pins = False
            continue
        raise UserError(f"pip could not resolve the dependencies for {platform.describe()}:\n{_tail(proc)}",
                        fix="check the requirements (and the index options) with pip on this machine, or "
                            "pin versions that publish wheels for that platform")
    else:
        if requirements:
            raise UserError("too many source-only requirements to build", fix="pin versions that publish wheels")
    items = json.loads(report.read_text()).get("install", [])
    ship, skipped = [], dict(had)
    for item in items:
        meta = item.get("metadata", {})
        name, version = canonicalize_name(meta.get("name", "")), meta.get("version", "")
        if image.get(name) == version:
            skipped[name] = version
        else:
            ship.append(f"{name}=={version}")
    if ship:
        say(f"dependencies: downloading {len(ship)} wheels ({len(skipped)} left out: the target has them)")
        proc = _pip(python, ["download", "--no-deps", *platform.pip_options(), "--find-links", str(built),
                             "-d", str(wheels), *pip_args, *ship],
                    what=f"downloading the wheels for {platform.describe()}", work=work, out=wheels,
                    builds=not only_wheels([], [], pip_args), network=network)
        if proc.returncode != 0:
            raise UserError(f"pip could not download the wheels for {platform.describe()}:\n{_tail(proc)}",
                            fix="check the index options (and that the index is reachable from this machine)")
        _keep_only(wheels, ship)
    files = sorted(p.name for p in wheels.iterdir() if p.name.endswith(".whl"))
    digest = hashlib.sha256()
    size = 0
    for name in files:
        data = (wheels / name).read_bytes()
        size += len(data)
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    (work / "manifest.json").write_text(json.dumps({
        "files": files, "bytes": size, "content_hash": digest.hexdigest(), "skipped": skipped,
        "platform": platform.to_json(), "requirements": requirements, "constraints": constraints,
        "built_at": time.time()}))
    say(f"dependencies: wheelhouse ready in {time.monotonic() - started:.1f}s: {len(files)} wheels, "
        f"{_mb(size)}; {len(skipped)} packages the target has are not shipped")


def _wheel_name(filename: str) -> str | None:
    try:
        return parse_wheel_filename(filename)[0]
    except InvalidWheelFilename:
        return None


def _name_of(spec: str) -> str:
    try:
        return Requirement(spec).name
    except InvalidRequirement:
        return re.split(r"[<>=!~;\[ ]", spec, 1)[0]


def _unbuildable(spec: str, platform: TargetPlatform, why: str) -> Unbuildable:
    name = _name_of(spec)
    return Unbuildable(f"{name} ({spec}) cannot be installed on a target without internet: {why}",
                       fix=f"pin a version of {name} that publishes a wheel for {platform.describe()} "
                           f"(or a pure-Python one), or run on a target that reaches a package index "
                           f"(a host with offline: false; a Kaggle target with internet: true, which "
                           f"needs a phone-verified account)")


def _keep_only(wheels: Path, ship: list[str]) -> None:
    """The download step's folder holds exactly the pinned wheels: anything else there is
    removed (the cache is shared by every project with the same inputs)."""
    wanted = {(canonicalize_name(s.split("==")[0]), s.split("==")[1]) for s in ship}
    for path in wheels.iterdir():
        try:
            name, version, _b, _t = parse_wheel_filename(path.name)
            ok = path.is_file() and not path.is_symlink() and (name, str(version)) in {
                (n, str(Version(v))) for n, v in wanted}
        except (InvalidWheelFilename, InvalidVersion):
            ok = False
        if not ok:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _build_sdist(spec: str, work: Path, built: Path, constraints: list[str], pip_args: list[str],
                 platform: TargetPlatform, say: Say, python: str, network: bool = True) -> None:
    """`pip wheel --no-deps` from the requirement's source; only a pure-Python result is kept.
    Build isolation first (the project's declared build backend, from the index); without it
    when the index offers no build backend (this machine's setuptools then builds it)."""
    say(f"dependencies: {spec} has no wheel for {platform.describe()}: building it from source")
    out = work / "one"
    proc = None
    for isolation in ([], ["--no-build-isolation"]):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        proc = _pip(python, ["wheel", "--no-deps", f"--no-binary={canonicalize_name(_name_of(spec))}",
                             *isolation, "-w", str(out),
                             "-c", str(work / "constraints.txt"), *pip_args, spec],
                    what=f"building {spec} from source", work=work, out=out, builds=True, network=network)
        if proc.returncode == 0:
            break
    assert proc is not None
    if proc.returncode != 0:
        if "No matching distribution" in (proc.stderr or ""):
            raise _unbuildable(spec, platform, f"no wheel for {platform.describe()} and no source to build")
        raise _unbuildable(spec, platform, f"building it from source failed:\n{_tail(proc, 4)}")
    name = canonicalize_name(_name_of(spec))
    made = [p for p in out.iterdir()]
    others = [p.name for p in made if not (p.name.endswith(".whl") and p.is_file() and not p.is_symlink()
                                            and _wheel_name(p.name) == name)]
    if others or len(made) != 1:
        # the build code wrote more than its own wheel: nothing of it joins a shared cache
        raise _unbuildable(spec, platform, f"building it from source left {len(made)} files, not its one wheel "
                                           f"({', '.join(sorted(p.name for p in made))[:300]})")
    for whl in made:
        _name, _ver, _build_tag, tags = parse_wheel_filename(whl.name)
        if not all(t.abi == "none" and t.platform == "any" and t.interpreter.startswith("py") for t in tags):
            raise _unbuildable(spec, platform, f"it has no wheel for {platform.describe()}, and its source "
                                               f"builds compiled code ({whl.name}), which must be built there")
        shutil.move(str(whl), built / whl.name)
