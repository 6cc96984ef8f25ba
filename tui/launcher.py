"""The console script of installs made before tui/ had rooms (their bin/gpu runs
`from tui.launcher import main`): the same `main`, now tui/warm/launcher.py. pyproject.toml
names the new path, so `pip install -e .` writes a script that never comes here; this file
goes once every install is redone. Imports only tui.warm.launcher (C modules only).
"""

from tui.warm.launcher import main

__all__ = ["main"]
