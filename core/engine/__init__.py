"""The top floor: the submit/cancel service, the supervisor, approvals, fetching, cache GC.

The job record it drives lives a floor below, in core/jobs (so the providers read it without
importing the engine).
"""
