"""Many isolated memories on one server: :class:`Workspaces`.

The default workspace is the index in ``root`` itself; a named one is the index in
``root/workspaces/<name>`` (names: :data:`NAME`), made on its first write. With SQLite each folder holds its
own database file; with PostgreSQL each folder's index lives in its own schema (the store's identity gives a
new folder a schema of its own: ``hippo_<name>_<hash of the folder>``), on the server of the configured DSN
or, without one, on the embedded server of the default workspace (``root/postgres``). A workspace's data is
reached only through its folder, so no request reaches another workspace's data.

Each open workspace is a :class:`~hippo_engine.service.memory.Memory` with two ``HippoRAG`` objects on its
index (queries, and the ingestion worker's writes) sharing one encoder per server (:class:`SharedEncoder`:
loaded once, one ``encode`` at a time).
"""
from __future__ import annotations

import contextlib
import logging
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hippo_engine.models.encoder import Encoder
from hippo_engine.service.memory import Memory
from hippo_engine.store.base import StoreError

logger = logging.getLogger(__name__)

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT = "default"
FOLDER = "workspaces"


def check_name(name: str | None) -> str:
    """A workspace name (``None`` and ``"default"`` are the default workspace); ValueError for others."""
    if name is None:
        return DEFAULT
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"workspace name {name!r}: use 1 to 63 lowercase letters, digits, '_' or '-', starting "
                         "with a letter or digit")
    return name


