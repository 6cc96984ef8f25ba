"""Targets gpu-router can run jobs on, behind one small async interface (`base.Provider`): this
machine (local), hosts over SSH (ssh, and remote*.py: the cache, dependencies, checkpoints,
fetching and probing every host shares), batch clusters (batch: what Slurm and PBS share; slurm,
pbs), Kaggle and Modal (their packages), the SkyPilot adapter (skypilot/), the read-only cloud
accounts (accounts/), and the registry that builds one provider per configured target.

Below planning and the engine: imports the transport, packaging, config, jobs, secrets,
display and runtime; never core.planning, core.engine or tui/ (tests/project/test_import_rules.py:
FLOORS).
"""
