"""Tests of tui/mcp/: the MCP server, through the official client."""
