"""Secret values: the keychain, the names index, the env scan, launch-time reads."""
