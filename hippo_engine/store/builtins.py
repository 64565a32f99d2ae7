"""The built-in storage backends, registered by name in :mod:`hippo_engine.store.registry` (imported
when one is first asked for): :data:`SQLITE_BACKEND` (an index's SQLite file in its folder, the
default) and :data:`POSTGRES_BACKEND` (PostgreSQL + pgvector: :mod:`hippo_engine.store.postgres.backend`).

With SQLite everything of an index is in its folder: its job tables are in its ``index.sqlite``,
dropping it removes the folder, and the indexes under one root share nothing.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hippo_engine.store.base import IndexStore
from hippo_engine.store.jobs import ClosedTables
from hippo_engine.store.jobs_sqlite import TRANSIENT_ERRORS, SQLiteJobTables, closed_sqlite_tables
from hippo_engine.store.opening import SQLITE_FILE, checked, drop_folder, refuse_missing
from hippo_engine.store.postgres import backend as postgres
from hippo_engine.store.registry import SharedStorage, StorageBackend


def open_sqlite(save_dir: Path, rec: dict | None, config=None) -> IndexStore:
    """The index database ``<save_dir>/index.sqlite``, its identity checked (made when new)."""
    from hippo_engine.store.db import IndexDB
    refuse_missing(save_dir, rec, save_dir / SQLITE_FILE)
    store = IndexDB(save_dir / SQLITE_FILE)
    checked(store, save_dir, rec, {"backend": "sqlite"}, check_owner=False)
    return store


def sqlite_exists(save_dir: Path, config) -> bool:
    """Whether ``save_dir`` holds an index database."""
    return (save_dir / SQLITE_FILE).is_file()


def sqlite_job_tables(store: Any, config) -> SQLiteJobTables:
    """The job tables in the file of the opened index ``store`` (an ``IndexDB``), waiting for SQLite's
    write lock as long as the index's writers wait for theirs (at least a minute)."""
    return SQLiteJobTables(store.path, busy_timeout=max(60.0, float(config.write_lock_timeout)))


class SQLiteShared(SharedStorage):
    """Indexes in folders under one root, each with its own SQLite file: nothing to share."""

    def __init__(self, root: Path, server: str | None = None):
        self.root = Path(root)

    def options(self, opts: dict, default: bool) -> dict:
        return opts

    @contextlib.contextmanager
    def closed_tables(self, folder: Path) -> Iterator[ClosedTables | None]:
        with closed_sqlite_tables(folder / SQLITE_FILE) as tables:
            yield tables

    def drop(self, folder: Path) -> None:
        drop_folder(folder)

    def close(self) -> None:
        """Nothing is shared."""


#: the built-in backends
SQLITE_BACKEND = StorageBackend("sqlite", open_sqlite, sqlite_exists, job_tables=sqlite_job_tables,
                                drop=drop_folder, transient_errors=lambda: TRANSIENT_ERRORS, shared=SQLiteShared)
POSTGRES_BACKEND = StorageBackend("postgres", postgres.open_postgres, postgres.postgres_exists, accepts_nul=False,
                                  job_tables=postgres.postgres_job_tables, drop=postgres.drop_postgres,
                                  transient_errors=postgres.transient_errors, shared=postgres.PostgresShared,
                                  server_setting="postgres_dsn")


__all__ = ["POSTGRES_BACKEND", "SQLITE_BACKEND", "SQLiteShared", "open_sqlite", "sqlite_exists",
           "sqlite_job_tables"]
