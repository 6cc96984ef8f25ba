"""Tests of core/config/: the request, the user config, kill rules as read."""
