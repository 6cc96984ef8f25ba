"""Tests of core/transport/: the local shell and SSH behind one interface."""
