"""Tests of tui/cli/: the `gpu` command, and the first hour through it end to end."""
