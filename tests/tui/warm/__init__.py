"""Tests of tui/warm/: the console script and its warm server."""
