"""The storage backends, registered by name: :func:`register_backend`, :func:`get_backend`.

A backend is a :class:`StorageBackend`: how to open the :class:`~hippo_engine.store.base.IndexStore`
of an index folder, and whether a folder holds one of its indexes. The configuration's
``storage_backend`` is checked against :func:`backend_names` (an unknown name is refused with the
list of registered ones), :func:`~hippo_engine.store.opening.open_index_store` looks the backend
up here, and the storage contract test (``tests/store/test_index_store_contract.py``) runs every
registered backend: a new backend is accepted by registering it and passing that test.

The built-in backends (``sqlite``, ``postgres``) are named here and imported only when first
asked for, so reading the configuration imports no backend (nor numpy).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StorageBackend:
    """One storage backend.

    ``open(save_dir, recorded, config)``: the ``IndexStore`` of the index in ``save_dir``
    (``recorded``: the folder's identity record, or None for a new folder), its identity checked.
    ``exists(save_dir, config)``: whether ``save_dir`` holds an index of this backend (without
    creating one). ``accepts_nul``: whether its texts can hold NUL characters.
    """

    name: str
    open: Callable[[Path, dict | None, Any], Any]
    exists: Callable[[Path, Any], bool]
    accepts_nul: bool = True


#: built-in backends, imported on first use: name -> "module:attribute" of a StorageBackend
_BUILTINS = {
    "sqlite": "hippo_engine.store.opening:SQLITE_BACKEND",
    "postgres": "hippo_engine.store.opening:POSTGRES_BACKEND",
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


__all__ = ["StorageBackend", "backend_names", "get_backend", "register_backend", "unknown_backend"]
