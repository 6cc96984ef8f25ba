"""Tests of core/packaging/: the bundle, the credential gate, dependencies, checkpoints' home copy."""
