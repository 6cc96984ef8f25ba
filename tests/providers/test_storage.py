"""Caches stay bounded: `gpu gc` frees least-recently-used entries, never what a job needs."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core.engine import storage
from core.jobs.states import State
from core.jobs.store import Store
from tests.conftest import gpu_json, run_gpu
from tests.props import examples

DAY = 86400.0


def _bundle(home: Path, key: str, size: int, age_s: float) -> Path:
    path = home / "bundles" / f"{key}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def _venv(root: Path, key: str, size: int, age_s: float) -> Path:
    venv = root / "venvs" / key
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "blob").write_bytes(os.urandom(size))
    (venv / ".ready").write_text("{}")
    then = time.time() - age_s
    for p in (venv / ".ready", venv / "lib" / "blob", venv):
        os.utime(p, (then, then))
    return venv


def _job(store: Store, n: int, bundle: str, state: State | None = None, provider: str = "local") -> None:
    store.insert_job({"id": f"{n:032x}", "short_id": f"{n:08x}", "name": "t", "provider": provider,
                      "project_dir": "/p", "outputs_dir": "/p/runs/x", "fingerprint": f"fp{n}",
                      "bundle_hash": bundle, "request": {"script": "a.py"}}, reason="test", actor="test")
    if state is not None:
        for s in (State.ROUTING, State.PROVISIONING, State.RUNNING, state):
            store.transition(f"{n:032x}", s, "test", actor="test")


def _config(home: Path, text: str) -> None:
    Path(os.environ["GPU_ROUTER_CONFIG"]).write_text(text)


def test_gc_frees_least_recently_used_until_under_the_cap(home: Path) -> None:
    store = Store()
    for i in range(6):  # 100 KB each, the oldest first: b0 is 6 days old, b5 one day old
        _bundle(home, f"b{i}", 100_000, (6 - i) * DAY)
    _job(store, 1, "b0", State.DONE)  # b0 was used (job updated) just now: most recent
    _config(home, "storage: {home_cap_gb: 0.00035}\n")  # 350 KB: three of six must go

    dry = gpu_json("gc", "--dry-run")["locations"][0]
    assert [e["key"] for e in dry["evict"]] == ["b1", "b2", "b3"]
    assert dry["freed"] == 0 and all((home / "bundles" / f"b{i}.tar.gz").exists() for i in range(6))

    done = gpu_json("gc")["locations"][0]
    assert [e["key"] for e in done["evict"]] == ["b1", "b2", "b3"]
    assert done["freed"] >= 300_000
    left = sorted(p.name for p in (home / "bundles").iterdir())
    assert left == ["b0.tar.gz", "b4.tar.gz", "b5.tar.gz"]
    assert gpu_json("gc")["locations"][0]["evict"] == []  # under the cap now


def test_gc_never_frees_what_a_live_job_needs_or_what_was_just_used(home: Path) -> None:
    store = Store()
    _bundle(home, "live", 50_000, 30 * DAY)
    _bundle(home, "fresh", 50_000, 60)  # written a minute ago: a launch may rely on it
    _bundle(home, "old", 50_000, 30 * DAY)
    _job(store, 1, "live")  # queued: it will need its bundle at launch
    doc = gpu_json("gc", "--all")["locations"][0]
    assert [e["key"] for e in doc["evict"]] == ["old"]
    assert (home / "bundles" / "live.tar.gz").exists() and (home / "bundles" / "fresh.tar.gz").exists()
    loc = storage.home(Store(), None, everything=True, dry_run=True)
    why = {e.key: e.keep for e in loc.entries}
    assert why["live"] == "a live job needs it" and why["fresh"].startswith("used in the last")


def test_a_venv_a_job_holds_is_kept_until_it_lets_go(home: Path) -> None:
    venv = _venv(home, "deps1", 20_000, 30 * DAY)
    lock = home / "venvs" / "deps1.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(lock)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_SH)\n"
        "print('held', flush=True); sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        doc = gpu_json("gc", "--all")["locations"][0]
        assert doc["evict"] == [] and venv.exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    doc = gpu_json("gc", "--all")["locations"][0]
    assert [e["key"] for e in doc["evict"]] == ["deps1"] and not venv.exists()
    # and the lock is taken while removing, so a launcher arriving then waits for it
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_target_host_frees_its_own_caches(home: Path, tmp_path: Path) -> None:
    """A slurm target on this machine (`local: true`) has the remote layout and runs the same
    scan on its host's Python: old entries go, what a live job on it needs stays."""
    root = tmp_path / "host-root"
    for key in ("old1", "old2", "mine"):
        entry = root / "data" / key
        entry.mkdir(parents=True)
        (entry / "part").write_bytes(os.urandom(30_000))
        (root / "data" / f"{key}.ready").touch()
        then = time.time() - 9 * DAY
        for p in (entry / "part", entry, root / "data" / f"{key}.ready"):
            os.utime(p, (then, then))
    _bundle(root, "bun", 10_000, 9 * DAY)
    (root / "bundles" / "bun.ready").touch()
    _config(home, f"targets:\n  lab: {{kind: slurm, local: true, root: {root}, cache_cap_gb: 0.00001}}\n")
    store = Store()
    _job(store, 7, "bun", provider="lab")
    store.update(f"{7:032x}", plan={"data": {"d": "mine"}})

    doc = {loc["where"]: loc for loc in gpu_json("gc", "--where", "lab")["locations"]}
    assert set(doc) == {"lab"} and doc["lab"]["error"] is None
    assert sorted(e["key"] for e in doc["lab"]["evict"]) == ["old1", "old2"]
    assert sorted(p.name for p in (root / "data").iterdir()) == ["mine", "mine.ready"]
    assert (root / "bundles" / "bun.tar.gz").exists()


