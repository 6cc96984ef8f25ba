"""`gpu mcp`: the Model Context Protocol server that serves gpu-router to AI agents.

server.py holds the SDK, argument checks, errors and progress; schema.py every tool's schema
(gpu_submit's is the contract's); tools.py and compute.py the tools, calling the engine;
watch.py a job's resource and its updates. The MCP SDK is imported only here, so no other
command pays for it. May import core's public modules (never core.providers or
core.transport) and tui.show; never another front (tui.cli, tui.dash, tui.warm): the CLI
starts this one (`gpu mcp`), not the other way round.
"""
