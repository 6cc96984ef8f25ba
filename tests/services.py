"""Real services the tests start and stop themselves, on loopback, from system packages.

A missing package is a failure that names the install step (the README's test command),
never a skip: CI must not pass by testing less.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

INSTALL = ("sudo apt-get install -y dbus gnome-keyring libsecret-tools bubblewrap openssh-server "
           "slurmd slurmctld slurm-client munge (the first part of the README's test command)")


def require(*exes: str) -> dict[str, str]:
    found = {}
    for exe in exes:
        path = shutil.which(exe) or next((p for p in (f"/usr/sbin/{exe}", f"/usr/bin/{exe}")
                                          if os.path.exists(p)), None)
        if path is None:
            pytest.fail(f"{exe} is not installed: {INSTALL}")
        found[exe] = path
    return found


class Keychain:
    """A private D-Bus session with an unlocked gnome-keyring: a real SecretService."""

    def __init__(self, root: Path) -> None:
        exes = require("dbus-daemon", "gnome-keyring-daemon", "dbus-send")
        self.root = root
        home = root / "home"
        runtime = root / "run"
        for d in (home, runtime, home / ".local" / "share"):
            d.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        self.env = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
                    "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(home / ".config")}
        bus = root / "bus"
        self.dbus = subprocess.Popen(
            [exes["dbus-daemon"], "--session", "--nofork", "--nopidfile", "--print-address=1",
             f"--address=unix:path={bus}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env={**os.environ, **self.env})
        address = self.dbus.stdout.readline().strip()
        if not address:
            self.close()
            pytest.fail("dbus-daemon did not start")
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address
        self.keyring = subprocess.Popen(
            [exes["gnome-keyring-daemon"], "--foreground", "--unlock", "--components=secrets"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **self.env})
        self.keyring.stdin.write(b"test-keyring-password")
        self.keyring.stdin.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            out = subprocess.run(
                [exes["dbus-send"], "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/",
                 "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                capture_output=True, text=True, env={**os.environ, **self.env})
            if "true" in out.stdout:
                return
            time.sleep(0.1)
        self.close()
        pytest.fail("gnome-keyring-daemon did not take the org.freedesktop.secrets name")

    def close(self) -> None:
        for proc in (getattr(self, "keyring", None), self.dbus):
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


# a private sshd for one test, on loopback; the system's sshd is untouched. Its sessions get a
# HOME of their own: bash sources ~/.bashrc for every command sshd runs, and this machine's
# (pyenv's `pyenv init -`) takes a lock in `pyenv rehash` on each one. A session the test
# freezes (SIGSTOP) or kills in that window holds the lock or leaves it stale, and every other
# command over ssh on the machine (other hosts, other tests) then waits 60 s for it: a test host
# is a plain host, not the developer's dotfiles.
SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {root}/ssh_host_ed25519_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AllowAgentForwarding no
Subsystem sftp internal-sftp
LogLevel VERBOSE
SetEnv HOME={root}/home
"""


