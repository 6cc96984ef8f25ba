"""Tests of tui/: one folder per front."""
