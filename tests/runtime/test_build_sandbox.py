"""What gpu-router runs *for* a job runs as if the job were hostile (docs/security/sandbox.md,
"What is shared between projects"):

- a wheelhouse (an ssh/Slurm/PBS host with `offline`, a Kaggle kernel without internet) is
  built on this machine, and building an sdist runs its build backend: that happens inside
  bubblewrap, away from the keychain, the person's home and gpu-router's home;
- a `file:` URL in the requirements is a path on this machine, refused like an absolute path;
- where no sandbox can be made, a build is refused with what to do, and a wheels-only
  wheelhouse is still made;
- install steps never get the job's `env`: a job's LD_PRELOAD does not load into uv while the
  shared uv cache is writable, and a project's own `pip/` folder does not run in the install
  of an environment other projects share.

Real bubblewrap, a real SecretService keychain (dbus + gnome-keyring), a real sshd, real uv and
pip, packages from a loopback index (tests/pyindex.py) serving an sdist whose in-tree backend
tries the keychain, the homes and the config, and records what happened in the package it builds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from core import paths
from core.packaging import buildbox, wheelhouse
from core.providers.kaggle.deps import KAGGLE_PLATFORM
from core.runtime import boundary
from tests.conftest import gpu_json, make_git_project, run_gpu, wait_state, write_user_config
from tests.pyindex import BACKEND, PYPROJECT, PackageIndex, _norm, sdist_bytes

SECRET = "hf_buildSandboxSecret0123456789abcdefXYZ"

# appended to tests/pyindex.py's backend: every build first tries what a hostile build would,
# and writes what happened into the package it builds (evilpkg/seen.py)
EVIL = r'''
import json as _json, os as _os, socket as _socket, subprocess as _sp

_ARGS = %(args)r
_real_build_wheel = build_wheel


def _try(report, name, fn):
    try:
        report[name] = "ESCAPED: " + str(fn())[:200]
    except BaseException as exc:  # noqa: BLE001 - every way of failing is the expected result
        report[name] = ("blocked: %%s: %%s" %% (type(exc).__name__, exc))[:200]


def _secret_tool(address):
    env = dict(_os.environ, DBUS_SESSION_BUS_ADDRESS=address)
    r = _sp.run(["secret-tool", "search", "--all", "service", "gpu-router"], capture_output=True,
                text=True, timeout=20, env=env)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout
    raise RuntimeError("status %%s: %%s" %% (r.returncode, r.stderr.strip()[:100]))


def _inherited_bus():
    if not _os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        raise RuntimeError("no session bus address")
    return _secret_tool(_os.environ["DBUS_SESSION_BUS_ADDRESS"])


def _bus_socket():
    s = _socket.socket(_socket.AF_UNIX)
    s.settimeout(5)
    s.connect(_ARGS["bus_path"])
    return "connected"


def _write(path):
    with open(path, "w") as f:
        f.write("evil was here\n")
    return path


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    report = {}
    _try(report, "keychain at the known bus", lambda: _secret_tool(_ARGS["bus"]))
    _try(report, "keychain at an inherited bus", _inherited_bus)
    _try(report, "session bus socket", _bus_socket)
    _try(report, "read the user config", lambda: open(_ARGS["config"]).read())
    _try(report, "read a file in gpu-router's home", lambda: open(_ARGS["gr_note"]).read())
    _try(report, "read a file in the person's home", lambda: open(_ARGS["person_note"]).read())
    if _ARGS.get("port"):
        _try(report, "network", lambda: _socket.create_connection(("127.0.0.1", _ARGS["port"]), timeout=5))
    # writes: what counts is whether the file appears in the real folders (the test looks)
    wrote = {}
    _try(wrote, "gpu-router's home", lambda: _write(_os.path.join(_ARGS["gr_home"], "evil-was-here")))
    _try(wrote, "the person's home", lambda: _write(_os.path.join(_ARGS["person_home"], ".evil-was-here")))
    facts = {"home": _os.path.expanduser("~"), "env": sorted(_os.environ), "wrote": wrote}
    _os.makedirs("evilpkg", exist_ok=True)
    with open("evilpkg/seen.py", "w") as f:
        f.write("SEEN = %%r\nFACTS = %%r\n" %% (report, facts))
    return _real_build_wheel(wheel_directory, config_settings, metadata_directory)
'''


def add_evil_sdist(ix: PackageIndex, args: dict, name: str = "evilpkg", version: str = "1.0") -> None:
    """An sdist with an in-tree PEP 517 backend that tries the keychain, the homes and the
    config before it builds (tests/pyindex.py's backend, with EVIL after it)."""
    dist = name.replace("-", "_")
    base = f"{dist}-{version}"
    backend = BACKEND % {"name": name, "dist": dist, "version": version, "tag": "py3-none-any",
                         "requires": [], "packages": [dist]} + EVIL % {"args": args}
    contents = {f"{dist}/__init__.py": "X = 'evil'\n", "pyproject.toml": PYPROJECT,
                "_backend/tinybackend.py": backend,
                "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
    (ix.files / f"{base}.tar.gz").write_bytes(sdist_bytes(base, contents))
    ix._publish(_norm(name), f"{base}.tar.gz")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ix = PackageIndex(tmp_path / "index")
    ix.add_wheel("tinypure", "1.0", {"tinypure/__init__.py": "X = 1\n"})
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)  # this machine's pip (the supervisor's) reads it
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    yield ix
    ix.close()


@pytest.fixture
def hostile(index: PackageIndex, keychain, home: Path, tmp_path: Path) -> dict:
    """The keychain holds a secret; the index serves evilpkg, whose build tries to reach it."""
    import keyring

    keyring.set_password("gpu-router", "HF_TOKEN", SECRET)
    bus = keychain.env["DBUS_SESSION_BUS_ADDRESS"]
    args = {"bus": bus, "bus_path": bus.split("path=", 1)[1].split(",")[0], "gr_home": str(home),
            "person_home": keychain.env["HOME"], "config": str(paths.user_config_file()),
            "gr_note": str(home / "note.txt"), "person_note": str(Path(keychain.env["HOME"]) / "note.txt")}
    for note in (args["gr_note"], args["person_note"]):
        Path(note).write_text("a file of the person's\n")
    if not paths.user_config_file().exists():
        write_user_config("# the person's config\n")
    add_evil_sdist(index, args)
    return args


def assert_nothing_reached(seen: dict, facts: dict, args: dict, *texts: str) -> None:
    escaped = {k: v for k, v in seen.items() if not v.startswith("blocked")}
    assert escaped == {}, escaped
    assert len(seen) == 6 + ("port" in args) and len(facts["wrote"]) == 2, (seen, facts)
    assert facts["home"] != args["person_home"] and not facts["home"].startswith(args["gr_home"])
    for name in ("DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "GPU_ROUTER_HOME", "LD_PRELOAD"):
        assert name not in facts["env"], name
    assert not (Path(args["gr_home"]) / "evil-was-here").exists()
    assert not (Path(args["person_home"]) / ".evil-was-here").exists()
    for text in texts:
        assert SECRET not in text


def seen_in_wheel(wheel: Path) -> tuple[dict, dict]:
    with zipfile.ZipFile(wheel) as z:
        scope: dict = {}
        exec(z.read("evilpkg/seen.py").decode(), scope)  # noqa: S102 - the test's own package
    return scope["SEEN"], scope["FACTS"]


# -- the wheelhouse -----------------------------------------------------------------------------


@pytest.mark.slow
def test_an_offline_host_s_wheelhouse_builds_an_sdist_without_reaching_the_person(
        sshd, hostile: dict, home: Path, tmp_path: Path) -> None:
    """The issue's example: an ssh target with `offline: true`, a requirement published only as
    an sdist whose backend tries the keychain and the homes. The build runs in bubblewrap on
    this machine: the job still gets its package, and the package says it reached nothing."""
    from tests.providers.test_host_offline import PYTHON, dead_index

    root = tmp_path / "remote"
    box = {"kind": "ssh", **sshd.target_options(root, PYTHON), "offline": True,
           "env": {"PIP_INDEX_URL": dead_index()}}
    write_user_config(json.dumps({"targets": {"box": box}}))
    project = make_git_project(tmp_path / "p", {
        "train.py": "import json, gpu, evilpkg, evilpkg.seen as s\n"
                    "(gpu.output_dir() / 'seen.json').write_text(json.dumps({'seen': s.SEEN, 'facts': s.FACTS}))\n"
                    "print('imported', evilpkg.X, flush=True)\n",
        "requirements.txt": "evilpkg==1.0\n"})
    sub = gpu_json("submit", "train.py", "--provider", "box", "--hours", "0.1", "--wait-s", "0", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=240)
    log = run_gpu("logs", short).stdout
    assert done["state"] == "done", log + json.dumps(done)
    assert "imported evil" in log
    got = json.loads((Path(sub["job"]["outputs_dir"]) / "seen.json").read_text())
    cached = "".join(p.read_bytes().decode("latin-1") for p in (home / "cache").rglob("*") if p.is_file())
    assert_nothing_reached(got["seen"], got["facts"], hostile, log, json.dumps(got), cached)


@pytest.mark.slow
def test_kaggle_s_wheelhouse_goes_through_the_same_sandboxed_build(hostile: dict, home: Path) -> None:
    """Kaggle's offline kernels install from a wheelhouse made by the same build, for Kaggle's
    image (CPython 3.12, manylinux x86_64): its sdists are built in the same sandbox."""
    said: list[str] = []
    wh = wheelhouse.build(["evilpkg==1.0", "tinypure"], [], [], KAGGLE_PLATFORM, {}, say=said.append)
    assert sorted(n.split("-")[0] for n in wh.files) == ["evilpkg", "tinypure"], wh.files
    seen, facts = seen_in_wheel(wh.path / next(n for n in wh.files if n.startswith("evilpkg")))
    assert_nothing_reached(seen, facts, hostile, "\n".join(said))


SNEAK = r'''

def _out():
    """pip's `-w` folder, from the command line of the pip above this backend."""
    pid = os.getppid()
    for _ in range(6):
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        if b"-w" in args:
            return args[args.index(b"-w") + 1].decode()
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no pip -w above")
'''


def test_a_build_that_leaves_more_than_its_own_wheel_is_not_cached(index: PackageIndex, home: Path) -> None:
    """The wheelhouse cache is shared by every project with the same requirements: a build
    that slips another package's wheel beside its own (to be shipped in its place) is refused."""
    extra = BACKEND.replace("    return fname\n", "    open(os.path.join(_out(), 'tinypure-1.0-py3-none-any.whl'), "
                                                 "'wb').write(b'x')\n    return fname\n") + SNEAK
    dist, base = "sneaky", "sneaky-1.0"
    contents = {"sneaky/__init__.py": "", "pyproject.toml": PYPROJECT,
                "_backend/tinybackend.py": extra % {"name": dist, "dist": dist, "version": "1.0",
                                                    "tag": "py3-none-any", "requires": [], "packages": [dist]},
                "PKG-INFO": "Metadata-Version: 2.1\nName: sneaky\nVersion: 1.0\n"}
    (index.files / f"{base}.tar.gz").write_bytes(sdist_bytes(base, contents))
    index._publish("sneaky", f"{base}.tar.gz")
    with pytest.raises(wheelhouse.Unbuildable, match="not its one wheel"):
        wheelhouse.build(["sneaky==1.0", "tinypure"], [], [], KAGGLE_PLATFORM, {}, say=lambda _t: None)
    assert not [p for p in wheelhouse.wheelhouses_dir().iterdir() if p.is_dir()]


def test_without_a_sandbox_a_build_is_refused_and_a_wheels_only_wheelhouse_is_made(
        hostile: dict, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bubblewrap missing (or macOS): building evilpkg would run its backend as the person, so
    it is refused with what to do; requirements that are all wheels need no build code and
    still get their wheelhouse."""
    monkeypatch.setenv(boundary.BWRAP_ENV, str(Path(home) / "no-such-bwrap"))
    boundary.forget_probe()
    try:
        with pytest.raises(buildbox.NoBuildSandbox) as refused:
            wheelhouse.build(["evilpkg==1.0"], [], [], KAGGLE_PLATFORM, {}, say=lambda _t: None)
        text = str(refused.value) + " " + (refused.value.fix or "")
        assert "building evilpkg==1.0 from source" in text and "install bubblewrap" in text, text
        assert not (Path(hostile["gr_home"]) / "evil-was-here").exists()
        # a URL requirement is built even to resolve it: refused before pip runs at all
        with pytest.raises(buildbox.NoBuildSandbox, match="resolving"):
            wheelhouse.build(["evilpkg @ http://127.0.0.1:9/evilpkg-1.0.tar.gz"], [], [], KAGGLE_PLATFORM, {},
                             say=lambda _t: None)
        wh = wheelhouse.build(["tinypure==1.0"], [], [], KAGGLE_PLATFORM, {}, say=lambda _t: None)
        assert wh.files == ["tinypure-1.0-py3-none-any.whl"]
    finally:
        boundary.forget_probe()


def test_a_file_url_in_the_requirements_is_refused_at_submit(home: Path, tmp_path: Path) -> None:
    """`--find-links file://<project>/vendor` passed the check that refuses an absolute path,
    and the wheelhouse then built what lay there on this machine. A file: URL is a path on this
    machine, wherever it points: refused at submit, with the line, like an absolute path."""
    for line in ("--find-links file://{p}/vendor", "--find-links FILE:{p}/vendor", "-f file:///tmp",
                 "--extra-index-url file://{p}/vendor", "evilpkg @ file://{p}/vendor/evilpkg-1.0.tar.gz"):
        project = tmp_path / f"p{abs(hash(line))}"
        text = line.format(p=project)
        make_git_project(project, {"train.py": "print(1)\n", "vendor/evilpkg-1.0.tar.gz": "x",
                                   "requirements.txt": f"--no-index\n{text}\nevilpkg==1.0\n"})
        r = run_gpu("submit", "train.py", "--hours", "0.1", "--wait-s", "0", "--json", cwd=project)
        said = r.stdout + r.stderr
        assert r.returncode != 0, said
        assert "a path on this machine" in said and "requirements.txt" in said, (line, said)
    assert "jobs" not in gpu_json("jobs") or not gpu_json("jobs")["jobs"]


# -- install steps and the job's env ------------------------------------------------------------

POISON_C = r'''
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs as whatever program loads it exits: in uv, it rewrites the packages in uv's cache. */
__attribute__((destructor)) static void poison(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    if (strcmp(base ? base + 1 : exe, "uv") != 0) return;
    unsetenv("LD_PRELOAD");
    system("for f in $(find %(cache)s -path '*tinyweb/__init__.py' 2>/dev/null); do "
           "[ -L \"$f\" ] || echo \"V = 'POISONED'\" > \"$f\"; done; touch %(cache)s/../POISON-RAN-IN-UV");
}
'''
JOB = "import os, tinyweb\nprint('versions', tinyweb.V, os.environ.get('POISONED', 'clean'), flush=True)\n"


@pytest.fixture
def uv_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ix = PackageIndex(tmp_path / "uvindex")
    ix.add_wheel("tinyweb", "1.0", {"tinyweb/__init__.py": "V = '1.0'\n"})
    monkeypatch.setenv("PIP_INDEX_URL", ix.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    yield ix
    ix.close()


def _run(project: Path) -> tuple[str, str]:
    sub = gpu_json("submit", "train.py", "--wait-s", "0", "--hours", "0.1", cwd=project)
    short = sub["job"]["short_id"]
    done = wait_state(short, {"done", "failed"}, timeout=180)
    log = run_gpu("logs", short).stdout
    return done["state"], log


@pytest.mark.slow
def test_a_job_s_ld_preload_never_loads_into_uv_while_the_shared_cache_is_writable(
        home: Path, tmp_path: Path, uv_index: PackageIndex) -> None:
    """The issue's example: `env: {LD_PRELOAD: ./poison.so}`. The library is the job's to load
    into its own process; loaded into uv's install steps it rewrote a package in the shared uv
    cache, and another project's next job imported the rewritten code."""
    if not shutil.which("gcc"):
        pytest.skip("no C compiler to build the job's library")
    cache = home / "uv-cache"
    project = make_git_project(tmp_path / "a", {
        "train.py": JOB, "requirements.txt": "tinyweb\n", "poison.c": POISON_C % {"cache": cache},
        "gpu.yaml": "env: {LD_PRELOAD: ./poison.so}\n"})
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(project / "poison.so"), str(project / "poison.c")], check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    state, log = _run(project)
    assert state == "done" and "with uv" in log, log
    assert "versions 1.0 clean" in log, log  # the job's own process loads it: nothing there to poison
    assert not (home / "POISON-RAN-IN-UV").exists(), "the job's LD_PRELOAD ran in uv"

    other = make_git_project(tmp_path / "b", {"train.py": JOB, "requirements.txt": "tinyweb\n"})
    state, log = _run(other)
    assert state == "done" and ("sharing environment" in log or "reusing environment" in log), log  # A's
    assert "versions 1.0 clean" in log, log
    assert not [p for p in cache.rglob("__init__.py") if "POISONED" in p.read_text(errors="replace")]


PIP_SHADOW = '''import os, runpy, sys, sysconfig
site = sysconfig.get_paths()["purelib"]
with open(os.path.join(site, "zz_poison.pth"), "w") as f:
    f.write("import os; os.environ['POISONED'] = 'POISONED'\\n")
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != here]
for name in [m for m in sys.modules if m == "pip" or m.startswith("pip.")]:
    del sys.modules[name]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
'''


@pytest.mark.slow
def test_a_project_s_own_code_never_runs_in_pip_s_install_of_a_shared_environment(
        home: Path, tmp_path: Path, uv_index: PackageIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's environment is shared by every project with the same requirements. `python -m pip`
    in the project's folder imported the project's own `pip/` (the working folder comes first
    on the import path), or whatever its PYTHONPATH named, while that environment was writable."""
    monkeypatch.setenv("GPU_ROUTER_INSTALLER", "pip")
    project = make_git_project(tmp_path / "a", {
        "train.py": JOB, "requirements.txt": "tinyweb\n", "pip/__init__.py": "", "pip/__main__.py": PIP_SHADOW,
        "shadow/pip/__init__.py": "", "shadow/pip/__main__.py": PIP_SHADOW,
        "gpu.yaml": "env: {PYTHONPATH: shadow}\n"})
    state, log = _run(project)
    assert state == "done" and "with pip" in log, log
    other = make_git_project(tmp_path / "b", {"train.py": JOB, "requirements.txt": "tinyweb\n"})
    state, log = _run(other)
    assert state == "done" and "reusing environment" in log, log
    assert "versions 1.0 clean" in log, log
    assert not list((home / "venvs").rglob("zz_poison.pth"))


def test_the_person_s_pip_configuration_still_names_the_index_inside_the_sandbox(
        index: PackageIndex, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's home is a fresh one; the person's pip.conf (the index they use) is the one
    file of their home it reads, bound read-only where pip looks for it."""
    index.add_sdist("tinysdist", "1.0", {"tinysdist/__init__.py": "Y = 2\n"})
    person = tmp_path / "person"
    (person / ".config" / "pip").mkdir(parents=True)
    (person / ".config" / "pip" / "pip.conf").write_text(f"[global]\nindex-url = {index.url}\n")
    (person / "private.txt").write_text("not for builds\n")
    for name in ("PIP_INDEX_URL", "PIP_CONFIG_FILE", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(person))
    wh = wheelhouse.build(["tinysdist==1.0"], [], [], KAGGLE_PLATFORM, {}, say=lambda _t: None)
    assert wh.files == ["tinysdist-1.0-py3-none-any.whl"]
    assert (person / ".config" / "pip" / "pip.conf").read_text().startswith("[global]")  # untouched


def test_a_build_with_no_index_has_no_network(hostile: dict, home: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With --no-index and local folders only (here the person's own PIP_FIND_LINKS folder),
    the build needs no network and gets none: its backend cannot reach a port on this machine."""
    import socket

    vendor = tmp_path / "vendor"
    vendor.mkdir()
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        args = {**hostile, "port": srv.getsockname()[1]}
        quiet = PackageIndex(tmp_path / "offline-index")  # only to lay out the sdist's file
        try:
            add_evil_sdist(quiet, args)
        finally:
            quiet.close()
        shutil.copy(quiet.files / "evilpkg-1.0.tar.gz", vendor)
        monkeypatch.delenv("PIP_INDEX_URL")
        monkeypatch.setenv("PIP_FIND_LINKS", str(vendor))
        wh = wheelhouse.build(["evilpkg==1.0"], [], ["--no-index"], KAGGLE_PLATFORM, {}, say=lambda _t: None)
        seen, facts = seen_in_wheel(wh.path / wh.files[0])
    assert seen["network"].startswith("blocked"), seen
    assert_nothing_reached(seen, facts, args)


def test_an_install_step_gets_the_job_s_secrets_and_named_values_never_its_loader_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.runtime import venvbuild

    monkeypatch.setenv("MY_TOKEN", "tok")  # a secret the job was approved to read
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    spec = {"log": str(tmp_path / "job.log"), "secret_env": ["MY_TOKEN"],
            "deps": {"options": ["--extra-index-url http://${HOST_NAME}/simple"], "requirements": ["x"]},
            "env": {"HOST_NAME": "mirror", "LD_PRELOAD": "./poison.so", "PYTHONPATH": "shadow",
                    "PATH": "bin:/usr/bin", "OTHER": "1", "GIT_SSH_COMMAND": "sh evil.sh"}}
    env = venvbuild.install_env(spec, "/usr/bin/python3", {"home": "h"}, str(tmp_path / "s"))
    assert env["MY_TOKEN"] == "tok" and env["HOST_NAME"] == "mirror"
    assert env["PIP_INDEX_URL"] == "http://127.0.0.1:9/simple"
    for name in ("LD_PRELOAD", "PYTHONPATH", "OTHER", "GIT_SSH_COMMAND"):
        assert name not in env, name
    assert not env["PATH"].startswith("bin") and env["PATH"].startswith("/usr/bin")
    assert env["HOME"].startswith(str(tmp_path / "s")) and env["PIP_CACHE_DIR"].startswith(str(tmp_path / "s"))


def test_which_lines_can_resolve_without_running_build_code() -> None:
    """pip builds a URL, path or version-control line even with --only-binary=:all: (to read
    its metadata): only lines by name are wheels-only, and so allowed where no sandbox is."""
    assert wheelhouse.only_wheels(["torch==2.1", "numpy>=1; python_version > '3'",
                                   "x==1 --hash=sha256:" + "0" * 64], ["y<2"], ["--index-url", "http://i/simple"])
    for line in ("x @ https://h/x-1.0.tar.gz", "x @ git+https://h/x.git", "./pkg", "-e ./pkg", "x @ file:///tmp/x"):
        assert not wheelhouse.only_wheels([line], [], []), line
    assert not wheelhouse.only_wheels(["x"], ["x @ https://h/x-1.0.tar.gz"], [])
    assert not wheelhouse.only_wheels(["x"], [], ["--no-binary", "x"])
    assert not wheelhouse.needs_network(["--no-index", "--find-links", "/w"], {})
    assert wheelhouse.needs_network(["--no-index", "--find-links", "https://h/wheels/"], {})
    assert wheelhouse.needs_network([], {}) and not wheelhouse.needs_network([], {"PIP_NO_INDEX": "1"})
