"""A first and a second submit with the same dependencies to a Kaggle target without internet,
or (`--target ssh`) to an ssh host whose pip points at a dead index: seconds and bytes.

    python bench/wheelhouse.py [--target kaggle|ssh] [--wheels 20] [--kb 200]

`--target ssh` starts a loopback OpenSSH server (tests/services.Sshd) and adds an ssh target with
`--env PIP_INDEX_URL=<a dead port>` and `offline: auto`: the probe finds the index unreachable,
the wheelhouse is built here and shipped through the host's content cache; bytes are the job
handle's `uploaded_bytes` (of which `wheelhouse_bytes`).

Runs the loopback Kaggle API (tests/fake_kaggle.py: offline kernels in their own network
namespace) and a loopback package index (tests/pyindex.py) holding --wheels pure-Python
packages of about --kb KB each (random bytes: incompressible) and one source-only package,
adds a kaggle target, and submits a project whose requirements.txt names all of them, twice
(the second with another --env: a new job on the same bundle and the same dependencies). For
each it prints the seconds from `gpu submit` to the job done, the bytes uploaded (blob PUTs),
the wheelhouse data sets made, and the provisioning events that say what the wheelhouse did.
Target: the second submit builds and uploads no wheelhouse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import committed_project, parse_small, gpu_doc as gpu, log, private_world  # noqa: E402

JOB = """import importlib, gpu
names = open("requirements.txt").read().split()
for n in names:
    importlib.import_module(n.replace("-", "_"))
