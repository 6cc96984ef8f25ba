"""The agent's loop over `gpu mcp` closes without polling, through the official client.

A job that ends within the start's grace comes back with its outcome and log tail in the
start result; a longer one is an MCP resource (`gpu://jobs/<short_id>`) whose subscriber is
sent `notifications/resources/updated` and, at its end, a log notification; a wait until the
end is one call; `verbose` carries every event. Real local jobs, the real `gpu mcp` over stdio.
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import gpu_exe, gpu_json, make_git_project
from tests.tui.mcp.test_mcp import PASSED_ENV, call

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:resources/subscribe is removed")]

QUICK = ("import sys, time\n"
         "print('hello from the job', flush=True)\n"
         "time.sleep(1)\n"
         "print('oops on stderr', file=sys.stderr, flush=True)\n"
         "print('the last line', flush=True)\n"
         "sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")
SLOW = ("import time\n"
        "print('started', flush=True)\n"
        "time.sleep(4)\n"
        "print('finished', flush=True)\n")
GRACE = 120  # a start waits this long at most; it returns as soon as the job ends


class Heard:
    """What the client was told besides answers: resource updates and log messages."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.changed = anyio.Event()

    async def message(self, msg: Any) -> None:
        if isinstance(msg, types.ResourceUpdatedNotification):
            self.updated.append(str(msg.params.uri))
            self.changed.set()

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.changed.set()

    async def until(self, what: Any, timeout: float = 180) -> None:
        with anyio.fail_after(timeout):
            while not what():
                self.changed = anyio.Event()
                await self.changed.wait()


@asynccontextmanager
async def session(heard: Heard | None = None) -> AsyncIterator[ClientSession]:
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    # started in the test's tmp folder (the home's parent): compute_job's projects root
    params = StdioServerParameters(command=gpu_exe(), args=["mcp"], env=env,
                                   cwd=Path(os.environ["GPU_ROUTER_HOME"]).parent)
    heard = heard or Heard()
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=heard.message,
                                     logging_callback=heard.log) as s:
                await s.initialize()
                yield s


def project(tmp_path: Path) -> Path:
    return make_git_project(tmp_path / "p", {"quick.py": QUICK, "slow.py": SLOW})


async def test_a_one_second_job_returns_done_its_exit_and_its_tail_in_the_start_result(
        home: Path, tmp_path: Path) -> None:
    p = project(tmp_path)
    async with session() as s:
        ok = await call(s, "compute_job", action="start", command="python quick.py", cwd=str(p),
                        hours=0.1, wait_s=GRACE)
        job = ok["job"]
        assert job["state"] == "done" and job["exit_code"] == 0, job
        assert "hello from the job" in job["log_tail"] and "the last line" in job["log_tail"]
        assert "oops on stderr" in job["log_tail"]
        assert ok["guidance"]["next_call"] == {"tool": "compute_job",
                                               "arguments": {"action": "artifacts", "job": job["short_id"]}}
        assert gpu_json("status", job["short_id"])["state"] == "done"  # the store agrees

        # gpu_submit keeps the contract's four keys and returns once the job is placed (the
        # outcome within a grace is compute_job start's): one wait until the end brings it
        failed = await call(s, "gpu_submit", project_dir=str(p), script="quick.py", args=["3"],
                            hours=0.1, wait_s=GRACE)
        assert set(failed) == {"job", "guidance", "submitted", "bundle"}
        ended = await call(s, "gpu_wait", job=failed["job"]["short_id"], until="end", timeout_s=GRACE,
                           log_lines=40)
        assert ended["state"] == "failed" and ended["exit_code"] == 3, ended
        assert "the last line" in ended["log_tail"]
        assert ended["guidance"]["next_call"]["tool"] == "gpu_logs"

        # with no grace, a start returns before the job can have run: no outcome, a resource
        quick = await call(s, "compute_job", action="start", command="python quick.py 0 again",
                           cwd=str(p), hours=0.1, wait_s=0)
        assert quick["job"]["state"] not in ("done", "failed") and "log_tail" not in quick["job"]
        short = quick["job"]["short_id"]
        assert quick["guidance"]["resource"] == f"gpu://jobs/{short}"
        assert quick["guidance"]["next_call"]["arguments"] == {"action": "wait", "job": short, "until": "end"}


