"""What an hf:// data set costs at submit: the first download, then the cached resubmits.

Runs the installed `gpu plan --json` (a submit's whole preparation: bundle, data, plan, rules,
without creating a job) against the loopback Hub of the tests (tests/fake_hub.py, the real
`huggingface_hub` client on the other side) and prints, each as the median of N runs:

- the same project with no data set (the floor: what `gpu submit --json` pays without hf://);
- the first resolve of a data set of FILES files of KB KiB each (pin + download), in a fresh
  home each time;
- a resubmit naming the branch (one metadata call, nothing downloaded);
- a resubmit pinning the commit sha (no call to the Hub at all).

    python bench/hf_data.py [--files 50] [--kb 256] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import committed_project, parse_small  # noqa: E402

from bench._common import gpu_entry_point, log, private_world, stats_ms, timed  # noqa: E402
from tests.fake_hub import FakeHub  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--kb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    opts = parse_small(ap, {'files': 3, 'kb': 4, 'reps': 1})
    world = private_world("hf")
    hub = FakeHub()
    files = {f"train/part-{i:04d}.bin": os.urandom(opts.kb * 1024) for i in range(opts.files)}
    sha = hub.commit("bench/set", files)
    project = committed_project(world.tmp / "p", {"train.py": "print('hi')\n"})
    gpu = gpu_entry_point()
    base = [*gpu, "plan", "train.py", "--hours", "0.1", "--json"]
    env = world.env(HF_ENDPOINT=hub.url, HF_HOME=str(world.tmp / "hf-home"))
    env.pop("HF_TOKEN", None)

    log(f"data set: {opts.files} files x {opts.kb} KiB = {opts.files * opts.kb / 1024:.1f} MiB")
    timed(base, env=env, cwd=project)  # warm the page cache and the file-hash cache first
    floor = [timed(base, env=env, cwd=project)[0] for _ in range(opts.reps)]
    cold = []
    for i in range(opts.reps):
        home = world.tmp / f"cold-{i}"
        cold.append(timed([*base, "--data", "hf://datasets/bench/set"],
                          env={**env, "GPU_ROUTER_HOME": str(home)}, cwd=project)[0])
    timed([*base, "--data", "hf://datasets/bench/set"], env=env, cwd=project)  # into this home
    hub.forget()
    branch = [timed([*base, "--data", "hf://datasets/bench/set"], env=env, cwd=project)[0]
              for _ in range(opts.reps)]
    asked = sorted({f"{s.method} {s.path}" for s in hub.requests() if s.path != "/api/agent-harnesses"})
    hub.forget()
    pinned = [timed([*base, "--data", f"hf://datasets/bench/set@{sha}"], env=env, cwd=project)[0]
              for _ in range(opts.reps)]
    assert not [s for s in hub.requests() if s.path != "/api/agent-harnesses"]
    print(f"no data set            {stats_ms(floor)}")
    print(f"first download         {stats_ms(cold)}")
    print(f"resubmit, branch       {stats_ms(branch)}  (asked only: {', '.join(asked)})")
    print(f"resubmit, pinned sha   {stats_ms(pinned)}  (no request to the Hub)")
    hub.close()


if __name__ == "__main__":
    main()
