"""Running commands and moving files: the local shell and SSH (a strict known-hosts check, the
one place a host key is judged) behind one interface (base).

Below the providers, which each hold a transport: imports packaging, config, jobs, secrets,
display, runtime, errors and paths; never a provider (tests/project/test_import_rules.py: FLOORS).
"""
