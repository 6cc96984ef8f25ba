"""The `gpu` console script: hand an agent's `gpu submit --json` to the warm server, else run
the command here.

Why: most of a submit's time is Python starting and importing the engine (~110 ms of ~200 ms
on a 2-core machine). A warm server (tui/warm/server.py) has imported it once; for each request
it forks a child that runs the very same `tui.cli.main` on this process's own stdin, stdout and
stderr (passed over the socket), in its environment and folder. So nothing about the command
changes but its start: its output, its errors, its exit status, its Ctrl-C (forwarded here).

Only `gpu submit ... --json` goes there: machine output is always an agent's (core.engine.actor),
so the server never has to tell a person from an agent, and approvals, the PIN and every other
command never pass through it. Anything unusual (no server, another install, a request it
declines, a slow answer) runs the command here, as before; the server is started beside a
running supervisor after such a run (`GPU_ROUTER_WARM=0` turns all of this off).

This module is imported on every `gpu` start: C modules only (`_signal`, not signal.py, whose
enum conversions cost a few ms; see tui/warm/wire.py for the socket).
"""

from __future__ import annotations

import _signal
import os
import sys

from tui.warm import wire

FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)


def main() -> int:
    argv = sys.argv[1:]
    if wire.wanted(argv, os.environ):
        rc = _try_warm(argv)
        if rc is not None:
            _leave(rc)
    from tui.cli import main as run_here

    rc = run_here(argv)
    if rc == 0 and wire.wanted(argv, os.environ):
        _start_server()
    return rc


def _leave(rc: int):  # never returns (typing's NoReturn would cost this light module an import)
    """Exit at once with the child's status. The child wrote the command's output to this
    process's streams itself and nothing here waits on exit handlers; a full interpreter
    shutdown (tearing down every module) was ~10 ms of each warm submit's ~110."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc & 0xFF)


def request(argv: list[str]) -> dict:
    """What the server's child needs to be this process: its words, environment, folder, umask,
    and how its streams encode; `code`, `exe` and `path` (sys.path but the script's folder) make
    sure it runs the same install and would import the same modules."""
    mask = os.umask(0)
    os.umask(mask)
    streams = {}
    for name in ("stdin", "stdout", "stderr"):
        s = getattr(sys, name)
        streams[name] = [getattr(s, "encoding", None) or "utf-8", getattr(s, "errors", None) or "strict",
                         bool(getattr(s, "line_buffering", False))]
    return {"v": 1, "argv": argv, "argv0": sys.argv[0], "cwd": os.getcwd(), "env": dict(os.environ),
            "umask": mask, "exe": os.path.realpath(sys.executable), "code": os.path.dirname(os.path.abspath(__file__)),
            "path": sys.path[1:], "streams": streams}


def _try_warm(argv: list[str]) -> int | None:
    """The command's exit status from the warm server's child, or None to run it here."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        cwd_ok = os.getcwd()
    except OSError:  # a closed stream or a removed folder: the command here says so
        return None
    home = wire.home_dir(os.environ)
    sock = wire.connect(home)
    if sock is None:
        return None
    try:
        try:
            if not wire.is_our_server(sock, home):
                return None
            doc = request(argv)
            doc["cwd"] = cwd_ok
            wire.send_request(sock, doc, [0, 1, 2])
            reader = wire.Lines(sock)
            first = wire.read_line(reader)
            pid = first.get("pid")
            if not isinstance(pid, int) or pid <= 0:
                return None  # declined ({"fallback": why}) or gone: nothing was done
        except (OSError, ValueError):
            return None  # no "go" was sent: the child does nothing and exits
        return _follow(sock, reader, pid)
    finally:
        sock.close()


def _follow(sock, reader: wire.Lines, pid: int) -> int | None:
    """Say `go`, then wait for the child's exit status, passing it the signals a terminal sends
    this process: only those this process did not ignore (under `nohup` a hang-up is not one),
    and a child ended by one of them ends this process the same way."""
    got: list[int] = []

    def forward(signum, _frame):
        got.append(signum)
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    before = {s: _signal.getsignal(s) for s in FORWARDED}
    for signum, handler in before.items():
        if handler != _signal.SIG_IGN:  # (a plain int here, where signal.py gives an enum)
            _signal.signal(signum, forward)

    def restore() -> None:
        for signum, handler in before.items():
            _signal.signal(signum, handler if handler is not None else _signal.SIG_DFL)

    try:
        sock.sendall(b"go\n")
    except OSError:
        restore()
        return None  # the child never heard `go`: it does nothing
    sock.settimeout(None)
    while True:
        try:
            doc = wire.read_line(reader)
        except InterruptedError:
            continue
        except (OSError, ValueError):
            doc = {}
        if not doc:
            restore()
            if got and got[-1] != _signal.SIGINT:  # ended by the signal this process passed on
                _signal.signal(got[-1], _signal.SIG_DFL)
                os.kill(os.getpid(), got[-1])
            from tui.show.output import error

            error("gpu-router's warm server ended this command without an exit status (see "
                  f"{os.path.join(wire.home_dir(os.environ), wire.LOG_NAME)}); run it again, or with {wire.OFF_VAR}=0")
            return 1
        if "rc" in doc:
            restore()
            return int(doc["rc"])
        if "fallback" in doc:  # the child declined before doing anything
            restore()
            return None


def _start_server() -> None:
    """Start the warm server unless one answers already: the next agent's submit then starts
    warm. It serves while a supervisor runs (the one this submit started may still be starting:
    the server waits a little for it) and goes when the supervisor does."""
    home = wire.home_dir(os.environ)
    if not sys.platform.startswith("linux") or not os.path.isabs(home):
        return  # the server needs SO_PEERCRED and /proc; a relative home would move with its folder
    sock = wire.connect(home)
    if sock is not None:
        sock.close()
        return
    import subprocess

    try:
        log = os.open(os.path.join(home, wire.LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        subprocess.Popen([sys.executable, "-P", "-m", "tui.warm.server"], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         cwd="/")  # -P: no folder on its module path; this environment: a client serves only with its own
    except OSError:
        pass
    finally:
        os.close(log)
