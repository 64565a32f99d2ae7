"""The graph of an :class:`~hippo_engine.index.pipeline.Index` and its file, ``graph.npz``.

The graph is derived data. It is taken from ``graph.npz`` only when the file is sound and
labelled with the version and the content checksum (:mod:`.digest`) of what the index holds in
memory (:mod:`.graphfile` says what is checked); otherwise it is rebuilt from the index. Only a
holder of the writer lock writes the file: a writer after each change, a reader that rebuilt
the graph only if it can take the lock without waiting and the index has not moved on since it
was read (else its graph would carry a label it does not match).
"""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from hippo_engine.datatypes import Triple
from hippo_engine.index.graph import GraphData, insert_passages
from hippo_engine.store.lock import WriterLock

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.npz"


class GraphState:
    """Mixin of ``Index``: the ``graph`` property and the graph file's upkeep."""

    save_dir: Path
    lock: WriterLock
    _graph: GraphData | None
    _loaded_version: str
    _digest: str

    @property
    def graph_path(self) -> Path:
        return self.save_dir / GRAPH_FILE

    @property
    def graph(self) -> GraphData:
        if self._graph is None:
            # a lazy reader only searches the graph: the weight parts (for inserts) stay on disk
            parts = not getattr(self, "lazy_reader", False)
            g = GraphData.load(self.graph_path, self._loaded_version, self._digest, parts=parts)
            if g is None and self._fetch_graph_file():    # written by a writer on another host
                g = GraphData.load(self.graph_path, self._loaded_version, self._digest, parts=parts)
            if g is None:
                self._graph = self._build_graph()
                self._save_graph()
            else:
                self._graph = g
        return self._graph

    def _insert_into_graph(self, old_version: str, old_digest: str, new_ids: Sequence[str],
                           triples: Mapping[str, Sequence[Triple]], weights: Mapping[str, Sequence[float]],
                           syn_changes: Mapping[str, tuple]) -> None:
        """Merge the new passages and synonymy changes into the previous graph version, or
        build the graph from scratch when that version is not at hand."""
        g = self._graph
        if g is None or g.parts is None:
            g = GraphData.load(self.graph_path, old_version, old_digest)
        if g is None or g.parts is None:
            self._graph = self._build_graph()
            return
        try:
            self._graph = insert_passages(g, new_ids, triples, syn_changes, weights)
        except Exception as e:  # derived data: fall back to a rebuild rather than fail the insert
            logger.warning("incremental graph update failed (%s); rebuilding the graph", e)
            self._graph = self._build_graph()

    def _fetch_graph_file(self) -> bool:
        """Take ``graph.npz`` of the loaded version from the index's store (PostgreSQL keeps a copy
        of the latest), if no local writer holds the folder's lock; True if it was written."""
        with self.lock.held_if_free() as held:
            if not held:
                return False
            try:
                return self.db.fetch_graph_file(self.graph_path, self._loaded_version, self._digest)
            except Exception as e:  # noqa: BLE001 - derived data: the graph is rebuilt instead
                logger.warning("could not fetch the graph file from %s: %s", self.db.location, e)
                return False

    def rebuild_graph(self) -> None:
        """Build the graph from the index (after a change's commit: ``IndexWriter.derive``)."""
        self._graph = self._build_graph()

    def insert_into_graph(self, *args) -> None:
        self._insert_into_graph(*args)

    def save_graph(self) -> None:
        """Write ``graph.npz`` once the outermost transaction has committed (now, outside one),
        so a file never carries an uncommitted version."""
        self.db.after_commit(self._save_graph)

    def _save_graph(self) -> None:
        """Write ``graph.npz`` labelled with the loaded version and checksum, if this object holds
        (or can take at once) the writer lock and the index on disk is still that version."""
        with self.lock.held_if_free() as held:   # re-entrant: a writer holds it already
            if not held or self.version != self._loaded_version:
                return
            try:
                self._store_digest()
                self._graph.save(self.graph_path, self._loaded_version, self._digest)
            except (OSError, sqlite3.Error) as e:  # derived data: losing the file costs a rebuild only
                logger.warning("could not save %s: %s", self.graph_path, e)
                return
            try:   # readers on other hosts take it from there (PostgreSQL); a no-op for SQLite
                self.db.put_graph_file(self.graph_path, self._loaded_version, self._digest)
            except Exception as e:  # noqa: BLE001 - derived data: other hosts rebuild the graph instead
                logger.warning("could not keep a copy of %s in %s: %s", self.graph_path, self.db.location, e)

    def _build_graph(self) -> GraphData:  # pragma: no cover - provided by Index
        raise NotImplementedError

    def _store_digest(self) -> None:  # pragma: no cover - provided by Index
        raise NotImplementedError

    @property
    def version(self) -> str:  # pragma: no cover - provided by Index
        raise NotImplementedError