class SharedEncoder(Encoder):
    """One encoder for several ``HippoRAG`` objects and threads: made by ``make`` on first use, one
    ``encode`` at a time (tokenizers are not safe to share across threads); other attributes are the inner's."""

    def __init__(self, make: Callable[[], Encoder], name: str):
        self.name, self._make = name, make
        self._inner: Encoder | None = None
        self._lock = threading.Lock()

    def inner(self) -> Encoder:
        with self._lock:
            if self._inner is None:
                self._inner = self._make()
            return self._inner

    @property
    def dim(self) -> int:  # type: ignore[override]  # a plain attribute in Encoder; known once made here
        return self.inner().dim

    def encode(self, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
        inner = self.inner()
        with self._lock:
            return inner.encode(texts, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.inner(), attr)


class Workspaces:
    """The workspaces under ``root``. ``rag_options``: ``HippoRAG`` keyword arguments (``storage``, ``dsn``,
    models, ``extractor``, config overrides) for every workspace; ``memory_options``: ``Memory`` keyword
    arguments (``batch_size``, ``worker``, ``poll_s``). ``separate_writer``: give each memory a second
    ``HippoRAG`` for its worker's writes (queries never wait for a batch). Thread-safe."""

    def __init__(self, root: str | Path, *, rag_options: dict | None = None, memory_options: dict | None = None,
                 separate_writer: bool = True):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.memory_options = dict(memory_options or {})
        self.separate_writer = separate_writer
        self._opts, self._storage, self._dsn = _storage_options(self.root, dict(rag_options or {}))
        self._memories: dict[str, Memory] = {}
        self._lock = threading.RLock()
        self._encoder: SharedEncoder | None = None
        self._server: Any = None        # the embedded server named workspaces use (PostgreSQL without a DSN)

    # ------------------------------------------------------------------ where
    def path(self, name: str | None) -> Path:
        """The folder of workspace ``name``."""
        name = check_name(name)
        return self.root if name == DEFAULT else self.root / FOLDER / name

    def exists(self, name: str | None) -> bool:
        """Whether workspace ``name`` holds an index (the default one always exists)."""
        from hippo_engine.store.opening import recorded_storage
        name = check_name(name)
        return name == DEFAULT or name in self._memories or recorded_storage(self.path(name)) is not None

    # ------------------------------------------------------------------ open
    def get(self, name: str | None, *, create: bool) -> Memory:
        """The memory of workspace ``name`` (None: the default one), opened on first use. ``create``: make it
        if missing (writes); otherwise a missing workspace is a ``KeyError``."""
        name = check_name(name)
        with self._lock:
            mem = self._memories.get(name)
            if mem is not None and name != DEFAULT and not self.path(name).is_dir():
                self._evict(name, mem)      # another server process deleted it: forget our stale copy
                mem = None
            if mem is not None:
                return mem
            if not create and not self.exists(name):
                raise KeyError(f"no workspace {name!r}")
            mem = self._memories[name] = self._open(name)
            return mem

    def _evict(self, name: str, mem: Memory) -> None:
        """Drop an open workspace whose data is gone, stopping its worker (errors of its dead store are logged)."""
        self._memories.pop(name, None)
        try:
            mem.close()
        except Exception:   # noqa: BLE001 - its database may be gone with it
            logger.warning("workspace %r was deleted by another process; closing our copy failed", name, exc_info=True)

    def _open(self, name: str) -> Memory:
        from hippo_engine import HippoRAG
        folder = self.path(name)
        opts = self._options_for(name)
        reader = HippoRAG(folder, **opts)
        recorded = reader.index_state.extractor
        if opts.get("extractor") is None and recorded not in (None, reader.config.extractor):
            reader.close()     # an existing index keeps the extractor it was built with
            opts["extractor"] = recorded
            reader = HippoRAG(folder, **opts)
        writer = None
        try:
            if self._encoder is None:
                self._encoder = _share_encoder(reader, opts)
            reader._encoder = self._encoder     # the facade's encoder slot (``Forwarded`` to its models)
            if self.separate_writer:
                writer = HippoRAG(folder, **{**opts, "encoder": self._encoder, "llm": opts.get("llm")})
            return Memory(reader, writer=writer, **self.memory_options)
        except BaseException:
            if writer is not None:
                writer.close()
            reader.close()
            raise

    def _options_for(self, name: str) -> dict:
        """``HippoRAG`` arguments for a workspace: the shared ones, with the backend and, for a named
        workspace on PostgreSQL, the server (its schema comes from its folder, never the default's)."""
        opts = dict(self._opts)
        if self._encoder is not None:
            opts["encoder"] = self._encoder
        if self._storage == "postgres":
            opts["storage"] = "postgres"
            dsn = self._dsn
            if name != DEFAULT:
                opts.pop("postgres_schema", None)
                if opts.get("config") is not None and opts["config"].postgres_schema:
                    opts["config"] = opts["config"].replace(postgres_schema=None)
                dsn = dsn or self._embedded_dsn()
            if dsn is not None:
                opts["dsn"] = dsn
        elif self._storage is not None:
            opts["storage"] = self._storage
        return opts

    def _embedded_dsn(self) -> str:
        """The DSN of the default workspace's embedded server (started or joined here, left on close)."""
        if self._server is None:
            from hippo_engine.store.opening import POSTGRES_DIR
            from hippo_engine.store.postgres import EmbeddedPostgres
            server = EmbeddedPostgres(self.root / POSTGRES_DIR)
            server.start()
            self._server = server
        return self._server.dsn()

    # ------------------------------------------------------------------ list, delete, close
    def list(self) -> list[dict]:
        """The workspaces: ``[{"name", "documents"}]`` (documents: how many the queue holds, any status)."""
        names = [DEFAULT]
        base = self.root / FOLDER
        if base.is_dir():
            names += sorted(p.name for p in base.iterdir()
                            if p.is_dir() and NAME.fullmatch(p.name) and p.name != DEFAULT and self.exists(p.name))
        return [{"name": n, "documents": self._count(n)} for n in names]

    def _count(self, name: str) -> int | None:
        """How many documents the queue of workspace ``name`` holds, read without opening the workspace
        when it is not open (None: unreadable, logged)."""
        with self._lock:
            mem = self._memories.get(name)
        try:
            if mem is not None:
                return sum(mem.store.counts().values())
            return self._count_closed(name)
        except Exception as e:  # noqa: BLE001 - one unreadable workspace does not hide the others
            logger.warning("workspace %r: cannot count its documents: %s", name, e)
            return None

    def _count_closed(self, name: str) -> int:
        import sqlite3

        from hippo_engine.store.identity import read_identity
        from hippo_engine.store.opening import SQLITE_FILE
        folder = self.path(name)
        rec = read_identity(folder)
        sql = "SELECT COUNT(*) FROM {t} WHERE status <> 'deleted'"
        if rec is None or rec["backend"] == "sqlite":
            path = folder / SQLITE_FILE
            if not path.is_file():
                return 0
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as c:
                if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'service_documents'").fetchone() is None:
                    return 0
                return int(c.execute(sql.format(t="service_documents")).fetchone()[0])
        from hippo_engine.store.postgres.schema import check_schema_name, psycopg_module
        schema = check_schema_name(rec["schema"])
        dsn = self._dsn or self._embedded_dsn()
        with psycopg_module().connect(dsn, autocommit=True) as c:
            table = f'"{schema}".service_documents'
            if not c.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                return 0
            return int(c.execute(sql.format(t=table)).fetchone()[0])

    def delete(self, name: str) -> bool:
        """Delete workspace ``name`` with its data (its folder and, with PostgreSQL, its schema); False if it
        does not exist. The default workspace cannot be deleted."""
        name = check_name(name)
        if name == DEFAULT:
            raise ValueError("the default workspace cannot be deleted (delete its documents instead)")
        with self._lock:
            if not self.exists(name):
                return False
            mem = self._memories.get(name) or self.get(name, create=False)
            db = mem.rag.index_state.db
            schema, dsn = getattr(db, "schema", None), getattr(db, "dsn", None)
            self._memories.pop(name, None)
            mem.close()
            if schema is not None and dsn is not None:
                drop_index_schema(dsn, schema, self.path(name))
            shutil.rmtree(self.path(name))
        return True

    def close(self) -> None:
        """Close every open workspace (their workers finish their batch) and leave the embedded server."""
        with self._lock:
            mems, self._memories = list(self._memories.values()), {}
            for mem in mems:
                try:
                    mem.close()
                except Exception:   # noqa: BLE001 - close the others; this one is logged
                    logger.exception("closing a workspace failed")
            if self._server is not None:
                self._server.stop()
                self._server = None

    def __enter__(self) -> Workspaces:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _storage_options(root: Path, opts: dict) -> tuple[dict, str | None, str | None]:
    """(the other options, the backend, the DSN): given ones, else what the root folder recorded."""
    from hippo_engine.store.opening import recorded_storage
    storage = opts.pop("storage", None) or opts.pop("storage_backend", None)
    dsn = opts.pop("dsn", None) or opts.pop("postgres_dsn", None)
    cfg = opts.get("config")
    if cfg is not None:
        dsn = dsn or cfg.postgres_dsn
        storage = storage or (cfg.storage_backend if cfg.storage_backend != "sqlite" else None)
    if dsn is not None:
        storage = "postgres"
    if storage is None:
        rec = recorded_storage(root)
        storage = rec["storage_backend"] if rec else None
    return opts, storage, dsn


def _share_encoder(rag, opts: dict) -> SharedEncoder:
    """The encoder every workspace shares: the given one, or the model ``rag`` would make, made on first use."""
    given = opts.get("encoder")
    if isinstance(given, SharedEncoder):
        return given
    if given is not None:
        return SharedEncoder(lambda: given, given.name)
    from hippo_engine.models.providers import Models
    models = Models(rag.config, rag.save_dir, rag.llm_model_name, rag.embedding_model_name)
    return SharedEncoder(models.encoder, rag.embedding_model_name)


def drop_index_schema(dsn: str, schema: str, folder: Path) -> None:
    """Drop the PostgreSQL schema of the index of ``folder`` (under its writers' lock), after checking that
    the schema holds that folder's index and no other's."""
    from hippo_engine.store.identity import folder_key
    from hippo_engine.store.postgres.schema import check_schema_name, lock_key, psycopg_module
    check_schema_name(schema)
    with psycopg_module().connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock_key(schema))
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".meta',)).fetchone()[0]:
            row = conn.execute(f"SELECT value FROM \"{schema}\".meta WHERE key = 'index_folder'").fetchone()
            if row is not None and row[0] != folder_key(folder):
                raise StoreError(f"schema {schema} holds the index of {row[0]}, not of {folder_key(folder)}; "
                                 "nothing was dropped")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


__all__ = ["DEFAULT", "NAME", "SharedEncoder", "Workspaces", "check_name", "drop_index_schema"]
