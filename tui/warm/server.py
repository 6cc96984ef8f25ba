"""The warm server: gpu-router imported once, a forked child per agent's `gpu submit --json`.

    python -m tui.warm.server      (started by tui/warm/launcher.py; one per GPU_ROUTER_HOME)

What it guarantees (tests/tui/warm/test_warm.py):
- It runs nothing but `gpu submit` with `--json`, parsed by the command's own parser: machine
  output is always an agent's (core.engine.actor), so no request here can pass for a person's,
  and approvals, the PIN and every other command are never served (the client runs them).
- Its child is the client in all but its start: the client's stdin, stdout and stderr (passed
  as descriptors), its environment, folder, umask and stream encodings; `tui.cli.main` runs
  there unchanged. The client forwards its signals (Ctrl-C) to the child.
- It serves only its own user (SO_PEERCRED), only a client of the same install and interpreter
  (the same sys.path) whose GPU_ROUTER_* and PYTHON* settings equal its own (some are read at
  import), and only a client that
  is not a job's by the facts core.engine.jobguard reads from the kernel (ancestors, cgroup,
  sandbox mark, namespaces). Any other request is declined, and the client runs it itself.
- It leaves when the supervisor does (after a short grace at its start), when its socket is
  no longer its own (a removed home), when a module it imported changed on disk (an edited or
  reinstalled gpu-router), and on SIGTERM.
The socket lives in the home folder (0600), out of a job's reach as the home is.
"""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import struct
import sys
import time

from core import paths
from core.engine import daemon, jobguard
from tui.warm import wire
from tui.warm.wire import HANDSHAKE_S, LOCK_NAME, LOG_NAME, SOCKET_NAME

SUPERVISOR_GRACE_S = 10.0  # the supervisor the first submit started may still be starting
CHECK_EVERY_S = 1.0
PER_CALL_ENV = {"GPU_ROUTER_ACTOR", "GPU_ROUTER_WARM", "GPU_ROUTER_DEBUG"}  # read per call, not at import
PARSERS: dict = {}  # the commands' parsers, built once by preload


def preload() -> None:
    """Import what a submit uses and build its parser, so that a child starts with them."""
    from core.config import request, user, yamlfile  # noqa: F401
    from core.engine import actor, cancelling, jobreport, service, sweeps, targets  # noqa: F401 (targets: the providers)
    from core.jobs import store  # noqa: F401
    from core.packaging import bundle, credentials, gate, listing  # noqa: F401
    from core.planning import policy, router, usage  # noqa: F401
    from core.secrets import launch, scan  # noqa: F401
    from tui import cli

    PARSERS["submit"] = cli.build_parser(only="submit")  # each child parses with its copy
    credentials.withheld_reason("warm/.env.example")  # compiles the name rules


