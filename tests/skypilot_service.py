"""A real SkyPilot API server on this machine, over a real one-node Slurm cluster on loopback.

Follows ../shared/recipes/skypilot/README.md step by step (every workaround there was found
by running it here): Slurm's daemons and a loopback sshd start in a private mount namespace
whose /etc/passwd gives root a scratch home (SkyPilot's Slurm setup writes into the login
user's passwd home, not $HOME) and whose /usr/local/sbin holds a `curl` shim that hands out a
local uv instead of fetching astral.sh, and a `python3.10` (SkyPilot makes its node venv with
`uv venv --python 3.10`); SkyPilot runs from its own venv (core/providers/skypilot/venv.py)
with HOME a scratch folder, telemetry off, SKYPILOT_POD_MEMORY_GB_LIMIT=4, and its network
probe (`_TEST_IP_LIST`, HEAD requests to 8.8.8.8 and 1.1.1.1) pointed at the API server's own
health URL by a `.pth` hook, asserted before the server starts.

Teardown is by PID only: the API server's process group, the PIDs SkyPilot wrote, any process
running this venv's python, the daemons' pid files, sshd's listener and its children; then the
/tmp litter SkyPilot leaves that was not there before the service started.

A missing program is a failure that names the install step (tests/services.py), never a skip.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.services import SLURM_CONF, SSHD_CONFIG, free_port, require

REPO = Path(__file__).resolve().parent.parent
ADAPTER = REPO / "core" / "providers" / "skypilot" / "adapter.py"
INSTALL = ("apt-get install -y rsync openssh-server slurmd slurmctld slurm-client munge "
           "(the first part of the README's test command)")
CLUSTER = "spike"  # the Slurm ClusterName and SkyPilot's name for it (infra slurm/spike)
PRICING = {"cpu": 0.5, "memory": 0.1, "accelerators": {"fake": 2.0}}
# what SkyPilot leaves in /tmp (the recipe's Quirks); removed when it was not there before
LITTER = ("/tmp/uv_cache_{uid}", "/tmp/sky_ssh_*", "/tmp/sky_setup_*", "/tmp/sky_app_*", "/tmp/sky-tmp*",
          "/tmp/tmp*__skypilot:local_skypilot_config_path.yaml", "/tmp/skypilot_graceful_shutdown.lock")

CURL_SHIM = """#!/bin/sh
for a in "$@"; do
  if [ "$a" = "https://astral.sh/uv/install.sh" ]; then
    cat <<'EOF'
set -e
d="${UV_INSTALL_DIR:-$HOME/.local/bin}"
mkdir -p "$d" && cp /usr/local/sbin/uv.local "$d/uv" && chmod 755 "$d/uv"
echo "uv $("$d/uv" --version) installed into $d by the test curl shim"
EOF
    exit 0
  fi
done
exec /usr/bin/curl "$@"
"""

NETCHECK = """import importlib.abc, os, sys
_URL = os.environ.get('SKY_TEST_NETCHECK_URL')
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != 'sky.backends.backend_utils':
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module
        def patched_exec(module):
            exec_module(module)
            module._TEST_IP_LIST = [_URL]
        spec.loader.exec_module = patched_exec
        return spec
if _URL:
    sys.meta_path.insert(0, _Finder())
