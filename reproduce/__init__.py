"""Reproduction scripts and benchmarks for hippo-engine (see README, "Reproducing the paper")."""
import hippo_engine  # noqa: F401 - first, as the command line does: it sets how long OpenBLAS threads wait
