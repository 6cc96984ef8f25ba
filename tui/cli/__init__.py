"""The `gpu` command line: one module per command group, the parser assembled in parser.py.

`main` and `build_parser` are named here, where tests, docs and the warm server reach them
(`from tui.cli import main`). A command module may import core's public modules (never
core.providers or core.transport), tui.show (the terminal and the rendering all fronts share)
and its siblings in tui.cli; never another front (tui.mcp, tui.dash, tui.warm), except the
named doors tests/test_import_rules.py lists (`gpu dash` and `gpu mcp` start those fronts,
`gpu daemon` shows and stops the warm server).
"""

from tui.cli.parser import _command_of, build_parser, main, parse

__all__ = ["_command_of", "build_parser", "main", "parse"]
