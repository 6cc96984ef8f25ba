"""What the tracking integration costs a job: interpreter start-up and each logged call.

    python bench/tracking.py [--calls 20000] [--reps 5]

(a) `python -c pass` with and without the job's sitecustomize (core/runtime/jobsite) on
    PYTHONPATH: every interpreter a job starts pays this, wandb or not;
(b) `import wandb` of gpu-router's stand-in (in a Python without wandb) and of the real package
    with the hook that follows it, against the real package alone;
(c) per call, with 3 metrics a call: `gpu.log`, `openscience_track.log`, the stand-in's
    `wandb.log`, and the real wandb's `wandb.log` offline with and without the hook (the hook's
    cost is the difference). Each logged call appends one line to the metrics file.
Target: the hook adds well under the real wandb's own cost per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO)]
from _common import parse_small  # noqa: E402
RUNTIME = REPO / "core" / "runtime"
JOBSITE = RUNTIME / "jobsite"

LOOP = '''
import sys, time
n = int(sys.argv[1])
{setup}
t = time.perf_counter()
for i in range(n):
    {call}
print((time.perf_counter() - t) / n * 1e6)
'''

CASES = {
    "gpu.log": ("import gpu", "gpu.log(step=i, loss=0.5, acc=0.9, lr=1e-3)"),
    "openscience_track.log": ("import openscience_track as ost",
                              "ost.log({'loss': 0.5, 'acc': 0.9, 'lr': 1e-3}, step=i)"),
    "wandb.log": ("import wandb; wandb.init(project='bench')",
                  "wandb.log({'loss': 0.5, 'acc': 0.9, 'lr': 1e-3}, step=i)"),
}


def _env(tmp: Path, jobsite: bool) -> dict:
    path = [str(RUNTIME), *([str(JOBSITE)] if jobsite else [])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_ROUTER_", "WANDB_"))}
    return {**env, "PYTHONPATH": os.pathsep.join(path), "GPU_ROUTER_METRICS_FILE": str(tmp / "m.jsonl"),
            "GPU_ROUTER_OUTPUT_DIR": str(tmp / "out"), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
            "WANDB_DIR": str(tmp / "out")}


def _median_run(cmd: list[str], env: dict, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def _per_call(python: str, case: str, env: dict, calls: int, reps: int) -> float:
    setup, call = CASES[case]
    code = LOOP.format(setup=setup, call=call)
    out = [float(subprocess.run([python, "-c", code, str(calls)], env=env, check=True,
                                capture_output=True, text=True, timeout=600).stdout.split()[-1])
           for _ in range(reps)]
    return statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=5)
    args = parse_small(parser, {'calls': 200, 'reps': 1})
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "out").mkdir()
        bare = tmp / "bare"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
        bare_py = str(bare / "bin" / "python")
        real = subprocess.run([sys.executable, "-c", "import wandb"], capture_output=True).returncode == 0

        print("(a) interpreter start-up, median ms")
        for label, site in (("python -c pass", False), ("  with the job's sitecustomize", True)):
            print(f"  {label:34s} {_median_run([sys.executable, '-c', 'pass'], _env(tmp, site), args.reps):7.1f}")

        print("(b) import wandb, median ms")
        print(f"  {'stand-in (no wandb installed)':34s} "
              f"{_median_run([bare_py, '-c', 'import wandb'], _env(tmp, True), args.reps):7.1f}")
        if real:
            for label, site in (("real wandb alone", False), ("real wandb, followed", True)):
                print(f"  {label:34s} "
                      f"{_median_run([sys.executable, '-c', 'import wandb'], _env(tmp, site), args.reps):7.1f}")

        print(f"(c) one logged call (3 metrics), median of {args.reps} x {args.calls} calls, microseconds")
        for case in ("gpu.log", "openscience_track.log"):
            print(f"  {case:34s} {_per_call(sys.executable, case, _env(tmp, True), args.calls, args.reps):7.1f}")
        print(f"  {'wandb.log, stand-in':34s} {_per_call(bare_py, 'wandb.log', _env(tmp, True), args.calls, args.reps):7.1f}")
        if real:
            calls = max(args.calls // 10, 100)  # the real wandb is slower per call
            alone = _per_call(sys.executable, "wandb.log", _env(tmp, False), calls, args.reps)
            followed = _per_call(sys.executable, "wandb.log", _env(tmp, True), calls, args.reps)
            print(f"  {'wandb.log, real wandb alone':34s} {alone:7.1f}")
            print(f"  {'wandb.log, real wandb, followed':34s} {followed:7.1f}  "
                  f"(the hook: {followed - alone:+.1f})")
        else:
            print("  (the real wandb is not installed here: pip install wandb to measure it)")


if __name__ == "__main__":
    main()
