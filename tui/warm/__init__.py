"""The warm path of `gpu`: the console script (launcher.py), the warm server (server.py) and
their socket protocol (wire.py).

Imported on every `gpu` start, so this file imports nothing: the launcher's path stays the
standard library's C modules only (tests/tui/cli/test_startup.py, tests/tui/warm/test_warm.py). May import
core's public modules (the server only) and tui.show; of the other fronts only tui.cli, whose
`main` the launcher runs here and the server's children run for a client.
"""
