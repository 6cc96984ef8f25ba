"""Tests of core/secrets/: the keychain, the names index, the env scan."""
