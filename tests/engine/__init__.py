"""Tests of core/engine/: the service, supervisor, approvals and PIN, fetch, spend, notify."""
