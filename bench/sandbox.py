"""What the local sandbox costs an attempt: a job's start with and without bubblewrap.

    python bench/sandbox.py [--runs 40]

Side by side, the same trivial job (`python -c pass`, then `/bin/true`) started
(a) directly, as before the sandbox (the peer);
(b) under bubblewrap with the plan a real attempt gets (boundary.plan_for: the system
    read-only, the job's folders bound, the person's home and gpu-router's hidden), with the
    Landlock scopes applied where the kernel has them, exactly as the launcher does;
(c) the one-off probe (`boundary.probe`: bwrap --help and a trial start), paid once per
    launcher process.
Prints p50/p95 of each and the extra milliseconds per attempt. Target: under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parse_small  # noqa: E402

from core.runtime import boundary  # noqa: E402


def _spec(root: Path) -> dict:
    job = root / "jobs" / "j"
    for d in ("code", "out", "ckpt", "ctl", "data", "runtime", "attempts/1"):
        (job / d).mkdir(parents=True, exist_ok=True)
    return {"job_id": "j", "attempt": 1, "attempt_dir": str(job / "attempts" / "1"),
            "log": str(job / "job.log"), "workdir": str(job / "code"), "runtime_dir": str(job / "runtime"),
            "base_python": sys.executable, "deps": None,
            "env": {"GPU_ROUTER_OUTPUT_DIR": str(job / "out"), "GPU_ROUTER_CHECKPOINT_DIR": str(job / "ckpt"),
                    "GPU_ROUTER_DATA_DIR": str(job / "data"), "GPU_ROUTER_CONTROL_DIR": str(job / "ctl"),
                    "GPU_ROUTER_METRICS_FILE": str(job / "metrics.jsonl")},
            "sandbox": {"hide": [str(root), os.path.expanduser("~")], "network": True}}


def _time(argv: list[str], runs: int, preexec=None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, preexec_fn=preexec)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _row(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"{name:<44} p50 {statistics.median(ms):7.1f} ms   p95 {q[18]:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    a = parse_small(ap, {'runs': 3})
    t0 = time.perf_counter()
    found = boundary.probe()
    probe_ms = (time.perf_counter() - t0) * 1000
    if not found["ok"]:
        sys.exit(f"no sandbox here: {found['why']}")
    landlock = found["features"].get("landlock_scopes") and not boundary.setuid_binary(found["tool"])
    preexec = boundary.restrict_self if landlock else None
    print(f"bubblewrap {found['tool']}; Landlock scopes: {'yes' if landlock else 'no'}; "
          f"probe once per launcher: {probe_ms:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        spec = _spec(Path(tmp))
        plan = boundary.plan_for(spec, sys.executable)
        for label, cmd in (("python -c pass", [sys.executable, "-c", "pass"]), ("/bin/true", ["/bin/true"])):
            direct = _time(cmd, a.runs)
            boxed = _time(boundary.bwrap_argv(found["tool"], plan, cmd, found["features"]), a.runs, preexec)
            extra = statistics.median(boxed) - statistics.median(direct)
            print(_row(f"(a) {label}, direct (peer)", direct))
            print(_row(f"(b) {label}, in the sandbox", boxed))
            print(f"    sandbox start: +{extra:.1f} ms per attempt (p50), ratio {statistics.median(boxed) / statistics.median(direct):.2f}x"
                  f" {'(target < 50 ms: met)' if extra < 50 else '(target < 50 ms: MISSED)'}")
        print(json.dumps({"binds": len(plan["ro"]) + len(plan["rw"]), "devices": len(plan["devices"])}))


if __name__ == "__main__":
    main()
