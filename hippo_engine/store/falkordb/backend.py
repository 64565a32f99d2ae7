"""The FalkorDB storage backend (registered as ``falkordb``: :data:`FALKORDB_BACKEND`): opening an index
folder's store, the service's job tables, dropping an index and the indexes of many folders on one server.

Where an index lives (``falkordb_server``): an embedded server in ``<save_dir>/falkordb`` (the default;
graph ``hippo``), the embedded server of another folder (its data folder's path: the indexes of a
service's workspaces on the root's server) or a running server (a ``falkordb://`` URL). On a shared
server each index folder has a graph of its own (the URL's graph, else ``hippo_<folder name>_<hash>``),
recorded in the folder's identity file and used afterwards.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hippo_engine.store.base import StoreConnectionLost, StoreError
from hippo_engine.store.falkordb.address import FalkorAddress, check_graph_name, parse_url
from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
from hippo_engine.store.identity import read_identity
from hippo_engine.store.jobs import ClosedTables
from hippo_engine.store.opening import EMBEDDED, checked, drop_folder, refuse_missing
from hippo_engine.store.postgres.naming import default_schema
from hippo_engine.store.registry import SharedStorage, StorageBackend

logger = logging.getLogger(__name__)

FALKORDB_DIR = "falkordb"
URL_PREFIX = "falkordb://"


def _server_for(save_dir: Path, setting: str | None) -> tuple[FalkorAddress, EmbeddedFalkorDB | None, str]:
    """(address, the embedded server joined here or None, what the identity records as the server)."""
    if setting is not None and setting.startswith(URL_PREFIX):
        address = parse_url(setting)
        return address, None, address.url()
    data = Path(setting) if setting is not None else save_dir / FALKORDB_DIR
    server = EmbeddedFalkorDB(data)
    return server.start(), server, EMBEDDED if setting is None else str(data.absolute())


def _graph_for(save_dir: Path, rec: dict | None, address: FalkorAddress, own: bool) -> tuple[str, bool]:
    """(graph name, named explicitly): the URL's, else the recorded one, else the default."""
    if address.graph is not None:
        return address.graph, True
    if rec is not None and rec.get("schema"):
        return check_graph_name(rec["schema"]), False
    return default_schema(save_dir, embedded=own), False


def open_store(address: FalkorAddress, graph: str, lock_timeout: float | None = None) -> Any:
    """A :class:`~.store.FalkorIndexStore` of ``graph`` on the server at ``address`` (vector indexes checked,
    and rebuilt where missing or stale: :func:`~.vector_index.check_vector_indexes`)."""
    from hippo_engine.store.falkordb.graph import VersionedGraph, connect
    from hippo_engine.store.falkordb.store import FalkorIndexStore
    from hippo_engine.store.falkordb.vector_index import check_vector_indexes
    client = connect(address)
    try:
        store = FalkorIndexStore(VersionedGraph(client, graph, address.where(), lock_timeout=lock_timeout))
        store.vector_rebuilds.extend(check_vector_indexes(store))
    except BaseException:
        client.close()
        raise
    store.address = address
    return store


def open_falkordb(save_dir: Path, rec: dict | None, config) -> Any:
    """The store of the index of ``save_dir`` (see the module documentation); an embedded server joined
    here is left by the store's ``close()``."""
    setting = getattr(config, "falkordb_server", None)
    if setting is None and rec is not None:
        if rec.get("server") != EMBEDDED:
            raise StoreError(f"the index in {save_dir} lives on the FalkorDB server {rec.get('server')} (graph "
                             f"{rec.get('schema')}); give that server (falkordb_server=...)")
        refuse_missing(save_dir, rec, save_dir / FALKORDB_DIR)
    address, server, shown = _server_for(save_dir, setting)
    try:
        graph, explicit = _graph_for(save_dir, rec, address, own=setting is None)
        store = open_store(address, graph, lock_timeout=float(config.write_lock_timeout))
    except BaseException:
        if server is not None:
            server.stop()
        raise
    store.owned_server, store.folder = server, save_dir
    record = {"backend": "falkordb", "schema": graph, "explicit": explicit, "server": shown}
    checked(store, save_dir, rec, record, check_owner=setting is not None and not explicit)
    logger.info("index store: %s", store.location)
    return store


def falkordb_exists(save_dir: Path, config) -> bool:
    """An embedded server's data in the folder; an index on another server is taken to exist."""
    if getattr(config, "falkordb_server", None) is None:
        return (save_dir / FALKORDB_DIR).is_dir()
    return True


