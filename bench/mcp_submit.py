"""A gpu_submit round trip through `gpu mcp`, side by side with `gpu submit --json`.

    python bench/mcp_submit.py [N]

Target (from the issue): the MCP round trip within 1.2x of the CLI's, and under 300 ms median,
on the 1,000-file git project of bench/submit_latency.py. One MCP session (the official `mcp`
client over stdio, the installed `gpu mcp`) serves every call; the CLI runs are one process
each, interleaved with the MCP calls so both see the same machine. Each submit is a new job
(`env RUN=...` differs, `wait_s` 0, `hours` 0.1): nothing is an idempotent return. Runs in a
private GPU_ROUTER_HOME / GPU_ROUTER_CONFIG.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gpu_cmd, log, median, private_world, stats_ms, timed  # noqa: E402
from submit_latency import build_project, count_files  # noqa: E402

# `--small` (tests/project/test_benches.py): the same path, 2 runs each, in seconds; targets not judged.
SMALL = "--small" in sys.argv[1:]
_ARGS = [a for a in sys.argv[1:] if a != "--small"]
N = int(_ARGS[0]) if _ARGS else (1 if SMALL else 15)
TARGET_MS = 300
TARGET_RATIO = 1.2


async def bench(world, proj: Path) -> dict:
    env = {k: v for k, v in world.env().items()
           if k in ("GPU_ROUTER_HOME", "GPU_ROUTER_CONFIG", "PYTHONPATH", "PATH", "HOME",
                    "PYTHONDONTWRITEBYTECODE")}
    params = StdioServerParameters(command=gpu_cmd()[0], args=["mcp"], env=env)
    out: dict = {"cli": [], "mcp": [], "mcp_first": None, "session": None}
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            await s.list_tools()
            out["session"] = time.perf_counter() - t0

            async def mcp_submit(tag: str) -> float:
                t = time.perf_counter()
                res = await s.call_tool("gpu_submit", {
                    "project_dir": str(proj), "script": "a.py", "wait_s": 0, "hours": 0.1,
                    "env": {"RUN": tag}})
                dt = time.perf_counter() - t
                if res.is_error or not res.structured_content["submitted"]:
                    raise RuntimeError(f"gpu_submit {tag}: {res.content[0].text[:500]}")
                return dt

            def cli_submit(tag: str) -> float:
                dt, proc = timed(gpu_cmd() + ["submit", "a.py", "--json", "--wait-s", "0",
                                              "--hours", "0.1", "--env", f"RUN={tag}"],
                                 cwd=proj, env=world.env())
                if not json.loads(proc.stdout)["submitted"]:
                    raise RuntimeError(f"gpu submit {tag} was not a new job")
                return dt

            log("first submits (the supervisor starts; the server opens its store) ...")
            cli_submit("warm-cli")
            out["mcp_first"] = await mcp_submit("warm-mcp")
            log(f"{N} rounds: gpu submit --json, then gpu_submit through MCP ...")
            for i in range(N):
                c = await anyio.to_thread.run_sync(cli_submit, f"cli{i}")
                m = await mcp_submit(f"mcp{i}")
                out["cli"].append(c)
                out["mcp"].append(m)
                print(f"    round {i + 1:2d}/{N}: cli {c * 1000:6.1f} ms   mcp {m * 1000:6.1f} ms", flush=True)
    return out


def main() -> int:
    world = private_world("mcp")
    proj = world.tmp / "project"
    log(f"building a 1,000-file git project in {proj} ...")
    build_project(proj)
    log(f"  {count_files(proj)} files committed")
    res = anyio.run(bench, world, proj)
    cli, mcp = median(res["cli"]) * 1000, median(res["mcp"]) * 1000
    ratio = mcp / cli
    print()
    print(f"== gpu_submit through MCP vs gpu submit --json: 1,000-file git project, {N} rounds ==")
    print(f"MCP session start (spawn gpu mcp, initialize, list tools) {res['session'] * 1000:7.1f} ms (once)")
    print(f"first gpu_submit through MCP (opens the store)            {res['mcp_first'] * 1000:7.1f} ms (once)")
    print(f"gpu submit --json (a process each)   {stats_ms(res['cli'])}")
    print(f"gpu_submit through MCP (one session) {stats_ms(res['mcp'])}")
    print(f"median MCP / median CLI = {ratio:.2f}x")
    ok_ratio, ok_ms = ratio <= TARGET_RATIO, mcp < TARGET_MS
    print(f"target: within {TARGET_RATIO}x of the CLI -> {ratio:.2f}x: {'PASS' if ok_ratio else 'FAIL'}")
    print(f"target: median under {TARGET_MS} ms -> {mcp:.1f} ms: {'PASS' if ok_ms else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
