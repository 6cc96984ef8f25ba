"""What ships: the bundle, the credential list, the hash cache, safe unpacking."""
