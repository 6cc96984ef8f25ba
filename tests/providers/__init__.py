"""Tests of core/providers/: one class per target kind (local, ssh, slurm, pbs, kaggle, modal, ...), accounts."""
