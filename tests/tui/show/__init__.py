"""Tests of tui/show/: what the fronts show a terminal."""
