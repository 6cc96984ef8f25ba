"""Secret values: the keychain (keychain, store), the index of their names (names), token shapes
(tokens), the scan of a request's env and args for secret-shaped values (scan), and the read at
launch (launch).

Low in the house so every floor above asks it rather than holding values: imports only
core.jobs, core.display, core.runtime, core.errors and core.paths (tests/project/test_import_rules.py:
FLOORS).
"""
