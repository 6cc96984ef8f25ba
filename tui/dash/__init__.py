"""The full-screen dashboard (`gpu dash`): targets, jobs, the log and the curves of one job.

May import core's public modules (never core.providers or core.transport), textual and
tui.show; never another front (tui.cli, tui.mcp, tui.warm): the CLI starts this one
(tui/cli/fronts.py), not the other way round.
"""
