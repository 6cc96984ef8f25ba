"""Tests of core/runtime/: what runs beside the job: launcher, sandbox, masking, checkpoints, the gpu module."""
