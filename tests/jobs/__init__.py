"""Tests of core/jobs/: the job record: store, states, events, the read-only reader."""
