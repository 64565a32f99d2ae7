"""Indexing spread over a Ray cluster (the ``ray`` extra): :class:`RayExecutor` runs ``index()``'s
splitting, fact extraction and encodings as Ray Data batches on the workers while this process
commits the results (:mod:`.executor`); :class:`LocalCluster` starts a cluster of several nodes on
this machine, bound to 127.0.0.1 (tests and benchmarks). Ray is imported only when used."""
from __future__ import annotations

from hippo_engine.index.distributed.executor import RayExecutor

__all__ = ["LocalCluster", "RayExecutor"]


def __getattr__(name: str):
    if name == "LocalCluster":
        from hippo_engine.index.distributed.local_cluster import LocalCluster
        return LocalCluster
    raise AttributeError(name)
