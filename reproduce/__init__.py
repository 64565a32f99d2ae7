"""Reproduction scripts and benchmarks for hippo-engine (see README, "Reproducing the paper")."""
