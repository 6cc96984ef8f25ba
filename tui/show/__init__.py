"""What every front shows: the one way out to the terminal (output.py), the tables and panels
people read (render.py), and the error log a bug's traceback goes to (errlog.py).

The fronts (tui.cli, tui.mcp, tui.dash, tui.warm) import this; it imports core's public
modules and rich, never a front. Imports stay lazy: output.py is on every command's path.
"""
