"""Tests of tui/dash/: the dashboard."""
