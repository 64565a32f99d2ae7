"""Opening the store an index lives in, by the configured backend (``storage_backend``)."""
from __future__ import annotations

import logging
import re
from pathlib import Path

from hippo_engine.store.base import IndexStore

logger = logging.getLogger(__name__)

SQLITE_FILE = "index.sqlite"
POSTGRES_DIR = "postgres"


def default_schema(save_dir: Path, embedded: bool) -> str:
    """``hippo`` on an embedded server (one index per server); on a shared server
    ``hippo_<save_dir name>`` (lowercase, letters, digits and ``_``)."""
    if embedded:
        return "hippo"
    name = re.sub(r"[^a-z0-9_]+", "_", Path(save_dir).resolve().name.lower()).strip("_") or "index"
    return ("hippo_" + name)[:63]


def open_index_store(save_dir: Path, config) -> IndexStore:
    """The ``IndexStore`` of the index in ``save_dir``: the SQLite file, or PostgreSQL (the
    server of ``postgres_dsn``, else an embedded one under ``save_dir/postgres``, started here
    and stopped by the store's ``close()`` when this call started it)."""
    save_dir = Path(save_dir)
    if config.storage_backend == "sqlite":
        from hippo_engine.store.db import IndexDB
        return IndexDB(save_dir / SQLITE_FILE)
    from hippo_engine.store.postgres import EmbeddedPostgres, PostgresIndexStore
    server = None
    dsn = config.postgres_dsn
    if dsn is None:
        server = EmbeddedPostgres(save_dir / POSTGRES_DIR)
        dsn = server.start()
    schema = config.postgres_schema or default_schema(save_dir, embedded=server is not None)
    try:
        store = PostgresIndexStore(dsn, schema)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    if server is not None:
        store.owned_server = server
    logger.info("index store: %s", store.location)
    return store


def index_exists(save_dir: Path, config) -> bool:
    """Whether ``save_dir`` holds an index of the configured backend (without creating one; an
    index on a ``postgres_dsn`` server is taken to exist)."""
    save_dir = Path(save_dir)
    if config.storage_backend == "sqlite":
        return (save_dir / SQLITE_FILE).is_file()
    if config.postgres_dsn is None:
        return (save_dir / POSTGRES_DIR / "PG_VERSION").is_file()
    return True


__all__ = ["default_schema", "index_exists", "open_index_store"]