(gpu.output_dir() / "done.txt").write_text(str(len(names)))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", type=int, default=20)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--target", choices=("kaggle", "ssh"), default="kaggle")
    a = parse_small(ap, {'wheels': 2, 'kb': 10})
    if a.target == "ssh":
        return ssh_case(a)
    world = private_world("wheelhouse")
    os.environ.update(GPU_ROUTER_TICK_S="0.2", KAGGLE_API_ENVIRONMENT="LOCALHOST", NO_PROXY="localhost,127.0.0.1",
                      PIP_CONFIG_FILE=os.devnull)
    from tests.fake_kaggle import FakeKaggle
    from tests.pyindex import PackageIndex
    from tests.services import Keychain

    keychain = Keychain(world.tmp / "keychain")
    os.environ.update(keychain.env)
    index = PackageIndex(world.tmp / "index")
    os.environ["PIP_INDEX_URL"] = index.url
    names = []
    for i in range(a.wheels):
        blob = os.urandom(a.kb * 1024).hex()[: a.kb * 1024]
        index.add_wheel(f"benchpkg{i}", "1.0", {f"benchpkg{i}/__init__.py": f"DATA = {blob!r}\n"})
        names.append(f"benchpkg{i}")
    index.add_sdist("benchsrc", "1.0", {"benchsrc/__init__.py": "X = 1\n"})
    names.append("benchsrc")
    fake = FakeKaggle(world.tmp / "kaggle", port=80, key="bench-key")
    try:
        creds = world.tmp / "kaggle.json"
        creds.write_text(json.dumps({"username": "alice", "key": "bench-key"}))
        gpu("targets", "add", "kaggle", "kg", "--kaggle-json", str(creds), "--json")
        project = make_project(world, names)
        log(f"requirements: {a.wheels} wheels of ~{a.kb} KB and one source-only package")
        rows = []
        for run in (1, 2):
            up0, sets0 = fake.uploaded_bytes, len(fake.bodies("CreateDataset"))
            t0 = time.perf_counter()
            sub = gpu("submit", "job.py", "--provider", "kg", "--hours", "0.1", "--env", f"RUN={run}",
                      "--wait-s", "0", "--json", "--project-dir", str(project))
            short = sub["job"]["short_id"]
            while True:
                doc = gpu("status", short, "--json")
                if doc["state"] in ("done", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            wall = time.perf_counter() - t0
            if doc["state"] != "done":
                raise SystemExit(f"job {short} {doc['state']}: {doc.get('reason')}")
            made = [b["slug"] for b in fake.bodies("CreateDataset")[sets0:]]
            wh_sets = sum(s.startswith("gr-wh-") for s in made)
            events = [e["reason"] for e in gpu("status", short, "--verbose", "--json")["events"]
                      if e["reason"].startswith("dependencies:")]
            rows.append((fake.uploaded_bytes - up0, wh_sets, wall))
            log(f"submit {run}: {wall:.1f} s to done, {fake.uploaded_bytes - up0:,} bytes uploaded, "
                f"{wh_sets} wheelhouse data sets made")
            for e in events:
                log(f"  {e}")
        (u1, w1s, t1), (u2, w2s, t2) = rows
        print()
        print(f"{'':30}{'first':>14}{'second':>14}")
        print(f"{'submit -> done':30}{t1:>13.1f}s{t2:>13.1f}s")
        print(f"{'bytes uploaded':30}{u1:>14,}{u2:>14,}")
        print(f"{'wheelhouse data sets made':30}{w1s:>14}{w2s:>14}")
        print("target: the second submit builds and uploads no wheelhouse:",
              "MET" if u2 == 0 and w2s == 0 else "NOT MET")
    finally:
        fake.close()
        index.close()
        world.cleanup()
        keychain.close()


def make_index(world, a) -> tuple[object, list[str]]:
    from tests.pyindex import PackageIndex

    index = PackageIndex(world.tmp / "index")
    os.environ["PIP_INDEX_URL"] = index.url
    names = []
    for i in range(a.wheels):
        blob = os.urandom(a.kb * 1024).hex()[: a.kb * 1024]
        index.add_wheel(f"benchpkg{i}", "1.0", {f"benchpkg{i}/__init__.py": f"DATA = {blob!r}\n"})
        names.append(f"benchpkg{i}")
    index.add_sdist("benchsrc", "1.0", {"benchsrc/__init__.py": "X = 1\n"})
    names.append("benchsrc")
    return index, names


def make_project(world, names: list[str]) -> Path:
    return committed_project(world.tmp / "project", {"job.py": JOB, "requirements.txt": "\n".join(names) + "\n"})


def ssh_case(a) -> None:
    """The same two submits to an ssh host that cannot reach its index (offline: auto)."""
    import socket

    world = private_world("wheelhouse-ssh")
    os.environ.update(GPU_ROUTER_TICK_S="0.2", PIP_CONFIG_FILE=os.devnull)
    from tests.services import Sshd

    index, names = make_index(world, a)
    sshd = Sshd(world.tmp / "sshd")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/simple/"
    try:
        o = sshd.target_options(world.tmp / "remote", getattr(sys, "_base_executable", None) or sys.executable)
        gpu("targets", "add", "ssh", "box", "--host", o["host"], "--port", str(o["port"]), "--user", o["user"],
            "--key", o["key"], "--known-hosts", o["known_hosts"], "--root", o["root"], "--python", o["python"],
            "--env", f"PIP_INDEX_URL={dead}", "--json")
        project = make_project(world, names)
        log(f"requirements: {a.wheels} wheels of ~{a.kb} KB and one source-only package; ssh host, index dead")
        rows = []
        for run in (1, 2):
            t0 = time.perf_counter()
            sub = gpu("submit", "job.py", "--provider", "box", "--hours", "0.1", "--env", f"RUN={run}",
                      "--wait-s", "0", "--json", "--project-dir", str(project))
            short = sub["job"]["short_id"]
            while (doc := gpu("status", short, "--json"))["state"] not in ("done", "failed", "cancelled"):
                time.sleep(0.2)
            wall = time.perf_counter() - t0
            if doc["state"] != "done":
                raise SystemExit(f"job {short} {doc['state']}: {doc.get('reason')}")
            full = gpu("status", short, "--verbose", "--json")
            up, wh = full["handle"].get("uploaded_bytes", 0), full["handle"].get("wheelhouse_bytes", 0)
            rows.append((up, wh, wall))
            log(f"submit {run}: {wall:.1f} s to done, {up:,} bytes uploaded ({wh:,} of them the wheelhouse)")
            for e in (e["reason"] for e in full["events"] if e["reason"].startswith("dependencies:")):
                log(f"  {e}")
        (u1, w1, t1), (u2, w2, t2) = rows
        print()
        print(f"{'':30}{'first':>14}{'second':>14}")
        print(f"{'submit -> done':30}{t1:>13.1f}s{t2:>13.1f}s")
        print(f"{'bytes uploaded':30}{u1:>14,}{u2:>14,}")
        print(f"{'of them the wheelhouse':30}{w1:>14,}{w2:>14,}")
        print("target: the second submit uploads no wheelhouse:", "MET" if w2 == 0 and w1 > 0 else "NOT MET")
    finally:
        gpu("daemon", "--stop", "--json", check=False)
        sshd.close()
        index.close()
        world.cleanup()


if __name__ == "__main__":
    main()
