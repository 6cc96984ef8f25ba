"""Running commands and moving files: the local shell and SSH behind one interface."""
