"""Tests of core/display/: text shown to people, log following and search."""