def test_a_hosts_objects_go_with_the_last_manifest_that_names_them(home: Path, tmp_path: Path) -> None:
    """On a target host (the remote layout: bundles/<hash>.json over objects/), `gpu gc` that
    removes a manifest frees the objects only it named; an object another manifest still
    names stays, and so does everything a live job's manifest needs."""
    import hashlib
    import json

    root = tmp_path / "host-root"
    then = time.time() - 9 * DAY

    def obj(content: bytes) -> str:
        h = hashlib.sha256(content).hexdigest()
        path = root / "objects" / h[:2] / h[2:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, (then, then))
        return h

    shared, only_old, only_live = obj(os.urandom(40_000)), obj(os.urandom(50_000)), obj(os.urandom(30_000))
    stray = obj(os.urandom(20_000))  # no manifest names it (a submit that stopped halfway)
    for key, names in (("old", [shared, only_old]), ("live", [shared, only_live])):
        rows = [[f"f{i}.bin", "f", h, 1] for i, h in enumerate(names)]
        manifest = root / "bundles" / f"{key}.json"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"version": 1, "entries": rows}))
        (root / "bundles" / f"{key}.ready").touch()
        for p in (manifest, root / "bundles" / f"{key}.ready"):
            os.utime(p, (then, then))
    _config(home, f"targets:\n  lab: {{kind: slurm, local: true, root: {root}}}\n")
    _job(Store(), 7, "live", provider="lab")  # queued: it needs its bundle at launch

    dry = gpu_json("gc", "--where", "lab", "--all", "--dry-run")["locations"][0]
    sizes = {e["key"]: e["bytes"] for e in dry["evict"]}
    assert sizes["old"] >= 50_000 > sizes["old"] - 40_000  # its manifest and only_old: not shared
    doc = gpu_json("gc", "--where", "lab", "--all")["locations"][0]
    assert doc["error"] is None and sorted(e["key"] for e in doc["evict"]) == ["objects", "old"]
    left = {p.parent.name + p.name for p in (root / "objects").glob("??/*")}
    assert left == {shared, only_live} and stray not in left
    assert sorted(p.name for p in (root / "bundles").iterdir()) == ["live.json", "live.ready"]
    assert doc["freed"] >= 70_000


