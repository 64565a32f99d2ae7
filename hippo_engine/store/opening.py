"""Opening the store an index lives in, by the configured backend (``storage_backend``) or, when
the caller named none, by what its folder recorded (:func:`recorded_storage`).

Every index folder records its backend and identity in ``hippo-index.json``
(:mod:`hippo_engine.store.identity`), written at creation. On a PostgreSQL server given by a
DSN, the default schema is unique per folder (``hippo_<name>_<hash of the resolved path>``);
the schema recorded in the folder is used afterwards (so a moved folder keeps its index), and an
index made before identities existed keeps its old ``hippo_<name>`` schema.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from hippo_engine.store.base import IndexStore, StoreError
from hippo_engine.store.identity import IDENTITY_FILE, read_identity, reconcile
from hippo_engine.store.postgres.naming import default_schema, legacy_schema
from hippo_engine.store.registry import backend_for

logger = logging.getLogger(__name__)

SQLITE_FILE = "index.sqlite"
POSTGRES_DIR = "postgres"
EMBEDDED = "embedded"


def recorded_storage(save_dir: str | Path) -> dict | None:
    """Where the index in ``save_dir`` lives, as its folder recorded it: ``{"storage_backend",
    "postgres_schema", "server" ("embedded" or a description of a DSN server), "index_id"}``;
    for a folder made before identities existed, what its files show (an ``index.sqlite`` or an
    embedded server's data), with ``index_id`` None. None: no index recorded in ``save_dir``."""
    save_dir = Path(save_dir)
    rec = read_identity(save_dir)
    if rec is not None:
        return {"storage_backend": rec["backend"], "postgres_schema": rec.get("schema"),
                "server": rec.get("server"), "index_id": rec["index_id"]}
    sqlite = (save_dir / SQLITE_FILE).is_file()
    embedded = (save_dir / POSTGRES_DIR / "PG_VERSION").is_file()
    if sqlite == embedded:   # neither, or both (ambiguous: the caller's configuration decides)
        return None
    return {"storage_backend": "sqlite" if sqlite else "postgres", "postgres_schema": None,
            "server": None if sqlite else EMBEDDED, "index_id": None}


def with_recorded_backend(save_dir: str | Path, config):
    """``config`` with the backend the folder recorded, when ``config`` has the default one
    (``sqlite``) and the folder's index lives in PostgreSQL (for callers that named no backend)."""
    rec = recorded_storage(save_dir)
    if rec is None or config.storage_backend != "sqlite" or rec["storage_backend"] == "sqlite":
        return config
    return config.replace(storage_backend=rec["storage_backend"])


def open_index_store(save_dir: Path, config) -> IndexStore:
    """The ``IndexStore`` of the index in ``save_dir``: the SQLite file, or PostgreSQL (the
    server of ``postgres_dsn``, else an embedded one under ``save_dir/postgres``, started here
    and stopped by the store's ``close()`` when this call started it). The folder's identity
    (:mod:`~hippo_engine.store.identity`) is checked against the database, and written at creation."""
    save_dir = Path(save_dir)
    rec = read_identity(save_dir)
    _refuse_other_backend(save_dir, rec, config)
    return backend_for(config.storage_backend).open(save_dir, rec, config)


def _refuse_other_backend(save_dir: Path, rec: dict | None, config) -> None:
    if rec is None:
        return
    if rec["backend"] != config.storage_backend:
        raise StoreError(f"the index in {save_dir} is kept in {rec['backend']} (recorded in {IDENTITY_FILE}), "
                         f"but it was opened with storage {config.storage_backend!r}; open it without a storage "
                         f"setting (the recorded backend is used) or with storage={rec['backend']!r}")
    if rec["backend"] == "postgres" and rec.get("server") not in (None, EMBEDDED) and config.postgres_dsn is None:
        raise StoreError(f"the index in {save_dir} lives on a PostgreSQL server ({rec['server']}, schema "
                         f"{rec.get('schema')}); give its DSN (dsn=... / --dsn)")


def refuse_missing(save_dir: Path, rec: dict | None, what: Path) -> None:
    """An index recorded in the folder whose database is gone is an error, never a new empty index."""
    if rec is not None and not what.exists():
        raise StoreError(f"the index in {save_dir} (index id {rec['index_id']}) has lost its database: {what} is "
                         f"missing (deleted or moved while the folder kept {IDENTITY_FILE}). Restore it; to "
                         f"start a new empty index here instead, remove {save_dir / IDENTITY_FILE}.")


def index_exists(save_dir: Path, config) -> bool:
    """Whether ``save_dir`` holds an index (without creating one): one its folder recorded (of
    any backend: opening it then uses that backend or refuses a different one clearly), else one
    of the configured backend (an index on a ``postgres_dsn`` server is taken to exist)."""
    save_dir = Path(save_dir)
    if recorded_storage(save_dir) is not None:
        return True
    return backend_for(getattr(config, "storage_backend", None) or "sqlite").exists(save_dir, config)


def drop_folder(save_dir: Path, config=None) -> None:
    """Remove the index folder ``save_dir`` with what it holds; a missing folder is no error."""
    shutil.rmtree(save_dir, ignore_errors=not save_dir.exists())


def checked(store: IndexStore, save_dir: Path, rec: dict | None, record: dict, *, check_owner: bool) -> None:
    """Reconcile the identity of ``store`` with the folder's; close the store on failure."""
    try:
        reconcile(store, save_dir, rec, record, check_owner=check_owner)
    except BaseException:
        store.close()
        raise


__all__ = ["EMBEDDED", "POSTGRES_DIR", "SQLITE_FILE", "checked", "default_schema", "drop_folder", "index_exists",
           "legacy_schema", "open_index_store", "recorded_storage", "refuse_missing", "with_recorded_backend"]