async def test_a_subscriber_is_told_when_the_job_changes_and_when_it_ends(home: Path, tmp_path: Path) -> None:
    p = project(tmp_path)
    heard = Heard()
    async with session(heard) as s:
        caps = s.server_capabilities
        assert caps is not None and caps.resources is not None and caps.resources.subscribe is True
        assert caps.logging is not None
        sub = await call(s, "gpu_submit", project_dir=str(p), script="slow.py", hours=0.1, wait_s=0)
        short = sub["job"]["short_id"]
        uri = sub["guidance"]["resource"]
        assert uri == f"gpu://jobs/{short}"
        await s.subscribe_resource(uri)

        listed = await s.list_resources()
        assert uri in [str(r.uri) for r in listed.resources]
        read = await s.read_resource(uri)
        doc = json.loads(read.contents[0].text)
        assert doc["short_id"] == short and doc["state"] not in ("done", "failed")

        await heard.until(lambda: any(isinstance(m.data, dict) and m.data.get("job") == short
                                      for m in heard.logs))
        assert uri in heard.updated  # told of its state changes, not only of its end
        ends = [m for m in heard.logs if m.data.get("job") == short]
        assert len(ends) == 1 and ends[0].data["state"] == "done" and ends[0].data["exit_code"] == 0
        assert ends[0].level == "info" and short in ends[0].data["message"]
        assert "ended done" in ends[0].data["message"]
        assert ends[0].data["resource"] == uri
        final = json.loads((await s.read_resource(uri)).contents[0].text)
        assert final["state"] == "done" and final["exit_code"] == 0

        # a resource that names no job is an error, and the server goes on
        with pytest.raises(Exception, match="no job"):
            await s.read_resource("gpu://jobs/zzzzzzzz")
        with pytest.raises(Exception, match="unknown resource"):
            await s.subscribe_resource("file:///etc/passwd")
        assert (await call(s, "gpu_jobs"))["jobs"][0]["short_id"] == short


async def test_wait_until_end_returns_the_final_state_in_one_call(home: Path, tmp_path: Path) -> None:
    p = project(tmp_path)
    async with session() as s:
        sub = await call(s, "gpu_submit", project_dir=str(p), script="slow.py", hours=0.1, wait_s=0)
        short = sub["job"]["short_id"]
        assert sub["guidance"]["next_call"] == {"tool": "gpu_wait", "arguments": {"job": short, "until": "end"}}
        doc = await call(s, "gpu_wait", job=short, until="end", timeout_s=300, log_lines=3)
        assert doc["state"] == "done" and doc["exit_code"] == 0, doc
        assert doc["wait"]["ended"] is True and doc["wait"]["until"] == "end"
        assert doc["wait"]["from"] not in ("done", "running") and doc["wait"]["to"] == "done"
        assert "finished" in doc["log_tail"]

        # compute_job's wait, the same; a held job returns at once (it needs a person)
        again = await call(s, "compute_job", action="start", command="python slow.py", cwd=str(p),
                           hours=0.1, wait_s=0, name="second")
        done = await call(s, "compute_job", action="wait", job=again["job"]["short_id"], until="end",
                          timeout_s=300)
        assert done["state"] == "done" and done["wait"]["ended"] is True
        held = await call(s, "gpu_submit", project_dir=str(p), script="slow.py", hours=5, wait_s=0)
        assert held["job"]["state"] == "awaiting_approval"
        waited = await call(s, "gpu_wait", job=held["job"]["short_id"], until="end", timeout_s=300)
        assert waited["state"] == "awaiting_approval" and waited["wait"]["ended"] is False
        assert waited["wait"]["waited_s"] < 300 and waited["guidance"]["needs_approval"] is True
        text = (await s.call_tool("gpu_wait", {"job": short, "until": "soon"})).content[0].text
        assert "until must be one of change, end" in text


