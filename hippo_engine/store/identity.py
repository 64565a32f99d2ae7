"""An index's identity: a UUID kept in its folder and in its database.

At creation an index gets an id (a random UUID), written in the database (meta rows
``index_id`` and ``index_folder``, the folder that created it) and in the folder, in
:data:`IDENTITY_FILE` (JSON: the id, the backend, the PostgreSQL schema and a description of the
server, never a DSN or a password). The file tells every later open, without ``--storage``,
where the index lives (:func:`hippo_engine.store.opening.recorded_storage`); the two copies of the
id tell a folder's index from another folder's index in a shared PostgreSQL schema
(:func:`reconcile`), and an SQLite file deleted under the folder from a folder that never held one.
"""
from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from hippo_engine.store.base import IndexStore, StoreError
from hippo_engine.store.registry import backend_names
from hippo_engine.system import atomic_write_text

logger = logging.getLogger(__name__)

IDENTITY_FILE = "hippo-index.json"
FORMAT = 1
#: what a record may hold (anything else in the file is ignored)
FIELDS = ("format", "index_id", "backend", "schema", "server")


def identity_path(save_dir: str | Path) -> Path:
    """The identity file of the index folder ``save_dir``."""
    return Path(save_dir) / IDENTITY_FILE


def read_identity(save_dir: str | Path) -> dict | None:
    """The identity record of ``save_dir`` (None: the folder has none); an unreadable file is an
    error that names it (it is never silently replaced)."""
    path = identity_path(save_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StoreError(f"{path}: unreadable index identity ({e}); restore it, or remove it if this folder "
                         "holds no index any more") from None
    if not isinstance(data, dict) or not isinstance(data.get("index_id"), str) or \
            data.get("backend") not in backend_names():
        raise StoreError(f"{path}: not an index identity record (expected index_id and backend)")
    return {k: data.get(k) for k in FIELDS}


def write_identity(save_dir: str | Path, record: dict) -> None:
    """Write ``record`` to the identity file of ``save_dir`` (atomically)."""
    data = {k: record.get(k) for k in FIELDS} | {"format": FORMAT}
    atomic_write_text(identity_path(save_dir), json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def folder_key(save_dir: str | Path) -> str:
    """How the database names the folder an index was created from (its resolved path)."""
    return str(Path(save_dir).resolve())


def claim_id(store: IndexStore, save_dir: str | Path, want: str | None = None) -> str:
    """The index id in ``store``, written there first (``want`` or a new UUID, and this folder)
    if it has none: under the writer lock, so two processes creating one index agree."""
    with store.transaction():
        have = store.get_meta("index_id")
        if have is None:
            have = want or str(uuid.uuid4())
            store.set_meta("index_id", have)
            store.set_meta("index_folder", folder_key(save_dir))
    return have


def foreign_index_error(store: IndexStore, save_dir, rec: dict | None, db_id: str) -> StoreError:
    """The error for a database (schema) that holds another folder's index."""
    other = store.get_meta("index_folder") or "an unknown folder"
    mine = f"index id {rec['index_id']}" if rec else "no index id yet"
    schema = getattr(store, "schema", None)
    share = (f" To share that index on purpose, pass postgres_schema={schema!r} explicitly; otherwise give this "
             "folder its own schema (the default for a new folder).") if schema else ""
    return StoreError(f"{store.location} holds the index of another folder ({other}, index id {db_id}), not the "
                      f"index of {folder_key(save_dir)} ({mine}); nothing was read or written.{share}")


def reconcile(store: IndexStore, save_dir: str | Path, rec: dict | None, record: dict, *,
              check_owner: bool) -> str:
    """Make ``store`` and the folder's identity file agree; returns the index id.

    ``record``: what the file should say (backend, schema, server). ``check_owner`` (a schema on
    a shared server, not named explicitly): a store holding another folder's index is refused
    (:func:`foreign_index_error`); otherwise the database's id wins and the file follows it,
    except that a folder opened on an explicitly named schema keeps the file it has."""
    db_id = store.get_meta("index_id")
    if check_owner and db_id is not None:
        owner = store.get_meta("index_folder")
        if rec is not None and rec["index_id"] != db_id or rec is None and owner not in (None, folder_key(save_dir)):
            raise foreign_index_error(store, save_dir, rec, db_id)
    if db_id is None:
        db_id = claim_id(store, save_dir, rec["index_id"] if rec else None)
    explicit = record.get("explicit", False)
    want = {**record, "index_id": db_id}
    if rec is None or not explicit and any(rec.get(k) != want.get(k) for k in ("index_id", "backend", "schema")):
        if rec is not None:
            logger.warning("%s: the identity file said %s; now %s", identity_path(save_dir), rec, want)
        write_identity(save_dir, want)
    return db_id


__all__ = ["IDENTITY_FILE", "claim_id", "folder_key", "foreign_index_error", "identity_path", "read_identity",
           "reconcile", "write_identity"]
