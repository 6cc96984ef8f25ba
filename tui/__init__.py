"""The fronts over `core`, each in its own room: tui.cli (the `gpu` command), tui.mcp (`gpu mcp`),
tui.dash (the dashboard), tui.warm (the console script and its warm server), and tui.show (what
they all show). This file imports nothing: every `gpu` start loads it (tui/warm/__init__.py).
"""
