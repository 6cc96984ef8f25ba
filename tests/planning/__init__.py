"""Tests of core/planning/: the plan and its digest, the router, the approval rules, usage, kill rules' judge."""
