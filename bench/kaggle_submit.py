"""What a first and an unchanged second submit of a 1,000-file project send to Kaggle.

    python bench/kaggle_submit.py [--files 1000] [--mb 10]

Runs the loopback Kaggle API (tests/fake_kaggle.py) on 127.0.0.1:80, where the official client
goes with KAGGLE_API_ENVIRONMENT=LOCALHOST, and a private keychain (tests/services.Keychain),
adds a kaggle target with `gpu targets add kaggle`, and submits a committed git project of
--files files twice through the installed `gpu` (the second with another --env: a new job on
the same bundle). For each it prints the API calls made (by method), the bytes uploaded (blob
PUTs) and sent in the kernel push, and the wall time from `gpu submit` to the job done.
Target: the second submit uploads no data set, only the kernel (a few KB).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import parse_small, gpu_doc as gpu, log, make_code_project, private_world  # noqa: E402

JOB = """import gpu
gpu.log(step=0, ok=1)
(gpu.output_dir() / "done.txt").write_text("ok")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--mb", type=float, default=10)
    a = parse_small(ap, {'files': 20, 'mb': 0.1})
    world = private_world("kaggle-submit")
    os.environ.update(GPU_ROUTER_TICK_S="0.2", KAGGLE_API_ENVIRONMENT="LOCALHOST", NO_PROXY="localhost,127.0.0.1")
    from tests.fake_kaggle import FakeKaggle
    from tests.services import Keychain

    keychain = Keychain(world.tmp / "keychain")
    os.environ.update(keychain.env)
    fake = FakeKaggle(world.tmp / "kaggle", port=80, key="bench-key")
    try:
        creds = world.tmp / "kaggle.json"
        creds.write_text(json.dumps({"username": "alice", "key": "bench-key"}))
        gpu("targets", "add", "kaggle", "kg", "--kaggle-json", str(creds), "--json")
        project = make_code_project(world.tmp / "project", a.files, a.mb, JOB)
        log(f"project: {a.files} files, ~{a.mb:g} MB")
        rows = []
        for run in (1, 2):
            mark = len(fake.calls)
            up0 = fake.uploaded_bytes
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
            calls = fake.calls[mark:]
            kernel = sum(len(c["raw"]) for c in calls if c["method"] == "SaveKernel")
            by = collections.Counter(c["method"] for c in calls)
            rows.append((run, fake.uploaded_bytes - up0, kernel, len(calls), by, wall))
            log(f"submit {run}: uploaded {fake.uploaded_bytes - up0:,} bytes, kernel push {kernel:,} bytes, "
                f"{len(calls)} calls, submit -> done {wall:.2f} s")
        (_, u1, k1, n1, by1, w1), (_, u2, k2, n2, by2, w2) = rows
        print()
        print(f"{'':28}{'first':>14}{'second':>14}")
        print(f"{'bytes uploaded (data sets)':28}{u1:>14,}{u2:>14,}")
        print(f"{'bytes in the kernel push':28}{k1:>14,}{k2:>14,}")
        print(f"{'API calls':28}{n1:>14}{n2:>14}")
        for method in sorted(set(by1) | set(by2)):
            print(f"  {method:26}{by1.get(method, 0):>14}{by2.get(method, 0):>14}")
        print(f"{'submit -> done':28}{w1:>13.2f}s{w2:>13.2f}s")
        print(f"second/first bytes sent: {(u2 + k2) / max(u1 + k1, 1):.5f}")
        print("target: the second submit uploads no data set, only the kernel:",
              "MET" if u2 == 0 and by2.get("CreateDataset", 0) == 0 else "NOT MET")
    finally:
        fake.close()
        world.cleanup()
        keychain.close()


if __name__ == "__main__":
    main()