class Sshd:
    """A real OpenSSH server on 127.0.0.1 with its own host key and one user key (ours).

    `known_hosts` trusts the host key; `kill_connections()` kills the per-connection sshd
    processes (what a dropped link looks like to a client); `stop()`/`start()` take the
    listener away and bring it back on the same port."""

    def __init__(self, root: Path) -> None:
        exes = require("sshd", "ssh-keygen")
        self.sshd, keygen = exes["sshd"], exes["ssh-keygen"]
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for name in ("ssh_host_ed25519_key", "id_ed25519", "other_host_key"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)],
                           check=True, capture_output=True)
        (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
        self.key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        self.port = free_port()
        self.config = root / "sshd_config"
        self.config.write_text(SSHD_CONFIG.format(port=self.port, root=root))
        (root / "home").mkdir(exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation needs it
        self.proc: subprocess.Popen | None = None
        self.trust()
        self.start()

    def host_key_line(self, key: str = "ssh_host_ed25519_key") -> str:
        alg, body = (self.root / f"{key}.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {alg} {body}"

    def trust(self) -> None:
        self.known_hosts.write_text(self.host_key_line() + "\n")

    def start(self) -> None:
        self.proc = subprocess.Popen([self.sshd, "-D", "-f", str(self.config), "-E", str(self.root / "sshd.log")],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not _wait_port(self.port, 15, self.proc):
            err = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
            self.close()
            pytest.fail(f"sshd did not start on 127.0.0.1:{self.port}: {err}"
                        f"{(self.root / 'sshd.log').read_text() if (self.root / 'sshd.log').exists() else ''}")

    def connections(self) -> list[int]:
        """The sshd processes serving connections (children of the listener)."""
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_connections(self) -> list[int]:
        pids = self.connections()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        return pids

    def tree(self) -> list[int]:
        """The listener and every process under it (its connections and what they run),
        parents first. A job's launcher detaches (its own session, adopted by init), so the
        job is not among them."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
        children: dict[int, list[int]] = {}
        for line in out.stdout.splitlines():
            pid, ppid = (int(x) for x in line.split())
            children.setdefault(ppid, []).append(pid)
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop(0)
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def freeze(self) -> list[int]:
        """A frozen machine or a partition: sshd and its connections stop (SIGSTOP) with their
        sockets left open, so clients hear nothing and no connection closes; new connections
        are accepted by the kernel and then never answered."""
        self.frozen = self.tree()
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return self.frozen

    def thaw(self) -> None:
        """The host answers again (SIGCONT, children first)."""
        for pid in reversed(getattr(self, "frozen", [])):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []

    def stop(self) -> None:
        """The host goes away: its connections drop and nothing listens on the port. The
        listener is stopped (SIGSTOP) before its connections are listed: a connection it forked
        between the look and its end would outlive it, adopted by init where no look finds it
        (seen under load: a supervisor's reconnect survived, and the host never went away)."""
        self.thaw()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        self.kill_connections()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # stopped: only SIGKILL ends it without a SIGCONT
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def close(self) -> None:
        self.stop()

    def target_options(self, remote_root: Path, python: str) -> dict:
        return {"host": "127.0.0.1", "port": self.port, "user": "root", "key": str(self.key),
                "known_hosts": str(self.known_hosts), "root": str(remote_root), "python": python}


def bin_without(dest: Path, *left_out: str) -> str:
    """A folder of links to every program on this machine's PATH but `left_out`: the PATH of a
    host that has everything else (sh, tar, gzip, ps, python...), e.g. no bubblewrap."""
    dest.mkdir(parents=True, exist_ok=True)
    for folder in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            link = dest / name
            if name in left_out or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(folder, name))
    return str(dest)


def without_bwrap(sshd: "Sshd", scratch: Path) -> "Sshd":
    """`sshd` restarted so that its sessions find no `bwrap` on PATH: a host without bubblewrap.
    sshd takes the first SetEnv line only, so PATH joins the HOME set there."""
    path = bin_without(scratch, "bwrap")
    text = sshd.config.read_text()
    assert "\nSetEnv HOME=" in text
    sshd.config.write_text(text.replace("\nSetEnv HOME=", f"\nSetEnv PATH={path} HOME=", 1))
    sshd.stop()
    sshd.start()
    return sshd


SLURM_CONF = """ClusterName=lab
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/run/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb}{gres} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """A real one-node Slurm (munged, slurmctld, slurmd) with fake GPUs, all under `root`.

    Follows the recipe in ../shared/recipes/slurm: the GPUs are character devices (mknod c 1 3)
    so Slurm sets CUDA_VISIBLE_DEVICES; every client command needs `env` (SLURM_CONF). The
    daemons are stopped by their pid files, never by name."""

    def __init__(self, root: Path, cpus: int = 2, gpus: int = 2, memory_mb: int = 2000) -> None:
        exes = require("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel")
        self.root = root
        for d in ("munge", "state", "spool", "log", "run", "dev"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o700)
        root.chmod(0o755)
        (root / "run").chmod(0o755)
        for i in range(gpus):
            dev = root / "dev" / f"fakegpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        conf = root / "slurm.conf"
        conf.write_text(SLURM_CONF.format(root=root, ctld_port=free_port(), slurmd_port=free_port(),
                                          cpus=cpus, memory_mb=memory_mb,
                                          gres=f" Gres=gpu:fake:{gpus}" if gpus else ""))
        gres = ("AutoDetect=off\n" + (f"NodeName=localhost Name=gpu Type=fake File={root}/dev/fakegpu[0-{gpus - 1}]\n"
                                      if gpus else ""))
        (root / "gres.conf").write_text(gres)
        self.conf = conf
        self.env = {"SLURM_CONF": str(conf)}
        env = {**os.environ, **self.env}
        subprocess.run([exes["munged"], f"--key-file={key}", f"--socket={root}/run/munge.socket",
                        f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
                        f"--seed-file={root}/munge/munged.seed"], check=True, env=env, capture_output=True)
        subprocess.run([exes["slurmctld"], "-f", str(conf)], check=True, env=env, capture_output=True)
        subprocess.run([exes["slurmd"], "-f", str(conf), "-N", "localhost"], check=True, env=env,
                       capture_output=True)
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            for d in ("slurmctld", "slurmd"):
                if not self._alive(d):
                    log = (root / "log" / f"{d}.log")
                    tail = log.read_text()[-1500:] if log.exists() else ""
                    self.close()
                    pytest.fail(f"{d} died while starting; its log ends:\n{tail}")
            out = subprocess.run(["timeout", "5", exes["sinfo"], "-h", "-N", "-o", "%t"], capture_output=True,
                                 text=True, env=env)
            state = out.stdout.strip()
            if state.startswith(("idle", "mix")):
                return
            time.sleep(0.3)
        self.close()
        pytest.fail(f"the Slurm node did not become idle (state {state!r})")

    def _pid(self, daemon: str) -> int | None:
        try:
            return int((self.root / "run" / f"{daemon}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _alive(self, daemon: str) -> bool:
        pid = self._pid(daemon)
        if pid is None:
            return True  # not written yet
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["timeout", str(int(timeout)), *argv], capture_output=True, text=True,
                              env={**os.environ, **self.env}, timeout=timeout + 5)

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "-o", "show", "job", job_id).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return ""

    def close(self) -> None:
        import pwd

        if self._alive("slurmctld") and self._pid("slurmctld"):  # end every job first
            self.run("scancel", "-u", pwd.getpwuid(os.getuid()).pw_name, timeout=15)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.run("squeue", "-h", timeout=10).stdout.strip():
                time.sleep(0.3)
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid = self._pid(daemon)
            if pid is None:
                continue
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
