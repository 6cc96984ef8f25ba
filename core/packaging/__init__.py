"""What ships and what comes home: the bundle, the credential list, the hash cache, safe
unpacking, and the home copy of a running job's checkpoints."""
