"""What ships and what comes home: the project's listing and the bundle (listing, bundle,
objects, filecache), what never ships (credentials, gate, leftout), the dependencies as every
target reads them (requirements, depfiles, depcheck, wheelhouse), data sets (local_data, hfdata),
the one writer under runs/ (runswriter) and safe unpacking, and the home copy of a running job's
checkpoints (checkpoints/).

Above config and below the transport: imports core.config, core.secrets, core.jobs,
core.display, core.runtime, core.errors and core.paths; never a target's transport or provider,
the planner or the engine (tests/project/test_import_rules.py: FLOORS).
"""
