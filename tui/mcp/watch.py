"""Jobs as MCP resources, and the notifications that wake an agent when one moves.

Each job is the resource `gpu://jobs/<short_id>` (core.engine.guidance.JOB_RESOURCE, named in
every result's `guidance.resource`): `resources/read` returns its status document (the one
gpu_status returns), `resources/list` the jobs this server started and the ones a client
subscribed to. A client that subscribes (`resources/subscribe`) gets
`notifications/resources/updated` whenever the job's state changes; and when a job this
server started, or one a client subscribed to, ends or waits for a person's approval, the
server also sends a log notification (`notifications/message`) naming the job and its state.
A client on the 2026 protocol (`subscriptions/listen`) gets the same resource updates from
the SDK's subscription bus.

The supervisor runs as its own process and writes the store: `JobWatch.run` reads the states
of the jobs it watches from the store every POLL_S (one indexed read each, in a worker
thread) and compares them with what it saw last. Jobs that ended are read no more.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from core.engine.guidance import JOB_RESOURCE
from core.errors import UserError

POLL_S = 0.5
LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# the log level each state a watcher tells of is sent at (a client's logging/setLevel filters)
STATE_LEVEL = {"done": "info", "awaiting_approval": "warning", "cancelled": "warning",
               "denied": "warning", "failed": "error"}
MIME = "application/json"


def job_uri(short_id: str) -> str:
    return JOB_RESOURCE + short_id


def uri_ref(uri: str) -> str:
    """The job reference in a resource address; anything but gpu://jobs/<ref> is refused."""
    ref = uri[len(JOB_RESOURCE):] if uri.startswith(JOB_RESOURCE) else ""
    if not ref or "/" in ref:
        raise MCPError(types.INVALID_PARAMS, f"unknown resource {uri[:200]!r}: gpu-router's "
                                             f"resources are {JOB_RESOURCE}<short_id>")
    return ref


@dataclass
class Watched:
    """One job the server follows: its last seen state, and why it follows it."""

    short_id: str
    name: str
    state: str
    started: bool = False  # this server started it (it is listed, and its end is told)
    uris: set[str] = field(default_factory=set)  # the addresses clients subscribed to it by


@dataclass
class JobWatch:
    """What the server watches (keyed by job id) and the connection it tells it on.

    Touched only from the server's event loop; the store is read in worker threads."""

    store: Callable[[], Any]  # the server's store (Engine.store, not starting a supervisor)
    status: Callable[[Any, Any], dict[str, Any]]  # (store, job) -> the status document
    bus: Any = None  # the SDK's subscription bus, for subscriptions/listen clients
    jobs: dict[str, Watched] = field(default_factory=dict)
    session: Any = None  # the ServerSession of the client's latest request
    level: str = "info"

    def attach(self, ctx: Any) -> None:
        """Remember the connection to notify on (a handshake-era one: on the 2026 protocol
        the standalone stream carries no log, and updates go through the bus)."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self.session = ctx.session

    def started(self, doc: dict[str, Any]) -> None:
        """A start's result: follow its job, unless it already ended (the result told it)."""
        job = doc.get("job") if isinstance(doc, dict) else None
        if not isinstance(job, dict) or not job.get("id") or not doc.get("submitted", True):
            return
        seen = self.jobs.get(job["id"])
        if seen is None:
            seen = self.jobs[job["id"]] = Watched(job["short_id"], job.get("name") or "", job["state"])
        seen.started = True

    async def _resolve(self, ref: str) -> Any:
        try:
            return await anyio.to_thread.run_sync(lambda: self.store().resolve(ref))
        except UserError as exc:
            raise MCPError(types.INVALID_PARAMS, f"no job {ref[:100]!r}: {exc.what}") from None

    # -- the resource handlers ---------------------------------------------------------------

    def listing(self) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=job_uri(w.short_id), name=f"job {w.short_id}", mime_type=MIME,
                           title=f"gpu-router job {w.short_id}" + (f" ({w.name})" if w.name else ""),
                           description=f"the job's status ({w.state} when last seen)")
            for w in self.jobs.values() if w.started or w.uris])

    @staticmethod
    def templates() -> types.ListResourceTemplatesResult:
        """The address of every job, so that a client can find the resources before any job
        (resources/list names only the jobs this server follows)."""
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=JOB_RESOURCE + "{id}", name="job", mime_type=MIME,
                                   title="gpu-router job",
                                   description="a job's status document (what gpu_status returns), by "
                                               "its short id (guidance.resource of every result); "
                                               "subscribe to be told when it changes and ends")])

    async def read(self, uri: str, clean: Callable[[Any], Any]) -> types.ReadResourceResult:
        from tui.show.output import json_text

        job = await self._resolve(uri_ref(uri))
        doc = await anyio.to_thread.run_sync(lambda: clean(self.status(self.store(), job)))
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type=MIME, text=json_text(doc, indent=None))])

    async def subscribe(self, uri: str) -> None:
        job = await self._resolve(uri_ref(uri))
        seen = self.jobs.get(job.id)
        if seen is None:
            seen = self.jobs[job.id] = Watched(job.short_id, job.name or "", job.state.value)
        seen.uris.add(uri)

    def unsubscribe(self, uri: str) -> None:
        for seen in self.jobs.values():
            seen.uris.discard(uri)

    def set_level(self, level: str) -> None:
        self.level = level

    # -- the watch ---------------------------------------------------------------------------

    async def run(self, clean: Callable[[Any], Any]) -> None:
        """Poll until cancelled (the server's end); a failed read is tried again next time."""
        while True:
            await anyio.sleep(POLL_S)
            with contextlib.suppress(Exception):
                await self.poll(clean)

    async def poll(self, clean: Callable[[Any], Any]) -> None:
        from core.jobs.states import TERMINAL

        ended = {s.value for s in TERMINAL}
        live = [job_id for job_id, w in self.jobs.items() if w.state not in ended]
        if not live:
            return
        now = await anyio.to_thread.run_sync(lambda: [self.store().get(i) for i in live])
        for job in now:
            seen = self.jobs[job.id]
            state = job.state.value
            if state == seen.state:
                continue
            seen.state = state
            for uri in sorted(seen.uris):
                await self._send(types.ResourceUpdatedNotification(
                    params=types.ResourceUpdatedNotificationParams(uri=uri)))
            if self.bus is not None:
                await self.bus.publish(ResourceUpdated(uri=job_uri(job.short_id)))
            if state in ended or state == "awaiting_approval":
                await self._tell(job, clean)

    async def _tell(self, job: Any, clean: Callable[[Any], Any]) -> None:
        """The log notification of a job that ended or waits for a person."""
        state = job.state.value
        level = STATE_LEVEL.get(state, "info")
        if LEVELS.index(level) < LEVELS.index(self.level):
            return
        who = f"job {job.short_id}" + (f" ({job.name})" if job.name else "")
        if state == "awaiting_approval":
            text = f"{who} waits for a person's approval: {job.reason}"
        else:
            text = f"{who} ended {state}" + (f", exit {job.exit_code}" if job.exit_code is not None else "") \
                + (f": {job.reason}" if job.reason else "")
        data = clean({"job": job.short_id, "name": job.name, "state": state,
                      "exit_code": job.exit_code, "reason": job.reason,
                      "resource": job_uri(job.short_id), "message": text})
        await self._send(types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams(
            level=level, logger="gpu-router", data=data)))

    async def _send(self, notification: Any) -> None:
        if self.session is None:
            return
        with contextlib.suppress(Exception):  # a closed stream must not stop the watch
            await self.session.send_notification(notification)