"""

SSHD_EXTRA = """AllowTcpForwarding yes
MaxSessions 100
MaxStartups 100:30:200
SetEnv SLURM_CONF={conf} SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt UV_NATIVE_TLS=1
"""


def python310() -> str:
    """A real python3.10 binary (not pyenv's shim, a script that needs pyenv's environment)."""
    import uv

    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10.*/bin/python3.10")))
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        found += sorted(glob.glob(f"{root}/versions/3.10.*/bin/python3.10"))
    found += [p for p in ("/usr/bin/python3.10", "/usr/local/bin/python3.10") if os.path.exists(p)]
    if not found:  # one uv installed (`uv python install 3.10`), never downloaded here
        out = subprocess.run([uv.find_uv_bin(), "python", "find", "3.10"], capture_output=True, text=True,
                             env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        found += [out.stdout.strip()] if out.returncode == 0 and out.stdout.strip() else []
    # the binary itself: a link to a shim or a launcher script would not run in the namespace
    found = [subprocess.run([p, "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                            capture_output=True, text=True).stdout.strip() for p in found[:1]]
    if not found or not found[0]:
        pytest.fail("no python3.10 on this machine: SkyPilot makes the node's venv with "
                    "`uv venv --python 3.10` (install one: `uv python install 3.10`, pyenv, or apt)")
    return found[0]


def _children() -> dict[int, list[int]]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    kids: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        pid, ppid = (int(x) for x in line.split())
        kids.setdefault(ppid, []).append(pid)
    return kids


def _tree(pid: int) -> list[int]:
    """`pid` and every process under it, parents first."""
    kids = _children()
    found, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo.extend(kids.get(p, []))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM, a bounded wait, then SIGKILL for what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        if not any(_alive(p) for p in pids):
            return


def _pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class SkyPilotServer:
    """The recipe's whole setup under `root`: Slurm + sshd in a namespace, SkyPilot's venv,
    its API server. `env` is what a SkyPilot client (the adapter) runs with; `slurm(...)` runs a
    Slurm client command; `close()` tears it all down by PID."""

    def __init__(self, root: Path, venv: Path | None = None) -> None:
        exes = require("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "sshd",
                       "ssh-keygen", "unshare", "mount")
        if shutil.which("rsync") is None:
            pytest.fail(f"rsync is not installed (SkyPilot syncs a workdir with it): {INSTALL}")
        self.root = root
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        self._litter_before = self._litter()
        self.api_proc: subprocess.Popen | None = None
        self.sshd_pid: int | None = None
        self.S, self.K, self.NB = root / "slurm", root / "ssh", root / "nsbin"
        self.home = root / "home"
        try:
            self._venv(venv)
            self._cluster(exes)
            self._skypilot_home()
            self._api_server()
        except BaseException:
            self.close()
            raise

    # -- the parts, in the recipe's order --------------------------------------------------
    def _venv(self, venv: Path | None) -> None:
        from core.providers.skypilot import venv as skyvenv

        t = time.monotonic()
        self.venv = venv or self.root / "venv"
        self.python = str(skyvenv.ensure(self.venv))
        self.timings["venv_s"] = time.monotonic() - t
        site = subprocess.run([self.python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "sky_test_netcheck.py").write_text(NETCHECK)
        Path(site, "sky_test_netcheck.pth").write_text("import sky_test_netcheck\n")

    def _cluster(self, exes: dict[str, str]) -> None:
        import uv

        S, K, NB, root = self.S, self.K, self.NB, self.root
        for d in ("munge", "state", "spool", "log", "run", "dev"):
            (S / d).mkdir(parents=True, exist_ok=True)
        for d in (K, NB, root / "rhome", root / "rtmp"):
            d.mkdir(parents=True, exist_ok=True)
        (S / "munge").chmod(0o700)
        for d in (root, S, S / "run"):
            d.chmod(0o755)
        for i in range(2):
            os.mknod(S / "dev" / f"fakegpu{i}", 0o666 | 0o020000, os.makedev(1, 3))
        key = S / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf = S / "slurm.conf"
        conf = SLURM_CONF.format(root=S, ctld_port=free_port(), slurmd_port=free_port(), cpus=4,
                                 memory_mb=8000, gres=" Gres=gpu:fake:2")
        assert conf.startswith("ClusterName=lab\n")
        self.conf.write_text(conf.replace("ClusterName=lab", f"ClusterName={CLUSTER}", 1))
        (S / "gres.conf").write_text(f"AutoDetect=off\nNodeName=localhost Name=gpu Type=fake "
                                     f"File={S}/dev/fakegpu[0-1]\n")
        for name in ("ssh_host_ed25519_key", "id_ed25519"):
            subprocess.run([exes["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(K / name)],
                           check=True, capture_output=True)
        (K / "authorized_keys").write_text((K / "id_ed25519.pub").read_text())
        self.ssh_port = free_port()
        sshd = SSHD_CONFIG.format(port=self.ssh_port, root=K)
        sshd = "".join(line for line in sshd.splitlines(keepends=True) if not line.startswith("SetEnv HOME="))
        (K / "sshd_config").write_text(sshd + SSHD_EXTRA.format(conf=self.conf))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        passwd = []
        for line in Path("/etc/passwd").read_text().splitlines():
            f = line.split(":")
            if len(f) == 7 and f[2] == str(os.getuid()):
                f[5] = str(root / "rhome")
            passwd.append(":".join(f))
        (root / "passwd").write_text("\n".join(passwd) + "\n")
        shutil.copy(uv.find_uv_bin(), NB / "uv.local")
        (NB / "python3.10").symlink_to(python310())
        (NB / "curl").write_text(CURL_SHIM)
        (NB / "curl").chmod(0o755)
        script = (f"set -e\nmount --bind {root}/passwd /etc/passwd\nmount --bind {NB} /usr/local/sbin\n"
                  f"export SLURM_CONF={self.conf}\n"
                  f"{exes['munged']} --key-file={key} --socket={S}/run/munge.socket --pid-file={S}/run/munged.pid"
                  f" --log-file={S}/log/munged.log --seed-file={S}/munge/munged.seed\n"
                  f"{exes['slurmctld']} -f {self.conf}\n{exes['slurmd']} -f {self.conf} -N localhost\n"
                  f"{exes['sshd']} -f {K}/sshd_config -E {K}/sshd.log\n")
        t = time.monotonic()
        done = subprocess.run([exes["unshare"], "--mount", "--propagation", "private", "--", "bash", "-c", script],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            pytest.fail(f"starting Slurm and sshd in a private mount namespace failed: {done.stderr[-1500:]}")
        deadline = time.monotonic() + 30  # sshd's daemon writes its pid file after its parent exits
        while (pid := _pidfile(K / "sshd.pid")) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self.sshd_pid = pid
        if self.sshd_pid is None:
            pytest.fail(f"sshd did not start in the namespace: {(K / 'sshd.log').read_text()[-1500:]}")
        deadline = time.monotonic() + 90
        state = ""
        while time.monotonic() < deadline:
            state = self.slurm("sinfo", "-h", "-N", "-o", "%t").stdout.strip()
            if state.startswith(("idle", "mix")):
                self.timings["slurm_s"] = time.monotonic() - t
                return
            time.sleep(0.5)
        log = S / "log" / "slurmctld.log"
        pytest.fail(f"the Slurm node did not become idle (state {state!r}); slurmctld.log ends:\n"
                    f"{log.read_text()[-1500:] if log.exists() else ''}")

    def _skypilot_home(self) -> None:
        home = self.home
        (home / ".slurm").mkdir(parents=True)
        cfg = home / ".slurm" / "config"
        cfg.write_text(f"Host {CLUSTER}\n  HostName 127.0.0.1\n  Port {self.ssh_port}\n  User root\n"
                       f"  IdentityFile {self.K}/id_ed25519\n  IdentitiesOnly yes\n")
        cfg.chmod(0o600)
        sky = home / ".sky"
        (sky / "catalogs" / "v8" / "common").mkdir(parents=True)
        (sky / "catalogs" / "v8" / "common" / "accelerators.csv").write_text("AcceleratorName,Clouds\n")
        # JSON is YAML: the config written without a YAML library in this process
        (sky / "config.yaml").write_text(json.dumps({
            "allowed_clouds": ["slurm"],
            "jobs": {"controller": {"consolidation_mode": True}},
            "slurm": {"cluster_configs": {CLUSTER: {"tmpdir": str(self.root / "rtmp")}},
                      "pricing": PRICING},
        }, indent=1) + "\n")
        self.api_port = free_port()
        self.env = {
            "HOME": str(home), "PATH": f"{self.venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "DO_NOT_TRACK": "1", "SCARF_NO_ANALYTICS": "1",
            "SKYPILOT_API_SERVER_LOCAL_PORT": str(self.api_port), "SKYPILOT_POD_MEMORY_GB_LIMIT": "4",
            "SKY_TEST_NETCHECK_URL": f"http://127.0.0.1:{self.api_port}/api/health",
            "LANG": "C.UTF-8", "TMPDIR": "/tmp",
        }
        guard = subprocess.run(
            [self.python, "-c", "import os, sky.backends.backend_utils as b; "
             "assert b._TEST_IP_LIST == [os.environ['SKY_TEST_NETCHECK_URL']], b._TEST_IP_LIST"],
            capture_output=True, text=True, env=self.env, timeout=300)
        if guard.returncode != 0:
            pytest.fail("the network-probe guard did not take (SkyPilot renamed "
                        f"backend_utils._TEST_IP_LIST?): {guard.stderr[-1500:]}")

    def _api_server(self) -> None:
        t = time.monotonic()
        self.api_log = self.root / "api_server.log"
        with open(self.api_log, "wb") as log:
            self.api_proc = subprocess.Popen(
                [f"{self.venv}/bin/sky", "api", "start", "--foreground"], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.root, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.api_proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.env["SKY_TEST_NETCHECK_URL"], timeout=5) as r:
                    if json.loads(r.read()).get("status") == "healthy":
                        self.timings["api_start_s"] = time.monotonic() - t
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        pytest.fail(f"the SkyPilot API server did not become healthy; its log ends:\n"
                    f"{self.api_log.read_text()[-2000:]}")

    # -- use ----------------------------------------------------------------------------------
    def slurm(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["timeout", str(int(timeout)), *argv], capture_output=True, text=True,
                              env={**os.environ, "SLURM_CONF": str(self.conf)}, timeout=timeout + 5)

    def allocations(self) -> list[str]:
        """Slurm's live jobs (id, name, state), one line each."""
        return self.slurm("squeue", "-h", "-o", "%i %j %T").stdout.split("\n")[:-1]

    # -- teardown, by PID only ----------------------------------------------------------------
    def _litter(self) -> set[str]:
        found: set[str] = set()
        for pattern in LITTER:
            found.update(glob.glob(pattern.format(uid=os.getuid())))
        return found

    def _venv_processes(self) -> list[int]:
        """Processes running this service's venv python (SkyPilot's detached helpers: skylet,
        subprocess_daemon.py, controllers), found by the executable's path in /proc."""
        mine = []
        venv = str(getattr(self, "venv", self.root / "venv"))
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                exe = os.readlink(f"/proc/{name}/exe")
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
            except OSError:
                continue
            if argv0.startswith(venv + "/") or exe.startswith(venv + "/"):
                mine.append(int(name))
        return mine

    def _ssh_masters(self) -> list[int]:
        """SkyPilot's ssh ControlMaster processes (`ssh: /tmp/sky_ssh_<hash>/... [mux]`, adopted
        by init) whose control folder this service made."""
        ours = tuple(p + "/" for p in self._litter() - self._litter_before if "/sky_ssh_" in p)
        found = []
        for name in os.listdir("/proc") if ours else ():
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace")
            except OSError:
                continue
            if argv.startswith("ssh") and any(p in argv for p in ours):
                found.append(int(name))
        return found

    def close(self) -> None:
        if self.api_proc is not None and self.api_proc.poll() is None:
            pids = _tree(self.api_proc.pid)
            try:
                os.killpg(self.api_proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _kill(pids, grace=15)
            try:
                os.killpg(self.api_proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.api_proc.wait(10)
        controllers = []
        for path in glob.glob(str(self.home / ".sky" / "*pid*")):
            controllers += [int(w) for w in Path(path).read_text().split() if w.isdigit()] if Path(path).is_file() else []
        _kill([p for p in controllers if _alive(p)] + self._venv_processes(), grace=5)
        if getattr(self, "conf", None) is not None and _pidfile(self.S / "run" / "slurmctld.pid"):
            self.slurm("scancel", "--full", "--user", "root", timeout=15)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.allocations():
                time.sleep(0.5)
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid = _pidfile(self.S / "run" / f"{daemon}.pid")
            if pid and _alive(pid):
                _kill([pid])
        self.sshd_pid = self.sshd_pid or _pidfile(self.K / "sshd.pid")
        if self.sshd_pid and _alive(self.sshd_pid):
            pids = _tree(self.sshd_pid)
            _kill(pids[1:], grace=2)  # the per-connection sshd processes and what they run
            _kill([self.sshd_pid])
        _kill(self._venv_processes() + self._ssh_masters(), grace=5)  # what a connection had left
        for path in self._litter() - self._litter_before:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def adapter_command(server: SkyPilotServer) -> list[str]:
    return [server.python, str(ADAPTER)]


if __name__ == "__main__":  # a by-hand run: set up, print the timings, tear down
    import tempfile

    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="skypilot-") as d:
        s = SkyPilotServer(Path(d))
        print(json.dumps(s.timings), s.allocations(), flush=True)
        s.close()
