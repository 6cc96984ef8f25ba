"""The top floor: the submit/cancel service, the supervisor, approvals, fetching, cache GC.

The job record it drives lives a floor below, in core/jobs (so the providers read it without
importing the engine). May import every floor of core/ below it; never tui/: the fronts come to
the engine's public functions, never the other way (tests/project/test_import_rules.py: FLOORS).
"""
