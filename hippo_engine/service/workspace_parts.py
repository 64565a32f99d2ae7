"""What the workspaces of one server share and how a closed one is read (see :mod:`.workspaces`): a request's
:class:`Lease` and the lifecycle's refusals, :class:`SharedEncoder` (one encoder for every workspace), the
storage options of the root folder and a closed workspace's document count (read through the storage
backend's :class:`~hippo_engine.store.registry.SharedStorage`)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hippo_engine.models.encoder import Encoder
from hippo_engine.store.jobs import ClosedTables
from hippo_engine.store.registry import SharedStorage

#: seconds a client is asked to wait (``Retry-After``) when every open workspace is busy
BUSY_RETRY_S = 2


class WorkspaceLimitError(Exception):
    """Creating one more named workspace would pass the server's limit (HTTP 409)."""


class WorkspacesBusyError(Exception):
    """The most workspaces that may be open are open and each is in use (HTTP 503; try again later)."""

    retry_after = BUSY_RETRY_S


class Lease:
    """A request's hold on an open workspace: while held, the workspace is not closed for idleness or to
    make room (deletion still closes it). :meth:`release` (idempotent) ends it; also a context manager."""

    def __init__(self, owner: Any, name: str, memory: Any):
        self.name, self.memory, self._owner, self._held = name, memory, owner, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._owner._release(self.name)

    def __enter__(self) -> Any:
        return self.memory

    def __exit__(self, *exc) -> None:
        self.release()


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

    def encode_groups(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[np.ndarray]:
        inner = self.inner()
        with self._lock:
            return inner.encode_groups(groups)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.inner(), attr)


def count_closed(folder: Path, storage: SharedStorage) -> int:
    """How many documents the workspace in ``folder`` lists (:mod:`.doclist`: the index's document registry
    and the queue's documents not indexed yet), read without opening it through ``storage`` (0: it has no
    database yet)."""
    with storage.closed_tables(folder) as tables:
        return 0 if tables is None else _count(tables)


def _count(tables: ClosedTables) -> int:
    """:func:`.doclist.count` over a closed index's tables. A folder never served has no queue: its registry
    counts; one not opened since the registry came counts its documented ids."""
    from hippo_engine.service.doclist import count
    one = lambda sql: int(tables.run(sql, ()).fetchone()[0])    # noqa: E731 - a one-line reader
    if {"r", "d", "m"} <= tables.have:
        return count(lambda conn, sql, params: tables.run(sql, params), None)
    if "r" in tables.have:
        return one("SELECT COUNT(*) FROM {r}")
    return one("SELECT COUNT(*) FROM {documents} WHERE pos = 0") if "documents" in tables.have else 0


def storage_options(root: Path, opts: dict) -> tuple[dict, str | None, str | None]:
    """(the other options, the backend, its server): given ones, else what the root folder recorded. A
    backend's server setting (``postgres_dsn`` or its alias ``dsn``, ``falkordb_server``: each backend's
    ``server_setting``) chooses that backend."""
    from hippo_engine.store.opening import recorded_storage
    from hippo_engine.store.registry import backend_names, get_backend
    storage = opts.pop("storage", None) or opts.pop("storage_backend", None)
    if opts.get("dsn") is not None:
        opts["postgres_dsn"] = opts.pop("dsn")
    opts.pop("dsn", None)
    cfg = opts.get("config")
    if cfg is not None:
        storage = storage or (cfg.storage_backend if cfg.storage_backend != "sqlite" else None)
    server = None
    for name in backend_names():
        setting = get_backend(name).server_setting
        if setting is None:
            continue
        value = opts.pop(setting, None) or (getattr(cfg, setting, None) if cfg is not None else None)
        if value is not None and server is None:
            storage, server = name, value
    if storage is None:
        rec = recorded_storage(root)
        storage = rec["storage_backend"] if rec else None
    return opts, storage, server


def share_encoder(rag, opts: dict) -> SharedEncoder:
    """The encoder every workspace shares: the given one, or the model ``rag`` would make, made on first use."""
    given = opts.get("encoder")
    if isinstance(given, SharedEncoder):
        return given
    if given is not None:
        return SharedEncoder(lambda: given, given.name)
    from hippo_engine.llm.providers import Models
    models = Models(rag.config, rag.save_dir, rag.llm_model_name, rag.embedding_model_name)
    return SharedEncoder(models.encoder, rag.embedding_model_name)


__all__ = ["BUSY_RETRY_S", "Lease", "SharedEncoder", "WorkspaceLimitError", "WorkspacesBusyError", "count_closed",
           "share_encoder", "storage_options"]