def code_files() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every imported module file of gpu-router: a change means a new install."""
    roots = tuple(os.path.dirname(os.path.dirname(os.path.abspath(m.__file__))) + os.sep
                  for m in (sys.modules["core"], sys.modules["tui"]))
    found = {}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and f.startswith(roots):
            try:
                st = os.stat(f)
            except OSError:
                continue
            found[f] = (st.st_mtime_ns, st.st_size)
    return found


def stale(files: dict[str, tuple[int, int]]) -> str | None:
    for f, was in files.items():
        try:
            st = os.stat(f)
        except OSError:
            return f"{f} is gone"
        if (st.st_mtime_ns, st.st_size) != was:
            return f"{f} changed"
    return None


def import_env(env) -> dict[str, str]:
    """The settings that shape what an import does: gpu-router's own (a few are read at import),
    Python's (PYTHONPATH and the like) and the locale (the interpreter set its encodings from
    it at start)."""
    return {k: v for k, v in env.items()
            if (k.startswith("GPU_ROUTER_") and k not in PER_CALL_ENV) or k.startswith("PYTHON")
            or k == "LANG" or k.startswith("LC_")}


_HOME = [""]  # the data dir, found once at start: a removed one is not made again to log into


STATUS_BOUNDS = ("Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff",
                 "CapBnd", "CapAmb")


def confinement(pid: int) -> dict[str, object]:
    """What bounds a process that no namespace shows: its credentials, capabilities, seccomp
    and no-new-privileges (Landlock needs the latter), cgroup, resource limits and security
    label. A child runs with the server's, so a client is served only with the same ones
    (anything unreadable is None, and differs from a readable value)."""
    found: dict[str, object] = {}
    raw = jobguard.read_bytes(f"/proc/{pid}/status")
    lines = dict(line.split(":", 1) for line in (raw or b"").decode(errors="replace").splitlines()
                 if ":" in line)
    for key in STATUS_BOUNDS:
        found[key] = lines[key].split() if key in lines else None
    for name in ("cgroup", "limits", "attr/current"):
        found[name] = jobguard.read_bytes(f"/proc/{pid}/{name}")
    return found


def log(text: str) -> None:
    """One line in warm.log (never a request's words: they may hold an --env value)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        fd = os.open(os.path.join(_HOME[0], LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        os.write(fd, f"{stamp} [{os.getpid()}] {text}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


LOG_KEEP = 256 << 10


def _trim_log() -> None:
    """warm.log keeps its last 256 KiB (a line per request; an agent may submit thousands)."""
    path = os.path.join(_HOME[0], LOG_NAME)
    try:
        if os.path.getsize(path) <= 4 * LOG_KEEP:
            return
        with open(path, "rb") as f:
            f.seek(-LOG_KEEP, os.SEEK_END)
            tail = f.read()
        tail = tail[tail.find(b"\n") + 1:]
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(tail)
        os.replace(tmp, path)
    except OSError:
        pass


class Server:
    def __init__(self) -> None:
        self.home = str(paths.home())
        _HOME[0] = self.home
        self.exe = os.path.realpath(sys.executable)
        self.code = os.path.dirname(os.path.abspath(wire.__file__))
        self.env = import_env(os.environ)
        self.path = sys.path if sys.flags.safe_path else sys.path[1:]  # started with -P: no script folder
        self.lock_fd: int | None = None
        self.listener: socket.socket | None = None
        self.inode: tuple[int, int] | None = None
        self.files: dict[str, tuple[int, int]] = {}
        self.leaving: str | None = None
        self.confinement: dict[str, object] = {}

    # -- life -----------------------------------------------------------------------------

    def start(self) -> bool:
        """Take the lock and the socket; False when another server has them."""
        import fcntl

        fd = os.open(os.path.join(self.home, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.lock_fd = fd
        origin = jobguard.detect()
        if origin is not None:  # started from a job's process: it must never serve anyone
            log(f"not serving: this process is a job's ({origin.reason})")
            return False
        _trim_log()
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # who serves, for `kill` and the tests' cleanup
        preload()
        import threading

        if threading.active_count() != 1:  # a fork copies one thread: never fork beside others
            log(f"not serving: {threading.active_count()} threads after the imports")
            return False
        self.files = code_files()
        self.confinement = confinement(os.getpid())
        path = self._path()
        try:
            os.unlink(path)  # a dead server's: the lock is ours, so no live one uses it
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(64)
        st = os.stat(path)
        self.inode = (st.st_dev, st.st_ino)
        self.listener = sock
        return True

    def _path(self) -> str:
        """The socket's path through the home's descriptor (sockaddr_un holds 107 bytes)."""
        self._dirfd = getattr(self, "_dirfd", None) or os.open(self.home, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self._dirfd}/{SOCKET_NAME}" if os.path.isdir("/proc/self/fd") \
            else os.path.join(self.home, SOCKET_NAME)

    def leave_reason(self, started: float) -> str | None:
        try:
            st = os.stat(os.path.join(self.home, SOCKET_NAME))
            if (st.st_dev, st.st_ino) != self.inode:
                return "its socket was replaced"
        except OSError:
            return "its socket is gone"
        if not daemon.running_pid(wait_s=0) and time.monotonic() - started > SUPERVISOR_GRACE_S:
            return "no supervisor runs"
        return stale(self.files)

    def serve(self) -> str:
        started = time.monotonic()
        last_check = 0.0
        while True:
            _reap()
            now = time.monotonic()
            if now - last_check >= CHECK_EVERY_S:
                last_check = now
                why = self.leave_reason(started)
                if why:
                    return why
            ready, _, _ = select.select([self.listener], [], [], CHECK_EVERY_S)
            if ready:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    continue
                with conn:
                    try:
                        self.accept(conn)
                    except Exception as exc:  # noqa: BLE001 - one bad request never ends the server
                        log(f"a request failed: {type(exc).__name__}: {exc}")
                if self.leaving:
                    return self.leaving

    def stop(self) -> None:
        try:
            st = os.stat(os.path.join(self.home, SOCKET_NAME))
            if (st.st_dev, st.st_ino) == self.inode:
                os.unlink(os.path.join(self.home, SOCKET_NAME))
        except OSError:
            pass

    # -- one request ----------------------------------------------------------------------

    def accept(self, conn: socket.socket) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            log(f"refused a connection from uid {uid}")
            return
        conn.settimeout(HANDSHAKE_S)
        try:
            doc, fds = wire.receive_request(conn, 3)
        except wire.Probe:
            return  # a connection that only checks the server is up
        except (OSError, ValueError) as exc:
            log(f"pid {pid}: unreadable request ({exc})")
            return
        try:
            why = self.decline_reason(doc, fds, pid)
            if why:
                log(f"pid {pid}: declined, {why}")
                conn.sendall(wire.line({"fallback": why}))
                return
            child = os.fork()
            if child == 0:
                self._child(conn, doc, fds, pid)  # never returns
            log(f"pid {pid}: submit served by child {child}")
        finally:
            for fd in fds:
                os.close(fd)

    def decline_reason(self, doc: dict, fds: list[int], pid: int) -> str | None:
        if doc.get("v") != 1 or len(fds) != 3:
            return "a request of another version"
        argv, env = doc.get("argv"), doc.get("env")
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
                and isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
                and isinstance(doc.get("cwd"), str) and isinstance(doc.get("umask"), int)):
            return "a malformed request"
        if not wire.wanted(argv, env):
            return "only an agent's `gpu submit --json` is served here"
        if doc.get("exe") != self.exe or doc.get("code") != self.code or doc.get("path") != self.path:
            return "another install, interpreter or module path"
        if import_env(env) != self.env:
            return "other GPU_ROUTER_* or PYTHON* settings than this server's"
        changed = stale(self.files)
        if changed:  # checked per request too: a child must not run old code beside new modules
            self.leaving = f"gpu-router changed on disk ({changed})"
            return self.leaving
        origin = jobguard.peer_origin(pid)
        if origin is not None:
            return f"the client may be a job's: {origin.reason}"
        differs = [what for what, mine in self.confinement.items() if confinement(pid).get(what) != mine]
        if differs:  # a child here would run with this server's bounds, not the client's
            return f"the client runs under other bounds ({', '.join(differs)})"
        return None

    def _child(self, conn: socket.socket, doc: dict, fds: list[int], peer: int) -> None:
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.listener.close()
            if self.lock_fd is not None:
                os.close(self.lock_fd)
            conn.sendall(wire.line({"pid": os.getpid()}))
            conn.settimeout(HANDSHAKE_S + 2)
            said = b""
            while not said.endswith(b"\n") and len(said) < 8:
                got = conn.recv(8)
                if not got:
                    break
                said += got
        except BaseException:  # noqa: BLE001 - before `go` nothing ran: the client runs it itself
            os._exit(0)
        if said != b"go\n":
            os._exit(0)  # the client gave up waiting and runs the command itself
        rc = 1
        try:
            conn.settimeout(None)
            _die_with_client(conn)
            try:
                _become(doc, fds)
                why, parsed = _not_a_json_submit(doc["argv"])
            except Exception as exc:  # noqa: BLE001 - nothing was done yet: the client runs it
                why = f"could not take on the client: {type(exc).__name__}"
            if why:
                log(f"pid {peer}: declined, {why}")
                conn.sendall(wire.line({"fallback": why}))
                os._exit(0)
            from tui.cli import main

            try:
                rc = main(doc["argv"], parsed)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except KeyboardInterrupt:
                rc = 130
        except BaseException as exc:  # noqa: BLE001 - the client is told, whatever it was
            log(f"pid {peer}: the child failed: {type(exc).__name__}")
            if os.environ.get("GPU_ROUTER_DEBUG") == "1":  # what main lets through for a developer
                import traceback

                traceback.print_exc()
            rc = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        _FINISHED.append(rc)
        try:
            conn.sendall(wire.line({"rc": rc}))
        except OSError:
            pass
        os._exit(rc & 0xFF)


def _become(doc: dict, fds: list[int]) -> None:
    """Take on the client's streams, environment, folder and umask."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)  # only 0, 1 and 2 stay: nothing this runs inherits another copy
    os.environ.clear()
    os.environ.update(doc["env"])
    time.tzset()  # the client's TZ for its timestamps
    os.chdir(doc["cwd"])
    os.umask(doc["umask"])
    sys.argv = [str(doc.get("argv0") or "gpu"), *doc["argv"]]
    streams = doc.get("streams") or {}
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        enc, errors, line = (streams.get(name) or ["utf-8", "strict", False])[:3]
        buffering = 1 if line and mode == "w" else -1  # 1: line-buffered, like the client's
        try:
            stream = io.open(fd, mode, buffering=buffering, encoding=str(enc), errors=str(errors),
                             closefd=False)
        except LookupError:
            stream = io.open(fd, mode, buffering=buffering, encoding="utf-8", closefd=False)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _not_a_json_submit(argv: list[str]) -> tuple[str | None, tuple | None]:
    """Parse as `tui.cli.main` does, silently: (None, the parse) only for `submit` with --json
    (an option's value that reads `--json` is not the flag), else (why, None). A parse error is
    left to the client, which prints it as ever."""
    from contextlib import redirect_stderr, redirect_stdout

    from tui import cli

    sink = io.StringIO()
    try:
        with redirect_stdout(sink), redirect_stderr(sink):
            parsed = cli.parse(argv, PARSERS)
    except (SystemExit, Exception):  # noqa: BLE001
        return "its words do not parse", None
    args = parsed[1]
    if getattr(args, "command", None) != "submit" or getattr(args, "json", False) is not True:
        return "only an agent's `gpu submit --json` is served here", None
    return None, parsed


_FINISHED: list = []  # the child's command is over: its status is being sent (see _die_with_client)


def _die_with_client(conn: socket.socket) -> None:
    """End this child the way the command would have ended had it run in the client: with it.
    The client sends nothing after `go` and leaves only after the exit status, so the end of
    the connection before that is the client killed (an agent's timeout): terminate too. Once
    the status is on its way the client's leaving is the normal end, not a reason to be killed
    (a race with the child's own exit, which warm.log showed as a SIGTERM)."""
    import threading

    def watch() -> None:
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        if not _FINISHED:
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="client-watch", daemon=True).start()


def _reap() -> None:
    """Collect the children that ended, each with a line of its status and CPU time (with the
    git it ran) in warm.log: the figure a latency bench compares, free of wall-clock noise."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        log(f"child {pid}: exit status {os.waitstatus_to_exitcode(status)}, "
            f"CPU {(usage.ru_utime + usage.ru_stime) * 1000:.1f} ms")


def main() -> int:
    server = Server()
    if not server.start():
        return 0
    log(f"serving {server.home} (pid {os.getpid()})")

    def leave(_signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)
    why = "stopped"
    try:
        why = server.serve()
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        server.stop()
        log(f"leaving: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
