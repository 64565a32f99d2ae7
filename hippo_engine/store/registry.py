"""The storage backends, registered by name: :func:`register_backend`, :func:`get_backend`.

A backend is a :class:`StorageBackend`: how to open the :class:`~hippo_engine.store.base.IndexStore`
of an index folder, whether a folder holds one of its indexes, and what the service keeps there: the
job tables of its ingestion queue (:class:`~hippo_engine.store.jobs.JobTables`), the drop of an index's
storage, the errors that say the storage is busy or unreachable (retried, never a document's fault) and
the storage of many index folders under one root (:class:`SharedStorage`: a server's workspaces). The
configuration's ``storage_backend`` is checked against the registered names when the storage is
opened (:func:`backend_for`: an unknown name is refused with the list of registered ones);
:func:`~hippo_engine.store.opening.open_index_store` looks the backend up here, and the storage
contract tests (``tests/store/test_index_store_contract.py``, ``tests/store/test_backend_contract.py``)
run every registered backend: a new backend is accepted by registering it and passing them.

The built-in backends (``sqlite``, ``postgres``, :mod:`hippo_engine.store.builtins`; ``falkordb``,
:mod:`hippo_engine.store.falkordb.backend`) are named here
and imported only when first asked for, so naming a backend imports none (nor numpy).
"""
from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hippo_engine.config import ConfigError
from hippo_engine.store.jobs import ClosedTables, JobTables
from hippo_engine.store.lock import IndexLockedError

#: errors of any backend that say the index is busy or unreachable, not that a document is bad
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (IndexLockedError, ConnectionError, TimeoutError)


class SharedStorage(ABC):
    """The indexes of many folders under one root on one backend (a server's workspaces: the root's
    own index and named ones in folders below it), made by ``StorageBackend.shared(root, server)``."""

    @abstractmethod
    def options(self, opts: dict, default: bool) -> dict:
        """``opts`` (``HippoRAG`` arguments) for the index of one folder: the root's own (``default``)
        or a named one, with what this backend adds (where its data lives)."""

    @abstractmethod
    def closed_tables(self, folder: Path) -> contextlib.AbstractContextManager[ClosedTables | None]:
        """The tables of the index in ``folder`` read without opening it (None: it has no database)."""

    @abstractmethod
    def drop(self, folder: Path) -> None:
        """Remove the index of ``folder`` (closed) with its data: its database and the folder."""

    @abstractmethod
    def close(self) -> None:
        """Let go of what the indexes shared (a server started for them)."""


@dataclass(frozen=True)
class StorageBackend:
    """One storage backend.

    ``open(save_dir, recorded, config)``: the ``IndexStore`` of the index in ``save_dir``
    (``recorded``: the folder's identity record, or None for a new folder), its identity checked.
    ``exists(save_dir, config)``: whether ``save_dir`` holds an index of this backend (without
    creating one). ``accepts_nul``: whether its texts can hold NUL characters.
    ``job_tables(store, config)``: the service's job tables beside the opened index ``store``.
    ``drop(save_dir, config)``: remove the (closed) index of ``save_dir`` with its data.
    ``transient_errors()``: this backend's errors that say the index is busy or unreachable (see
    :func:`transient_errors`). ``shared(root, server)``: the :class:`SharedStorage` of the indexes
    under ``root`` (``server``: where they live, e.g. a DSN; None: the backend's default).
    ``server_setting``: the configuration field that names a server of this backend (``postgres_dsn``,
    ``falkordb_server``; None: it has none); giving it chooses the backend.
    """

    name: str
    open: Callable[[Path, dict | None, Any], Any]
    exists: Callable[[Path, Any], bool]
    accepts_nul: bool = True
    job_tables: Callable[[Any, Any], JobTables] = field(kw_only=True)
    drop: Callable[[Path, Any], None] = field(kw_only=True)
    transient_errors: Callable[[], tuple[type[BaseException], ...]] = field(kw_only=True)
    shared: Callable[[Path, str | None], SharedStorage] = field(kw_only=True)
    server_setting: str | None = field(default=None, kw_only=True)


#: built-in backends, imported on first use: name -> "module:attribute" of a StorageBackend
_BUILTINS = {
    "sqlite": "hippo_engine.store.builtins:SQLITE_BACKEND",
    "postgres": "hippo_engine.store.builtins:POSTGRES_BACKEND",
    "falkordb": "hippo_engine.store.falkordb.backend:FALKORDB_BACKEND",
}

_REGISTRY: dict[str, StorageBackend] = {}


def register_backend(backend: StorageBackend) -> None:
    """Register ``backend`` under its name (replacing one of that name)."""
    if not backend.name or not backend.name.isidentifier():
        raise ValueError(f"a storage backend's name must be an identifier, got {backend.name!r}")
    _REGISTRY[backend.name] = backend


def backend_names() -> list[str]:
    """The names of the registered backends (built-ins first), importing none of them."""
    return list(dict.fromkeys([*_BUILTINS, *_REGISTRY]))


def get_backend(name: str) -> StorageBackend:
    """The backend registered as ``name``; an unknown name is an error listing the registered ones."""
    if name not in _REGISTRY and name in _BUILTINS:
        module, attr = _BUILTINS[name].split(":")
        register_backend(getattr(importlib.import_module(module), attr))
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(unknown_backend(name)) from None


def unknown_backend(name: object) -> str:
    """The message for a backend name nobody registered."""
    return f"unknown storage backend {name!r}; registered backends: {', '.join(backend_names())}"


def backend_for(name: object) -> StorageBackend:
    """The backend a configuration's ``storage_backend`` names; an unknown name is a configuration
    error (``ConfigError``) listing the registered ones."""
    if not isinstance(name, str) or name not in backend_names():
        raise ConfigError(f"storage_backend: Value error, {unknown_backend(name)} (got {name!r})")
    return get_backend(name)


def transient_errors(name: str) -> tuple[type[BaseException], ...]:
    """The errors that say an index of backend ``name`` is busy or unreachable, not that a document
    is bad: any backend's (:data:`TRANSIENT_ERRORS`) and that backend's own."""
    return (*TRANSIENT_ERRORS, *get_backend(name).transient_errors())


__all__ = ["TRANSIENT_ERRORS", "SharedStorage", "StorageBackend", "backend_for", "backend_names", "get_backend",
           "register_backend", "transient_errors", "unknown_backend"]
