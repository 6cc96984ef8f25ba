"""A cloud target that does not answer holds no command (issue 25, point 1).

A Modal target whose endpoint is a loopback socket that accepts and never answers (a tiny
asyncio server this test starts, counting connections), or whose port is closed: the installed
`gpu` and the official `modal` client, unpatched (`MODAL_SERVER_URL` is the client's own
setting). Before the fix `gpu targets` took 59 s (closed port) and 163 s (silent endpoint) and
said "probe failed: "; `gpu submit --provider local` waited as long. Each command here runs
under a subprocess timeout of 30 s and must say what failed; within the failure's memory (60 s)
the next command does not ask again (the silent server counts no new connection).

The probe runner itself (core.providers.probing) is checked in-process: probes run at once
(three probes that each wait for the other two at a barrier all answer), a probe that never
returns is given up at its bound and remembered, and `fresh` asks again.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest

from core.providers import probing
from core.providers.base import TargetInfo
from tests.conftest import make_git_project, run_gpu

TOKEN = "ak-fake0token0id as-fake0token0secret0123"
BOUND_S = 30  # each command's subprocess timeout: it took 59 s and more before


class SilentServer:
    """Accepts every connection on 127.0.0.1, reads what comes, never writes a byte."""

    def __init__(self) -> None:
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._held: list[asyncio.StreamWriter] = []
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self._held.append(writer)
            while await reader.read(65536):
                pass

        server = self._loop.run_until_complete(asyncio.start_server(accepted, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent() -> SilentServer:
    server = SilentServer()
    yield server
    server.close()


def _modal_at(port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_SERVER_URL", f"http://127.0.0.1:{port}")
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    added = run_gpu("targets", "add", "modal", "md", "--token-stdin", "--no-probe", input=TOKEN + "\n")
    assert added.returncode == 0, added.stderr + added.stdout


def _gpu(*args: str, cwd: Path | None = None) -> dict:
    proc = run_gpu(*args, "--json", cwd=cwd, timeout=BOUND_S)
    assert proc.returncode == 0, f"gpu {' '.join(args)}: {proc.stderr}\n{proc.stdout}"
    return json.loads(proc.stdout)


def _md(doc: dict) -> dict:
    return next(t for t in doc["targets"] if t["name"] == "md")


def test_a_modal_endpoint_that_never_answers_holds_no_command(
        silent: SilentServer, keychain, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _modal_at(silent.port, tmp_path, monkeypatch)
    project = make_git_project(tmp_path / "proj", {"train.py": "print('hello from local')\n"})

    # pinned elsewhere: Modal is not asked at all, and colab is refused at once
    sub = _gpu("submit", "train.py", "--provider", "local", cwd=project)
    assert sub["submitted"] is True and sub["job"]["provider"] == "local"
    colab = run_gpu("submit", "train.py", "--provider", "colab", cwd=project, timeout=BOUND_S)
    assert colab.returncode != 0 and "Colab" in colab.stderr + colab.stdout
    assert silent.connections == 0

    # unpinned: the probe gives up at its bound and says so, keeping what Modal would offer
    md = _md(_gpu("targets"))
    assert md["available"] is False and md["why_unavailable"] == "Modal did not answer in 5 s", md
    assert md["details"]["probe_failed"]["remembered"] is False and "T4" in md["offer_prices"]
    asked = silent.connections
    assert asked >= 1

    # within the failure's memory the next command (its own process) does not ask again
    plan = _gpu("plan", "train.py", cwd=project)
    assert plan["plan"]["target"] == "local", plan
    assert "md is unavailable: Modal did not answer in 5 s" in plan["plan"]["passed_over"]["md"]
    again = _md(_gpu("targets"))
    assert again["details"]["probe_failed"]["remembered"] is True
    assert "gpu targets probe md" in again["why_unavailable"]
    assert silent.connections == asked

    # `gpu targets probe` asks again now, within the same bound
    probed = _gpu("targets", "probe", "md")["probe"]
    assert probed["available"] is False and "did not answer" in probed["why_unavailable"]
    assert silent.connections > asked


def test_a_closed_modal_port_is_said_and_remembered(
        keychain, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _modal_at(_closed_port(), tmp_path, monkeypatch)
    project = make_git_project(tmp_path / "proj", {"train.py": "print('hi')\n"})
    md = _md(_gpu("targets"))
    assert md["available"] is False and "Modal" in md["why_unavailable"], md
    plan = _gpu("plan", "train.py", cwd=project)
    assert plan["plan"]["target"] == "local" and "Modal" in plan["plan"]["passed_over"]["md"]
    shown = run_gpu("targets", timeout=BOUND_S)  # the table names the failure too
    assert shown.returncode == 0 and "Modal" in shown.stdout, shown.stdout


def test_a_probe_timeout_is_a_target_option(keychain, home: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, silent: SilentServer) -> None:
    _modal_at(silent.port, tmp_path, monkeypatch)
    from tests.conftest import write_user_config

    path = Path(__import__("os").environ["GPU_ROUTER_CONFIG"])
    write_user_config(path.read_text().replace("kind: modal", "kind: modal, probe_timeout_s: 2"))
    md = _md(_gpu("targets"))
    assert md["why_unavailable"] == "Modal did not answer in 2 s", md


# -- the probe runner, in-process -----------------------------------------------------------------

class Slow:
    """A provider whose probe blocks its thread until `gate` opens (never, unless a test opens it)."""

    kind = "kaggle"
    max_jobs = 1

    def __init__(self, name: str, gate: threading.Event | threading.Barrier, bound: float) -> None:
        self.name, self.gate, self.probe_timeout_s, self.asked = name, gate, bound, 0
        self.options: dict = {}

    async def probe(self) -> TargetInfo:
        self.asked += 1
        if isinstance(self.gate, threading.Barrier):
            self.gate.wait(timeout=60)  # passes only when the other probes wait here too
        else:
            self.gate.wait()  # blocks the loop itself: only the runner's bound ends the wait
        return TargetInfo(name=self.name, kind=self.kind, available=True)


def test_probes_run_at_once(home: Path) -> None:
    barrier = threading.Barrier(3)
    provs = {n: Slow(n, barrier, bound=120) for n in ("a", "b", "c")}
    got = probing.probe_all(provs)
    assert all(i.available for i in got.values()), {n: i.why_unavailable for n, i in got.items()}


def test_a_probe_that_never_returns_is_given_up_remembered_and_asked_again_when_fresh(home: Path) -> None:
    never = threading.Event()
    p = Slow("stuck", never, bound=0.5)
    try:
        first = probing.probe_all({"stuck": p})["stuck"]
        assert not first.available and first.why_unavailable == "Kaggle did not answer in 0.5 s"
        second = probing.probe_all({"stuck": p})["stuck"]
        assert p.asked == 1 and second.details["probe_failed"]["remembered"] is True
        p.probe_timeout_s = 0.6  # a changed target is not judged by its old failure
        probing.probe_all({"stuck": p})
        assert p.asked == 2
        probing.probe_all({"stuck": p}, fresh=True)
        assert p.asked == 3
    finally:
        never.set()


def test_the_bound_counts_from_the_question_not_from_importing_the_client(home: Path) -> None:
    """Importing `modal` takes 5 s on a busy 2-core machine: that is not the service's silence."""

    class SlowImport(Slow):
        def probe_setup(self) -> None:
            threading.Event().wait(3)  # longer than the bound: counted, it would fail the probe

    opened = threading.Event()
    opened.set()
    p = SlowImport("imports", opened, bound=2)
    assert probing.probe_all({"imports": p})["imports"].available is True
