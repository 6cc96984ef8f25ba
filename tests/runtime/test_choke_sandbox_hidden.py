"""What the sandbox hides stays hidden wherever it lies (issue 40).

core/runtime/boundary.bwrap_argv binds the system folders (/usr, /etc, /opt, /nix, ...) read-only
into a job's sandbox; gpu-router's home, its config and the person's home are hidden. A hidden
place outside the bound folders is simply never bound; one under a bound system folder (a home
in /opt/gpu-router, a config in /etc/gpu-router) would be visible read-only unless an empty
tmpfs covers it. Here the command line is replayed as bubblewrap mounts it: for any hidden
path, wherever it lies, what the job sees there is an empty tmpfs or nothing, and under a
system folder the argv holds exactly `--tmpfs <path>`; the job's own folders inside it still
show. One real bubblewrap run shows a job cannot read a home placed under /opt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.runtime import boundary

# bubblewrap's options that mount something at a place: (option, how many words follow, the
# index of the place among them, what it is)
MOUNTS = {"--ro-bind": (2, 1, "bind"), "--bind": (2, 1, "bind"), "--ro-bind-try": (2, 1, "bind"),
          "--dev-bind-try": (2, 1, "bind"), "--dev-bind": (2, 1, "bind"), "--tmpfs": (1, 0, "tmpfs"),
          "--proc": (1, 0, "proc"), "--dev": (1, 0, "dev"), "--symlink": (2, 1, "link"),
          "--remount-ro": (1, 0, None)}
TAKES_ONE = {"--uid", "--gid", "--hostname", "--cap-drop", "--chdir", "--setenv"}


def mounts(argv: list[str]) -> list[tuple[str, str, str]]:
    """(what, source, place) of each mount, in the order bubblewrap makes them."""
    out, i = [], 1
    while i < len(argv) and argv[i] != "--":
        opt = argv[i]
        if opt in MOUNTS:
            n, at, what = MOUNTS[opt]
            words = argv[i + 1:i + 1 + n]
            if what:
                out.append((what, words[0] if n == 2 else "", os.path.normpath(words[at])))
            i += 1 + n
        elif opt in TAKES_ONE:
            i += 2 + (opt == "--setenv")
        else:
            i += 1
    return out


def seen_at(argv: list[str], path: str) -> tuple[str, str] | None:
    """What the job sees at `path`: the last mount at it or above it (a later mount above covers
    an earlier one below), as (what, the source path it shows), or None: nothing is there."""
    path = os.path.normpath(path)
    last = None
    for what, src, place in mounts(argv):
        if path == place or path.startswith(place.rstrip("/") + "/"):
            last = (what, src + path[len(place):] if what == "bind" else "")
    return last


def assert_hidden(argv: list[str], path: str) -> None:
    seen = seen_at(argv, path)
    assert seen is None or seen[0] == "tmpfs", f"{path} is visible in the sandbox as {seen}"


def _plan(root: Path, hide: list[str], ro=(), rw=()) -> dict:
    work = root / "work"
    work.mkdir(exist_ok=True)
    return {"ro": list(ro), "rw": [str(work), *rw], "hide": hide, "workdir": str(work),
            "mark": "", "network": False, "devices": []}


SYSTEM = ("usr", "etc", "opt", "nix")
ELSEWHERE = ("home", "tmp", "srv", "data")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(places=st.lists(st.tuples(st.sampled_from(SYSTEM + ELSEWHERE),
                                 st.lists(st.sampled_from(["gpu-router", "ada", ".config", "x y", "home"]),
                                          min_size=1, max_size=3)),
                       min_size=1, max_size=4),
       own=st.booleans())
def test_any_hidden_path_is_covered_wherever_it_lies(places, own: bool) -> None:
    """For any hidden paths under system folders and elsewhere (nested in one another too),
    each shows nothing or an empty tmpfs; under a system folder `--tmpfs <path>` is there for
    the outermost of them; a job's own folder inside one still shows."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        system = tuple(str(root / s) for s in SYSTEM)
        for s in system:
            os.makedirs(s)
        hide = []
        for top, parts in places:
            p = root.joinpath(top, *parts)
            p.mkdir(parents=True, exist_ok=True)
            (p / "store.db").write_text("x")
            hide.append(str(p))
        ro = []
        if own:  # the job's code inside the first hidden place (the local target's layout)
            code = Path(hide[0]) / "jobs" / "j1" / "code"
            code.mkdir(parents=True)
            ro.append(str(code))
        old = boundary.SYSTEM_RO
        boundary.SYSTEM_RO = system
        try:
            argv = boundary.bwrap_argv("bwrap", _plan(root, hide, ro=ro), ["true"])
        finally:
            boundary.SYSTEM_RO = old
        outer = boundary._outermost(hide)
        for p in hide:
            assert_hidden(argv, p)
            assert_hidden(argv, os.path.join(p, "store.db"))
        for p in outer:
            under_system = any(p.startswith(s + "/") for s in system)
            pairs = list(zip(argv, argv[1:]))
            assert (("--tmpfs", p) in pairs) == under_system, (p, argv)
        for p in ro:
            assert seen_at(argv, p) == ("bind", p), f"the job's own {p} does not show: {argv}"


