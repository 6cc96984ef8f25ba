"""The job record every part reads: the store (jobs, events, metrics), the state table, the store thread.

A floor below config, planning, the providers and the engine: it imports only core.paths,
core.errors, core.display and core.runtime, so a provider can read and write a job without the
engine (tests/project/test_import_rules.py: FLOORS).
"""
