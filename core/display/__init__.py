"""Text shown to people: terminal-safe rendering (sanitize), following a log (logtail) and
searching it (search).

Low in the house, so every floor above can show text through the one filter: imports only
core.errors, core.paths and core.runtime (tests/project/test_import_rules.py: FLOORS).
"""