def test_gc_help_and_bad_location(home: Path) -> None:
    assert "--dry-run" in run_gpu("gc", "--help").stdout
    bad = run_gpu("gc", "--where", "nowhere")
    assert bad.returncode == 2 and "no cache location named nowhere" in bad.stderr


def test_the_upload_cache_takes_only_whole_uploads(home: Path, tmp_path: Path) -> None:
    """A host's cache entry counts once its `.ready` marker exists, and the marker is written
    only after the upload's size was checked and it was moved into place: a part that arrived
    short is removed, and nothing is put in place or marked (the next launch sends it again)."""
    import asyncio

    from core.providers.ssh import SSHProvider
    from core.transport.base import CommandFailed
    from core.transport.local import LocalTransport

    root = tmp_path / "host-root"
    box = SSHProvider("box", LocalTransport("box"), root=str(root), python=sys.executable)
    local = tmp_path / "blob.bin"
    local.write_bytes(os.urandom(50_000))
    tree = tmp_path / "tree.tar.gz"
    subprocess.run(["tar", "-czf", str(tree), "-C", str(tmp_path), "blob.bin"], check=True)

    async def go() -> list[int]:
        await box.remote()
        d = f"{root}/data"
        sent = [await box._upload_file(local, f"{d}/f", f"{d}/f.ready"),
                await box._upload_tree(tree, f"{d}/t", f"{d}/t.ready"),
                await box._upload_tree(tree.read_bytes(), f"{d}/b", f"{d}/b.ready")]
        (root / "data" / "cut.part").write_bytes(local.read_bytes()[:1000])  # the link dropped
        try:
            await box._settle(f"{d}/cut.part", local.stat().st_size, f'mv -f "$p" {d}/cut', f"{d}/cut.ready",
                              check="storing cut")
        except CommandFailed as exc:
            assert "the upload arrived incomplete" in str(exc)
        else:
            raise AssertionError("a short upload was taken as complete")
        return sent

    sent = asyncio.run(go())
    data = root / "data"
    assert sent[0] == local.stat().st_size and sent[1] == sent[2] == tree.stat().st_size
    assert (data / "f").read_bytes() == local.read_bytes()
    assert (data / "t" / "blob.bin").read_bytes() == (data / "b" / "blob.bin").read_bytes() == local.read_bytes()
    assert sorted(p.name for p in data.iterdir()) == ["b", "b.ready", "f", "f.ready", "t", "t.ready"]


HEX = "0123456789abcdef"


@given(st.lists(st.sampled_from(["known", "other", "path", "junk"]), max_size=12), st.data())
@settings(max_examples=examples(100), deadline=None)
def test_a_hosts_missing_answer_never_chooses_a_file_to_send(kinds: list[str], data) -> None:
    """Property of the one choke point between a host's "I lack these" answer and what is
    packed here: whatever the host answers (paths, other hashes, junk), only objects the
    manifest names are sent, each once."""
    from core.providers.remotecache import objects_to_send

    names = set(data.draw(st.lists(st.text(HEX, min_size=64, max_size=64), min_size=1, max_size=5)))
    words = []
    for kind in kinds:
        if kind == "known":
            words.append(data.draw(st.sampled_from(sorted(names))))
        elif kind == "other":
            words.append(data.draw(st.text(HEX, min_size=64, max_size=64)))
        elif kind == "path":
            words.append(data.draw(st.sampled_from(["../../.ssh/id_rsa", "/etc/passwd", "ab/../../x",
                                                    "~/.netrc", "./" + sorted(names)[0]])))
        else:
            words.append(data.draw(st.text(min_size=1, max_size=80)))
    answer = data.draw(st.sampled_from(["\n", " ", "\r\n", "\t"])).join(words)
    sent = objects_to_send(answer, names)
    assert set(sent) <= names and len(sent) == len(set(sent))
    assert set(sent) == names & set(answer.split())


