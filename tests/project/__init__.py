"""Tests of the project itself: the docs, the import rules, the benches, declared dependencies, the quick loop's guard."""