@pytest.mark.parametrize("top", ["/usr", "/etc", "/opt", "/usr/local/share"])
def test_a_home_under_a_system_folder_gets_its_own_tmpfs(top: str, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """The real system folders: gpu-router's home and config placed under each (where this
    machine lets a test make a folder there), as `buildbox.hidden()` lists them for a job. (/nix
    is not made on a machine without one: the property above covers it.)"""
    from core.packaging.buildbox import hidden

    base = Path(top) / f"gr-choke-{uuid.uuid4().hex[:8]}"
    try:
        base.mkdir()
        (base / "home").mkdir()
        (base / "conf").mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a folder under {top} here: {e}")
    try:
        monkeypatch.setenv("GPU_ROUTER_HOME", str(base / "home"))
        monkeypatch.setenv("GPU_ROUTER_CONFIG", str(base / "conf" / "config.yaml"))
        hide = hidden()
        assert str(base / "home") in hide and str(base / "conf") in hide
        argv = boundary.bwrap_argv("bwrap", _plan(tmp_path, hide), ["true"])
        pairs = list(zip(argv, argv[1:]))
        assert ("--tmpfs", str(base / "home")) in pairs, argv
        assert ("--tmpfs", str(base / "conf")) in pairs, argv
        for p in hide:
            assert_hidden(argv, p)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _bwrap_works() -> str | None:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return None
    try:
        ok = subprocess.run([bwrap, "--unshare-user", "--ro-bind", "/", "/", "true"],
                            capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bwrap if ok else None


def test_a_real_job_cannot_read_a_home_placed_under_opt(tmp_path: Path) -> None:
    """bubblewrap itself: the home under /opt holds a store and a job folder; the job reads its
    own code there and sees neither the store nor the folder's other files."""
    bwrap = _bwrap_works()
    if bwrap is None:
        pytest.skip("bubblewrap cannot make a sandbox here")
    base = Path("/opt") / f"gr-choke-{uuid.uuid4().hex[:8]}"
    try:
        (base / "home" / "jobs" / "j1" / "code").mkdir(parents=True)
    except OSError as e:
        pytest.skip(f"cannot make a folder under /opt here: {e}")
    try:
        home = base / "home"
        (home / "store.db").write_text("the store\n")
        code = home / "jobs" / "j1" / "code"
        (code / "train.py").write_text("print('hi')\n")
        script = (f"cat {code}/train.py; ls -A {home}; cat {home}/store.db 2>/dev/null || echo no-store; "
                  f"ls -A {base}")
        plan = _plan(tmp_path, [str(home)], ro=[str(code)])
        argv = boundary.bwrap_argv(bwrap, plan, ["/bin/sh", "-c", script])
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert lines[0] == "print('hi')"  # its own code shows through
        assert "store.db" not in out.stdout and "the store" not in out.stdout, out.stdout
        assert "no-store" in lines, out.stdout
        # the control: without the hide, the same job reads the store (so the test can fail)
        plan["hide"] = []
        seen = subprocess.run(boundary.bwrap_argv(bwrap, plan, ["/bin/sh", "-c", script]),
                              capture_output=True, text=True, timeout=60)
        assert "the store" in seen.stdout, seen
    finally:
        shutil.rmtree(base, ignore_errors=True)