def test_a_hostile_host_gets_only_the_bundles_objects(home: Path, tmp_path: Path) -> None:
    """A host whose `missing` answer also names a local path (`..` + an absolute path is where
    objects/<d[:2]>/<d[2:]> would lead) and a hash the manifest lacks is sent the bundle's
    objects and nothing else (the bytes sent stay far under the secret's)."""
    import asyncio
    import types

    from core.packaging.bundle import make_bundle
    from core.providers.ssh import SSHProvider
    from core.transport.local import LocalTransport
    from tests.conftest import make_git_project

    secret = tmp_path / "secret.bin"
    secret.write_bytes(os.urandom(300_000))
    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n", "b.txt": "b\n"})
    bundle = make_bundle(project)
    fake = tmp_path / "hostpy"
    fake.write_text(f"#!/bin/sh\nif [ \"$3\" = missing ]; then {sys.executable} \"$@\"; "
                    f"echo ..{secret}; echo ../../../../{secret}; echo {'e' * 64}; exit 0; fi\n"
                    f"exec {sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    root = tmp_path / "host-root"
    box = SSHProvider("box", LocalTransport("box"), root=str(root), python=str(fake))

    async def go() -> tuple[str, int]:
        await box.remote()
        return await box._ensure_bundle(types.SimpleNamespace(bundle_hash=bundle.hash))

    manifest, sent = asyncio.run(go())
    want = {r[2] for r in bundle.manifest if r[1] != "l"}
    assert {p.parent.name + p.name for p in (root / "objects").glob("??/*")} == want
    assert Path(manifest).read_bytes() == bundle.path.read_bytes()
    assert sent < 20_000
    assert sorted(p.name for p in (root / "bundles").iterdir()) == [f"{bundle.hash}.json", f"{bundle.hash}.ready"]


def test_a_host_that_held_the_bundle_as_an_archive_gets_its_manifest(home: Path, tmp_path: Path) -> None:
    """A host whose cache predates objects has `bundles/<hash>.tar.gz` and its `.ready` marker
    for the same hash: the marker alone is not taken as the manifest, which is sent, and the
    job's code folder builds from it."""
    import asyncio
    import subprocess as sp
    import types

    from core.packaging.bundle import make_bundle
    from core.providers.ssh import SSHProvider
    from core.transport.local import LocalTransport
    from tests.conftest import make_git_project

    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    bundle = make_bundle(project)
    root = tmp_path / "host-root"
    (root / "bundles").mkdir(parents=True)
    (root / "bundles" / f"{bundle.hash}.tar.gz").write_bytes(b"an old archive")
    (root / "bundles" / f"{bundle.hash}.ready").touch()
    box = SSHProvider("box", LocalTransport("box"), root=str(root), python=sys.executable)

    async def go() -> tuple[str, int]:
        await box.remote()
        return await box._ensure_bundle(types.SimpleNamespace(bundle_hash=bundle.hash))

    manifest, sent = asyncio.run(go())
    assert sent > 0 and Path(manifest).read_bytes() == bundle.path.read_bytes()
    from core.runtime import codetree

    sp.run([sys.executable, codetree.__file__, "build", manifest, str(root / "objects"), str(tmp_path / "code")],
           check=True, capture_output=True)
    assert (tmp_path / "code" / "a.py").read_text() == "print('hi')\n"


def test_a_live_jobs_earlier_attempts_cluster_is_not_needed(home: Path) -> None:
    """SkyPilot clusters are named by their job's short id and attempt (`gr-<job>-a<N>`): a live
    job needs its current attempt's cluster only. One left up by an earlier attempt (its take
    down failed) was kept by `gpu gc` as long as the job lived, paying beside the live one."""
    store = Store()
    _job(store, 7, "b", provider="sky")
    for state in (State.ROUTING, State.PROVISIONING, State.RUNNING):
        store.transition(f"{7:032x}", state, "test", actor="test")
    store.update(f"{7:032x}", attempt=2)
    rows = [{"kind": "cluster", "key": f"{7:08x}-a{n}", "path": f"gr-{7:08x}-a{n}", "bytes": 0,
             "used_at": time.time()} for n in (1, 2)]
    why = {e.key: e.keep for e in storage.judge(rows, storage.needed(Store(), "sky"), {}, time.time())}
    assert why == {f"{7:08x}-a1": None, f"{7:08x}-a2": "a live job needs it"}
