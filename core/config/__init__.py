"""The job request (gpu.yaml merged with arguments) and the user's own config: reading them
safely (safeyaml, yamlfile), checking them (schema, limits, targetopts), the kill rules as read,
a sweep's points, and `gpu config`'s edits.

A floor above core.jobs and core.secrets (a request names secrets by name, never by value);
imports those, core.display, core.errors, core.paths and core.runtime, never packaging,
transport, providers, planning or the engine (tests/project/test_import_rules.py: FLOORS).
"""