def falkordb_job_tables(store: Any, config) -> Any:
    """The job tables beside the opened index ``store``, reading its graph on a connection of their own."""
    from hippo_engine.store.falkordb.jobs import FalkorJobTables
    return FalkorJobTables(store.folder, open_store(store.address, store.graph.name),
                           busy_timeout=max(60.0, float(config.write_lock_timeout)))


def _drop_graph(address: FalkorAddress, graph: str) -> None:
    from hippo_engine.store.falkordb.graph import VersionedGraph, connect
    client = connect(address)
    try:
        VersionedGraph(client, graph, address.where()).drop()
    finally:
        client.close()


def _drop(save_dir: Path, address_of) -> None:
    """Drop the graph the folder recorded on a shared server (``address_of(record)``), then the folder."""
    rec = read_identity(save_dir)
    if rec is not None and rec.get("backend") == "falkordb" and rec.get("server") != EMBEDDED and rec.get("schema"):
        address, server = address_of(rec)
        try:
            _drop_graph(address, rec["schema"])
        finally:
            if server is not None:
                server.stop()
    drop_folder(save_dir)


def drop_falkordb(save_dir: Path, config) -> None:
    """Remove the (closed) index of ``save_dir``: its graph on a shared server and the folder (with an
    embedded server's data)."""
    _drop(save_dir, lambda rec: _server_for(save_dir, getattr(config, "falkordb_server", None) or rec["server"])[:2])


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of a FalkorDB index that say the server is busy or unreachable (none without the client)."""
    from hippo_engine.store.falkordb.address import ServerUnreachable
    try:
        from hippo_engine.store.falkordb.graph import driver_errors
        return (*driver_errors(), ServerUnreachable, StoreConnectionLost)
    except ImportError:
        return (ServerUnreachable, StoreConnectionLost)


class FalkorShared(SharedStorage):
    """The indexes of the folders under ``root`` on one server: the one of the URL ``server`` or, without
    one, the embedded server of the root (``root/falkordb``, joined on first need, left by :meth:`close`),
    each folder's index in a graph of its own."""

    def __init__(self, root: Path, server: str | None = None):
        self.root, self._url = Path(root), server
        self._server: EmbeddedFalkorDB | None = None
        self._lock = threading.Lock()

    def _setting(self) -> str:
        return self._url if self._url is not None else str((self.root / FALKORDB_DIR).absolute())

    def options(self, opts: dict, default: bool) -> dict:
        if not default or self._url is not None:
            opts["falkordb_server"] = self._setting()
        return opts

    def _address(self, folder: Path, rec: dict) -> tuple[FalkorAddress, EmbeddedFalkorDB | None]:
        """The server of the index in ``folder`` (its own embedded one, the root's, or the URL's)."""
        if rec.get("server") == EMBEDDED:
            server = EmbeddedFalkorDB(folder / FALKORDB_DIR)
            return server.start(), server
        if self._url is not None:
            return parse_url(self._url), None
        with self._lock:
            if self._server is None:
                server = EmbeddedFalkorDB(rec.get("server") or self._setting())
                server.start()
                self._server = server
            return self._server.address(), None

    @contextlib.contextmanager
    def closed_tables(self, folder: Path) -> Iterator[ClosedTables | None]:
        from hippo_engine.store.falkordb.jobs import closed_falkor_tables
        rec = read_identity(folder)
        if rec is None or rec.get("backend") != "falkordb":
            yield None
            return
        address, server = self._address(folder, rec)
        try:
            reader = open_store(address, rec["schema"])
            try:
                with closed_falkor_tables(folder, reader) as tables:
                    yield tables
            finally:
                reader.close()
        finally:
            if server is not None:
                server.stop()

    def drop(self, folder: Path) -> None:
        _drop(folder, lambda rec: self._address(folder, rec))

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None


FALKORDB_BACKEND = StorageBackend("falkordb", open_falkordb, falkordb_exists, accepts_nul=False,
                                  job_tables=falkordb_job_tables, drop=drop_falkordb,
                                  transient_errors=transient_errors, shared=FalkorShared,
                                  server_setting="falkordb_server")


__all__ = ["FALKORDB_BACKEND", "FALKORDB_DIR", "FalkorShared", "drop_falkordb", "falkordb_exists",
           "falkordb_job_tables", "open_falkordb", "open_store", "transient_errors"]