async def test_verbose_results_carry_every_event(home: Path, tmp_path: Path) -> None:
    p = project(tmp_path)
    async with session() as s:
        sub = await call(s, "gpu_submit", project_dir=str(p), script="quick.py", hours=0.1,
                         wait_s=GRACE, verbose=True)
        short = sub["job"]["short_id"]  # returned once placed: the events up to then
        assert (await call(s, "gpu_wait", job=short, until="end", timeout_s=GRACE))["state"] == "done"
        cli = gpu_json("status", short, "--verbose")["events"]
        events = sub["job"]["events"]
        assert len(events) >= 2 and events == cli[:len(events)]  # every one, in order
        assert events[0]["reason"].startswith("submitted by agent")

        waited = await call(s, "gpu_wait", job=short, timeout_s=0, verbose=True)
        assert waited["events"] == gpu_json("status", short, "--verbose")["events"]
        assert len((await call(s, "gpu_wait", job=short, timeout_s=0))["events"]) == 5

        started = await call(s, "compute_job", action="start", command="python quick.py", cwd=str(p),
                             hours=0.1, wait_s=GRACE, verbose=True, purpose="see every event")
        assert started["job"]["state"] == "done" and len(started["job"]["events"]) > 5
        reasons = [e["reason"] for e in started["job"]["events"]]
        assert "purpose: see every event" in reasons
        assert reasons.index("purpose: see every event") < len(reasons) - 1  # before its end


async def test_the_new_channels_hand_an_agent_no_hidden_character(home: Path, tmp_path: Path) -> None:
    """The start result's log tail, the resource's document and the end's log notification
    carry a job's text too: a job printing tag characters (an instruction spelled invisibly),
    zero-width and bidi ones reaches the agent through none of them; the visible text stays."""
    from tests.tui.mcp.test_mcp import HIDDEN_JOB, _hidden

    p = make_git_project(tmp_path / "h", {"hidden.py": HIDDEN_JOB})
    heard = Heard()
    async with session(heard) as s:
        ok = await call(s, "compute_job", action="start", command="python hidden.py", cwd=str(p),
                        hours=0.1, wait_s=GRACE)
        tail = ok["job"]["log_tail"]
        assert ok["job"]["state"] == "done" and "visible-start visible-end" in tail, ok["job"]
        assert not _hidden(json.dumps(ok, ensure_ascii=False))
        uri = ok["guidance"]["resource"]
        text = (await s.read_resource(uri)).contents[0].text
        assert "cfgx" in text and not _hidden(text) and not _hidden(json.dumps(json.loads(text), ensure_ascii=False))

        late = await call(s, "gpu_submit", project_dir=str(p), script="hidden.py", hours=0.1, wait_s=0,
                          name="late")
        await heard.until(lambda: any(m.data.get("job") == late["job"]["short_id"] for m in heard.logs))
        told = json.dumps([m.data for m in heard.logs], ensure_ascii=False)
        assert "ended done" in told and not _hidden(told)


async def test_a_2026_client_listens_for_the_job_s_updates(home: Path, tmp_path: Path) -> None:
    """The 2026 protocol has no resources/subscribe: a client listens (subscriptions/listen)
    for the job's resource, and the same watch delivers its updates there."""
    from mcp import Client

    p = project(tmp_path)
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    params = StdioServerParameters(command=gpu_exe(), args=["mcp"], env=env)
    async with Client(params, mode="auto") as client:
        assert client.session.protocol_version == "2026-07-28"  # not the handshake of the others
        res = await client.call_tool("gpu_submit", {"project_dir": str(p), "script": "slow.py",
                                                    "hours": 0.1, "wait_s": 0})
        sub = res.structured_content
        uri, short = sub["guidance"]["resource"], sub["job"]["short_id"]
        states = []
        with anyio.fail_after(180):
            async with client.listen(resource_subscriptions=[uri]) as stream:
                async for event in stream:
                    assert event.uri == uri
                    doc = json.loads((await client.read_resource(uri)).contents[0].text)
                    states.append(doc["state"])
                    if doc["state"] in ("done", "failed", "cancelled"):
                        break
        assert states[-1] == "done" and doc["short_id"] == short
