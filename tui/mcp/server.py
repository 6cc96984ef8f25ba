"""`gpu mcp`: gpu-router served to agents over the Model Context Protocol, on stdin/stdout.

Built on the official `mcp` SDK's low-level server, so the tools' input schemas are exactly
what tui/mcp/schema.py says (the submit contract's, field for field). Each call is checked
against its schema, run in a worker thread (the engine blocks), and answered with one JSON
document as text and as structured content. This is a front like the CLI: it calls the
engine's public functions only, and it has no tool that approves or denies.

What a job or a user wrote (log lines, names, reasons, paths) reaches the agent reduced to
printable text. A `UserError` comes back as a tool error carrying the same what / where / fix
text as the CLI prints; anything else is a one-line tool error naming the error log, and the
server carries on. While the server runs, a stray write to stdout goes to stderr: only the
SDK writes the protocol.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

from core import __version__
from core.errors import UserError, clip, shorten
from core.display.sanitize import printable_doc
from core.runtime.textsafe import printable
from tui.mcp.compute import compute_job
from tui.mcp.schema import TOOLS
from tui.mcp.tools import HANDLERS, Call, Engine
from tui.mcp.watch import JobWatch
from tui.show.output import json_text

PROGRESS_EVERY_S = 0.1  # at most this often, except the first and the last of a call
READ_ONLY = {"gpu_status", "gpu_wait", "gpu_logs", "gpu_metrics", "gpu_jobs", "gpu_targets", "gpu_plan",
             "gpu_accounts"}
INSTRUCTIONS = (
    "gpu-router runs scripts on GPUs (local, SSH, Slurm, PBS targets) and keeps them running. "
    "gpu_submit packages a project and returns once the job is placed or needs approval "
    "(wait_s); the job keeps running. compute_job start waits out a short grace (wait_s): a "
    "job that ends in it returns its outcome and log tail at once. Otherwise follow "
    "guidance.follow (gpu_wait until the job ends), or subscribe to the job's resource "
    "(guidance.resource) to be notified when it changes and ends. After a failure, "
    "guidance.next_call reads the log from where the error starts. When guidance.needs_approval is "
    "true, relay guidance.tell_user to the user word for word and end your turn: no tool "
    "approves a job. compute_job offers the same engine as one tool with an action argument. "
    "A `gpu ...` command in an error's fix that has no tool (gpu approve, gpu secrets set, "
    "gpu targets add) is one for the user to run at their own terminal: tell them.")

_TYPES = {"string": "a string", "number": "a number", "integer": "a whole number",
          "boolean": "true or false", "array": "a list of strings", "object": "an object of strings"}


# -- arguments in, documents out -----------------------------------------------------------


def _fits(value: Any, spec: dict[str, Any]) -> bool:
    kind = spec.get("type")
    if kind == "string":
        return isinstance(value, str) and ("enum" not in spec or value in spec["enum"])
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "object":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return True


def check_arguments(tool: str, schema: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    """The call's arguments checked against the tool's schema: known names, the right types,
    the required ones there, numbers within bounds. A null counts as not given."""
    props: dict[str, dict[str, Any]] = schema["properties"]
    args = {k: v for k, v in (raw or {}).items() if v is not None}
    for key, value in args.items():
        where = f"{tool} argument {key}"
        if key not in props:
            raise UserError(f"unknown argument {shorten(key)}", where=f"{tool} arguments",
                            fix=f"{tool} takes: {', '.join(props) or 'no arguments'}")
        spec = props[key]
        if not _fits(value, spec):
            want = f"one of {', '.join(spec['enum'])}" if "enum" in spec else _TYPES.get(spec.get("type"), "valid")
            raise UserError(f"{key} must be {want} (got {shorten(value)})", where=where,
                            fix=spec.get("description"))
        if spec.get("type") in ("number", "integer"):
            low, high = spec.get("minimum"), spec.get("maximum")
            if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
                raise UserError(f"{key} must be from {low if low is not None else '-inf'} to "
                                f"{high if high is not None else 'inf'} (got {shorten(value)})",
                                where=where, fix=spec.get("description"))
    missing = [k for k in schema.get("required", []) if k not in args]
    if missing:
        raise UserError(f"{tool} needs {', '.join(missing)}", where=f"{tool} argument {missing[0]}",
                        fix=props[missing[0]].get("description"))
    return args


def clean(value: Any) -> Any:
    """A document as an agent may read it: the one filter of machine output (printable_doc)."""
    return printable_doc(value)


def _result(doc: dict[str, Any], *, error: bool = False, text: str | None = None) -> types.CallToolResult:
    body = text if text is not None else json_text(doc, indent=None)
    return types.CallToolResult(content=[types.TextContent(text=body)], structured_content=doc,
                                is_error=error)


# the CLI commands an error's fix may name that an agent has a tool for
_TOOL_OF = {"submit": "gpu_submit", "plan": "gpu_plan", "status": "gpu_status", "wait": "gpu_wait",
            "logs": "gpu_logs", "metrics": "gpu_metrics", "cancel": "gpu_cancel", "jobs": "gpu_jobs"}
_CLI_COMMAND = re.compile(r"`gpu ([a-z]+)([^`]*)`")


def for_agent(text: str | None) -> str | None:
    """An engine error's text in an agent's words: a quoted `gpu CMD ...` that has a tool
    becomes that tool (`gpu submit SCRIPT` -> the gpu_submit tool); one that has none is
    marked as the user's to run (an agent that ran it in a shell would be an agent at a
    terminal, and `gpu approve` refuses it there anyway)."""
    if not text:
        return text

    def one(m: re.Match) -> str:
        cmd, rest = m.group(1), m.group(2)
        tool = _TOOL_OF.get(cmd) or ("gpu_targets" if cmd == "targets" and not rest.strip() else None)
        if tool:
            return f"the {tool} tool"
        return f"{m.group(0)} (the user runs it at their terminal)"

    return _CLI_COMMAND.sub(one, text)


def user_error(exc: UserError) -> types.CallToolResult:
    """The CLI's words (`where: what` and `fix: ...`), filtered: they often echo the input;
    a command the fix names is the tool an agent calls instead (`for_agent`)."""
    exc = UserError(for_agent(exc.what) or "", where=exc.where, fix=for_agent(exc.fix))
    doc = clean(exc.to_json())
    return _result(doc, error=True, text=printable(f"error: {exc.message()}"))


def internal_error(exc: BaseException, tool: str) -> types.CallToolResult:
    """A bug: one line naming the log that holds its traceback (GPU_ROUTER_DEBUG=1: here)."""
    from tui.show.errlog import log_traceback

    where = log_traceback(exc, f"mcp {tool}")
    detail = " ".join(str(exc).split())
    what = f"internal error: {type(exc).__name__}" + (f": {clip(detail, 200)}" if detail else "")
    fix = f"see {where}; it is a bug in gpu-router, not in your call"
    text = f"error: {what}, {fix}"
    if os.environ.get("GPU_ROUTER_DEBUG") == "1":
        import traceback

        text += "\n" + "".join(traceback.format_exception(exc))
    return _result(clean({"error": what, "where": None, "fix": fix}), error=True, text=printable(text))


# -- the server ----------------------------------------------------------------------------


def tool_list() -> list[types.Tool]:
    out = []
    for name, (title, description, schema) in TOOLS.items():
        hints = types.ToolAnnotations(title=title, read_only_hint=name in READ_ONLY or None,
                                      destructive_hint=True if name == "gpu_cancel" else None)
        out.append(types.Tool(name=name, title=title, description=description,
                              input_schema=schema, annotations=hints))
    return out


def _reporter(ctx: Any) -> Call:
    """Progress notifications for a call that asked for them (a progressToken), sent from the
    worker thread through the event loop; and whether the call was cancelled meanwhile."""
    cancel_exc = anyio.get_cancelled_exc_class()  # asked here, in the event loop's thread

    def cancelled() -> bool:
        try:
            anyio.from_thread.check_cancelled()
        except cancel_exc:  # the caller cancelled the request, or the client went away
            return True
        return False

    if not (ctx.meta or {}).get("progress_token"):
        return Call(cancelled=cancelled)
    last = [0.0, -1.0]  # when the last one went, and its value: MCP's progress only grows

    def progress(done: float, total: float | None, text: str) -> None:
        now = time.monotonic()
        final = bool(total) and done >= total
        if done <= last[1] or (now - last[0] < PROGRESS_EVERY_S and not final):
            return
        last[:] = [now, done]
        with contextlib.suppress(Exception):  # a closed stream must not fail the work
            anyio.from_thread.run(ctx.session.report_progress, done, total, printable(text))

    return Call(progress=progress, cancelled=cancelled)


def _starts(name: str, args: dict[str, Any]) -> bool:
    """Whether a call starts a job (its result names one the server then watches)."""
    return name == "gpu_submit" or (name == "compute_job" and args.get("action") in ("start", "resume"))


def _job_status(store: Any, job: Any) -> dict[str, Any]:
    from core.engine.reports import agent_status

    return agent_status(store, job, front="gpu")


def build_server(engine: Engine | None = None) -> tuple[Server, JobWatch]:
    """The server, and the watch that tells its client when the jobs it follows move
    (run it beside the server: `JobWatch.run`)."""
    engine = engine or Engine()
    handlers = {**HANDLERS, "compute_job": compute_job}
    tools = tool_list()
    bus = InMemorySubscriptionBus()
    watch = JobWatch(store=lambda: engine.store(supervise=False), status=_job_status, bus=bus)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        watch.attach(ctx)
        try:
            if name not in TOOLS:
                raise UserError(f"there is no tool {shorten(name)}", fix=f"the tools: {', '.join(TOOLS)}")
            args = check_arguments(name, TOOLS[name][2], params.arguments)
            doc = await anyio.to_thread.run_sync(handlers[name], engine, args, _reporter(ctx))
        except UserError as exc:
            return user_error(exc)
        except Exception as exc:  # noqa: BLE001 - a bug is an answer, never the server's end
            return internal_error(exc, name)
        if _starts(name, args):
            watch.started(doc)
        return _result(clean(doc))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        watch.attach(ctx)
        return watch.listing()

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return watch.templates()

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        watch.attach(ctx)
        return await watch.read(params.uri, clean)

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        watch.attach(ctx)
        await watch.subscribe(params.uri)
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        watch.unsubscribe(params.uri)
        return types.EmptyResult()

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        watch.attach(ctx)
        watch.set_level(params.level)
        return types.EmptyResult()

    server = Server("gpu-router", version=__version__, title="gpu-router", instructions=INSTRUCTIONS,
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource,
                    on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe,
                    on_subscriptions_listen=ListenHandler(bus))
    # declared so that the end-of-job log notifications have a capability to ride on (the
    # constructor's on_set_logging_level warns that the 2026 protocol drops it)
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server, watch


async def _serve(server: Server, watch: JobWatch) -> None:
    async with stdio_server() as (read, write):
        with contextlib.redirect_stdout(sys.stderr):  # the wire is the SDK's alone
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch.run, clean)
                await server.run(read, write, server.create_initialization_options())
                tasks.cancel_scope.cancel()


def serve() -> int:
    """Serve until the client closes stdin."""
    anyio.run(_serve, *build_server())
    return 0
