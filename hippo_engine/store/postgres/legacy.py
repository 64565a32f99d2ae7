"""Indexes made before identities existed, on a shared PostgreSQL server: their folder records
nothing and their schema is the old default ``hippo_<folder name>``
(:func:`hippo_engine.store.postgres.naming.legacy_schema`), which folders of one name shared.

:func:`usable_legacy_schema` decides, for a folder without an identity, whether it keeps that
schema: yes when it holds an index nobody has claimed yet (the first folder to open it after
the upgrade claims it) or one this folder claimed; a schema another folder claimed is refused
for a folder that already holds files (its documents may be in there: the caller must choose)
and skipped for a new, empty folder (it gets a schema of its own).
"""
from __future__ import annotations

import os
from pathlib import Path

from hippo_engine.store.base import StoreError
from hippo_engine.store.identity import folder_key
from hippo_engine.store.postgres.errors import connect_error, translate
from hippo_engine.store.postgres.naming import default_schema
from hippo_engine.store.postgres.schema import psycopg_module


def legacy_owner(dsn: str, schema: str) -> tuple[bool, str | None, str | None]:
    """(``schema`` holds an index, its ``index_id``, its ``index_folder``) on the server of ``dsn``."""
    psycopg = psycopg_module()
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as e:
        raise connect_error(e, dsn, schema) from None
    try:
        with conn:
            if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".meta',)).fetchone()[0]:
                return False, None, None
            rows = dict(conn.execute(f'SELECT key, value FROM "{schema}".meta WHERE key IN '
                                     "('schema_version', 'index_id', 'index_folder')").fetchall())
    except psycopg.Error as e:
        raise translate(e, f"postgresql schema {schema}", None, dsn) from None
    return "schema_version" in rows, rows.get("index_id"), rows.get("index_folder")


def _is_new(save_dir: Path) -> bool:
    """Whether ``save_dir`` holds nothing yet (a folder being made an index now)."""
    try:
        with os.scandir(save_dir) as it:
            return next(it, None) is None
    except FileNotFoundError:
        return True


def usable_legacy_schema(save_dir: Path, dsn: str, legacy: str) -> str | None:
    """``legacy`` if this folder (which records no identity) keeps its old default schema, else
    None (use the new default); an error if another folder claimed it and this one is not new."""
    holds, index_id, owner = legacy_owner(dsn, legacy)
    if not holds:
        return None
    if index_id is None or owner == folder_key(save_dir):
        return legacy
    if _is_new(save_dir):
        return None
    raise StoreError(
        f"{save_dir} records no index identity, and the schema {legacy} its name gave before (an index made by an "
        f"older hippo-engine) now holds the index of another folder ({owner}, index id {index_id}); nothing was "
        f"read or written. If this folder's documents were written there too (folders of one name shared that "
        f"schema), pass postgres_schema={legacy!r} to keep sharing it; to start this folder's own index, pass "
        f"postgres_schema={default_schema(save_dir, False)!r}.")


__all__ = ["legacy_owner", "usable_legacy_schema"]
