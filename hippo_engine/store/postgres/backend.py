"""The PostgreSQL storage backend's parts (registered as ``postgres`` by
:mod:`hippo_engine.store.builtins`): opening an index folder's store (:func:`open_postgres`), the
service's job tables in the index's schema, dropping an index's schema and the indexes of many folders
under one root (:class:`PostgresShared`: on the server of a DSN or, without one, on the embedded server
of the root folder, ``<root>/postgres``, each folder's index in a schema of its own).
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hippo_engine.store.base import IndexStore
from hippo_engine.store.identity import read_identity
from hippo_engine.store.jobs import ClosedTables
from hippo_engine.store.jobs_sqlite import closed_sqlite_tables
from hippo_engine.store.opening import EMBEDDED, POSTGRES_DIR, SQLITE_FILE, checked, drop_folder, refuse_missing
from hippo_engine.store.postgres.jobs import PostgresJobTables, closed_postgres_tables, drop_schema, transient_errors
from hippo_engine.store.postgres.naming import default_schema, legacy_schema
from hippo_engine.store.postgres.server import EmbeddedPostgres
from hippo_engine.store.registry import SharedStorage

logger = logging.getLogger(__name__)


def open_postgres(save_dir: Path, rec: dict | None, config) -> IndexStore:
    """The store of the index of ``save_dir`` on the server of ``postgres_dsn`` or, without one, on
    an embedded server under ``save_dir/postgres`` (started here, stopped by the store's ``close()``)."""
    from hippo_engine.store.postgres.db import PostgresIndexStore
    from hippo_engine.store.postgres.schema import describe_dsn
    server: EmbeddedPostgres | None = None
    dsn = config.postgres_dsn
    if dsn is None:
        if rec is not None and rec.get("server") == EMBEDDED:
            refuse_missing(save_dir, rec, save_dir / POSTGRES_DIR / "PG_VERSION")
        server = EmbeddedPostgres(save_dir / POSTGRES_DIR)
        dsn = server.start()
    try:
        schema, explicit = _schema_for(save_dir, rec, config, dsn, embedded=server is not None)
        store = PostgresIndexStore(dsn, schema)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    if server is not None:
        store.owned_server = server
    store.search = config.postgres_search
    record = {"backend": "postgres", "schema": schema, "explicit": explicit,
              "server": EMBEDDED if server is not None else describe_dsn(dsn)}
    checked(store, save_dir, rec, record, check_owner=server is None and not explicit)
    logger.info("index store: %s", store.location)
    return store


def _schema_for(save_dir: Path, rec: dict | None, config, dsn: str, *, embedded: bool) -> tuple[str, bool]:
    """(schema, named explicitly): the configured one, else the recorded one, else the default
    (on a shared server, an index made before identities keeps its old default schema)."""
    from hippo_engine.store.postgres.schema import check_schema_name
    if getattr(config, "postgres_schema", None):
        return check_schema_name(config.postgres_schema), True
    if rec is not None and rec.get("schema"):
        return rec["schema"], False
    if embedded:
        return default_schema(save_dir, embedded=True), False
    from hippo_engine.store.postgres.legacy import usable_legacy_schema
    return usable_legacy_schema(save_dir, dsn, legacy_schema(save_dir)) or default_schema(save_dir, False), False


def postgres_exists(save_dir: Path, config) -> bool:
    """An embedded server's data in the folder; an index on a ``postgres_dsn`` server is taken to exist."""
    if getattr(config, "postgres_dsn", None) is None:
        return (save_dir / POSTGRES_DIR / "PG_VERSION").is_file()
    return True


def postgres_job_tables(store: Any, config) -> PostgresJobTables:
    """The job tables in the schema of the opened index ``store`` (a ``PostgresIndexStore``)."""
    return PostgresJobTables(store.dsn, store.schema)


def _drop(save_dir: Path, dsn: str | None) -> None:
    """Drop the schema the folder recorded (on the server of ``dsn``; an embedded server's data is in
    the folder), then remove the folder."""
    rec = read_identity(save_dir)
    if dsn is not None and rec is not None and rec.get("backend") == "postgres" and rec.get("schema"):
        drop_schema(dsn, rec["schema"], save_dir)
    drop_folder(save_dir)


def drop_postgres(save_dir: Path, config) -> None:
    """Remove the (closed) index of ``save_dir``: its schema on the server of ``postgres_dsn`` (checked to
    hold this folder's index and no other's) and the folder (with an embedded server's data)."""
    _drop(save_dir, getattr(config, "postgres_dsn", None))


class PostgresShared(SharedStorage):
    """The indexes of the folders under ``root`` on one server: the server of the DSN ``server`` or, without
    one, the embedded server of the root's own index (``root/postgres``, started on first need and left
    by :meth:`close`). The root's index keeps the configured schema; a named folder's gets its own (its
    folder's identity gives it one: ``hippo_<name>_<hash of the folder>``)."""

    def __init__(self, root: Path, server: str | None = None):
        self.root, self._dsn = Path(root), server
        self._server: EmbeddedPostgres | None = None
        self._lock = threading.Lock()

    def dsn(self) -> str:
        """The server's DSN (the embedded server of the root, started or joined here)."""
        if self._dsn is not None:
            return self._dsn
        with self._lock:
            if self._server is None:
                server = EmbeddedPostgres(self.root / POSTGRES_DIR)
                server.start()
                self._server = server
            return self._server.dsn()

    def options(self, opts: dict, default: bool) -> dict:
        dsn = self._dsn
        if not default:
            opts.pop("postgres_schema", None)
            if opts.get("config") is not None and opts["config"].postgres_schema:
                opts["config"] = opts["config"].replace(postgres_schema=None)
            dsn = self.dsn()
        if dsn is not None:
            opts["dsn"] = dsn
        return opts

    @contextlib.contextmanager
    def closed_tables(self, folder: Path) -> Iterator[ClosedTables | None]:
        rec = read_identity(folder)
        if rec is None or rec["backend"] == "sqlite":
            with closed_sqlite_tables(folder / SQLITE_FILE) as tables:
                yield tables
            return
        with closed_postgres_tables(self.dsn, rec["schema"]) as tables:
            yield tables

    def drop(self, folder: Path) -> None:
        rec = read_identity(folder)
        _drop(folder, self.dsn() if rec is not None and rec.get("backend") == "postgres" and rec.get("schema")
              else None)

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None


__all__ = ["PostgresShared", "drop_postgres", "open_postgres", "postgres_exists", "postgres_job_tables",
           "transient_errors"]
