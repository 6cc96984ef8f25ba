"""gpu-router's engine: requests, bundles, the store, the supervisor and the providers.

Nothing here imports a terminal UI; `tui/` is a thin front over these modules (a test enforces it).
"""

__version__ = "0.1.0"
