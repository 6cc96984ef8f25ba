"""Targets gpu-router can run jobs on, behind one small async interface (`base.Provider`)."""
