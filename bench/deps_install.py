"""A second project needing the same large package set: seconds and bytes, pip beside uv.

    python bench/deps_install.py [--wheels DIR] [--installer both|pip|uv]

Serves the biggest real wheels at hand (numpy and scipy from DIR, default /opt/pypi-more/files,
else pip's cache is not read: pass --wheels) from a loopback PEP 503 index (tests/pyindex.py),
and for each installer, in a private gpu-router home of its own, submits two projects to the
local target: the first names `scipy==1.10.1 numpy==1.26.0`, the second `numpy>=1.26,<1.27
scipy>=1.10` (other text, the same resolved set). For each job it prints the seconds from
`gpu submit` to done, the dependency step's own seconds (the launcher's "installed in" line),
the bytes the home holds after it (each file counted once, however many hard links it has),
and the package files the index served. Target (issue 25): the second project builds its
environment from the cache in about a second, with almost no new bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import committed_project, parse_small, gpu_entry_point, log, private_world  # noqa: E402
from tests.pyindex import PackageIndex  # noqa: E402

JOB = "import numpy, scipy.linalg\nprint('ok', numpy.__version__, scipy.__version__)\n"
WANTED = {"numpy": "numpy-1.26.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
          "scipy": "scipy-1.10.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"}
PROJECTS = {"first": "scipy==1.10.1\nnumpy==1.26.0\n", "second": "numpy>=1.26,<1.27\nscipy>=1.10\n"}


def du(path: Path) -> int:
    """Bytes on disk under `path`, each inode once (hard links are not counted twice)."""
    seen: set[int] = set()
    total = 0
    for top, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if st.st_ino in seen:
                continue
            seen.add(st.st_ino)
            total += st.st_blocks * 512
    return total


def gpu(*args: str, cwd: Path | None = None) -> dict:
    out = subprocess.run(gpu_entry_point() + [*args, "--json"], capture_output=True, text=True, cwd=cwd,
                         timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"gpu {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout)


def one(installer: str, wheels: Path) -> list[dict]:
    """Both projects with one installer, in its own private world: one row per job."""
    world = private_world(f"deps-{installer}")
    os.environ["GPU_ROUTER_INSTALLER"] = installer  # the supervisor, so the launcher, inherits it
    index = PackageIndex(world.tmp / "index")
    for name, fname in WANTED.items():
        index.add_file(name, wheels / fname)
    os.environ["PIP_INDEX_URL"] = index.url
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    rows = []
    for label, reqs in PROJECTS.items():
        project = committed_project(world.tmp / label, {"train.py": JOB, "requirements.txt": reqs})
        served = len(index.downloads())
        started = time.perf_counter()
        sub = gpu("submit", "train.py", "--wait-s", "0", "--hours", "0.5", cwd=project)
        short = sub["job"]["short_id"]
        while gpu("status", short)["state"] not in ("done", "failed", "cancelled"):
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        text = subprocess.run(gpu_entry_point() + ["logs", short], capture_output=True, text=True).stdout
        if "ok 1.26.0 1.10.1" not in text:
            raise SystemExit(f"{installer} {label}: the job failed:\n{text[-3000:]}")
        step = re.search(r"(?:installed|ready) in ([0-9.]+)s", text)
        shared = "sharing environment" in text
        rows.append({"installer": installer, "project": label, "seconds": round(seconds, 1),
                     "install_s": float(step.group(1)) if step else None, "shared": shared,
                     "home_bytes": du(world.home), "files_served": len(index.downloads()) - served})
        log(f"{installer} {label}: {rows[-1]}")
    index.close()
    world.cleanup()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=Path("/opt/pypi-more/files"))
    ap.add_argument("--installer", choices=("both", "pip", "uv"), default="both")
    args = parse_small(ap, {'installer': 'uv'})
    missing = [f for f in WANTED.values() if not (args.wheels / f).is_file()]
    if missing:
        sys.exit(f"not in {args.wheels}: {', '.join(missing)} (pass --wheels DIR holding them)")
    if args.installer == "both":  # each in a process of its own: a private world each
        rows = []
        for installer in ("pip", "uv"):
            out = subprocess.run([sys.executable, __file__, "--wheels", str(args.wheels), "--installer",
                                  installer], capture_output=True, text=True)
            sys.stderr.write(out.stderr)
            if out.returncode != 0:
                sys.exit(out.stdout + out.stderr)
            rows += json.loads(out.stdout.strip().splitlines()[-1])
        mb = 1e6
        print(f"{'installer':<9} {'project':<7} {'submit->done s':>14} {'install s':>9} "
              f"{'home MB':>8} {'+MB':>7} {'served':>6} shared")
        last: dict[str, int] = {}
        for r in rows:
            grew = r["home_bytes"] - last.get(r["installer"], 0)
            last[r["installer"]] = r["home_bytes"]
            print(f"{r['installer']:<9} {r['project']:<7} {r['seconds']:>14.1f} "
                  f"{(r['install_s'] if r['install_s'] is not None else float('nan')):>9.1f} "
                  f"{r['home_bytes'] / mb:>8.0f} {grew / mb:>7.0f} {r['files_served']:>6} {r['shared']}")
        return
    rows = one(args.installer, args.wheels)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
