"""The graph of an :class:`~hippo_engine.index.state.IndexState` and its file, ``graph.npz``
(:class:`GraphKeeper`).

The graph is derived data. It is taken from ``graph.npz`` only when the file is sound and
labelled with the version and the content checksum (:mod:`.digest`) of what the index holds in
memory (:mod:`.graphdata` says what is checked); otherwise it is rebuilt from the index. Only a
holder of the writer lock writes the file: a writer after each change, a reader that rebuilt
the graph only if it can take the lock without waiting and the index has not moved on since it
was read (else its graph would carry a label it does not match).
"""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hippo_engine.datatypes import Triple
from hippo_engine.index.content import stored_version
from hippo_engine.index.graph import GraphData, insert_passages
from hippo_engine.index.graphremove import remove_passages
from hippo_engine.index.graphstream import GraphFileError, update_graph_file
from hippo_engine.store.base import IndexStore
from hippo_engine.store.lock import WriterLock

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.npz"


class GraphKeeper:
    """The ``graph`` of the loaded version and the upkeep of its file.

    ``db``: the index store (its version, the copy of the file it may keep); ``lock``: the
    folder's writer lock; ``path``: the graph file; ``labels()``: (version, checksum) of what is
    held in memory; ``build()``: the graph built from the index; ``keep_digest()``: store the
    checksum if the index lacks it (before a file labelled with it is written); ``parts``:
    whether a loaded graph keeps its weight parts (a lazy reader only searches the graph).
    """

    def __init__(self, db: IndexStore, lock: WriterLock, path: Path, labels: Callable[[], tuple[str, str]],
                 build: Callable[[], GraphData], keep_digest: Callable[[], None], *, parts: bool = True):
        self.db = db
        self.lock = lock
        self.path = Path(path)
        self._labels = labels
        self._build = build
        self._keep_digest = keep_digest
        self._parts = parts
        self._graph: GraphData | None = None

    def forget(self) -> None:
        """Drop the graph held (loaded or rebuilt on next use)."""
        self._graph = None

    @property
    def graph(self) -> GraphData:
        if self._graph is None:
            version, digest = self._labels()
            g = GraphData.load(self.path, version, digest, parts=self._parts)
            if g is None and self._fetch_file():    # written by a writer on another host
                g = GraphData.load(self.path, version, digest, parts=self._parts)
            if g is None:
                self._graph = self._build()
                self._save()
            else:
                self._graph = g
        return self._graph

    def insert(self, old_version: str, old_digest: str, new_ids: Sequence[str],
               triples: Mapping[str, Sequence[Triple]], weights: Mapping[str, Sequence[float]],
               syn_changes: Mapping[str, tuple]) -> None:
        """Merge the new passages and synonymy changes into the previous graph version, or
        build the graph from scratch when that version is not at hand."""
        self.change(old_version, old_digest, added=(new_ids, triples, weights, syn_changes))

    def change(self, old_version: str, old_digest: str, *, added: tuple | None = None,
               removed: tuple | None = None) -> None:
        """Apply a change to the previous graph version (the one held, else ``graph.npz`` if it is
        labelled ``old_version``/``old_digest``): ``added`` (new passage ids, their graph triples,
        fact weights, synonymy changes: :func:`.graph.insert_passages`), then ``removed`` (passage
        ids, their graph triples, fact weights, synonymy changes, entities no passage names any
        more: :func:`.graphremove.remove_passages`). Built from scratch when that version is not at
        hand or the update fails."""
        g, self._graph = self._graph, None        # the old version is let go as soon as it is replaced
        if g is None or g.parts is None:
            g = GraphData.load(self.path, old_version, old_digest)
        if g is None or g.parts is None:
            self._graph = self._build()
            return
        try:
            if added is not None:
                new_ids, triples, weights, syn_changes = added
                g = insert_passages(g, new_ids, triples, syn_changes, weights)
            if removed is not None:
                gone, triples, weights, syn_changes, dead = removed
                g = remove_passages(g, gone, triples, syn_changes, weights, dead)
        except Exception as e:  # derived data: fall back to a rebuild rather than fail the change
            logger.warning("incremental graph update failed (%s); rebuilding the graph", e)
            g = None
            self._graph = self._build()
            return
        self._graph = g

    def update_file(self, old_version: str, old_digest: str, *, added: tuple | None = None,
                    removed: tuple | None = None) -> None:
        """For a writer that holds no graph (a lean writer, after the commit): ``graph.npz`` of the
        previous version (taken from the database's copy if the folder lacks it) rewritten for the
        change by streaming (:func:`.graphstream.update_graph_file`; ``added`` and ``removed`` as
        for :meth:`change`), labelled with the loaded version, and its copy kept in the database.
        If the file cannot take the change, the graph is built from the index and saved instead.
        Nothing is held afterwards: the graph is read from the file when it is next used."""
        self._graph = None
        with self.lock.held_if_free() as held:   # re-entrant: a writer holds it already
            labels = self._labels()
            if not held or stored_version(self.db) != labels[0]:
                return
            add = (added[0], added[1], added[3], added[2]) if added is not None else None
            rem = (removed[0], removed[1], removed[3], removed[2], removed[4]) if removed is not None else None
            try:
                self._keep_digest()
                try:
                    update_graph_file(self.path, (old_version, old_digest), labels, added=add, removed=rem)
                except GraphFileError:
                    if not self.db.fetch_graph_file(self.path, old_version, old_digest):
                        raise
                    update_graph_file(self.path, (old_version, old_digest), labels, added=add, removed=rem)
            except Exception as e:  # noqa: BLE001 - derived data: built from the index instead
                # no file of the previous version here or in the database (an index's first change, or
                # a folder that never had one) is expected; anything else is worth a warning
                missing = isinstance(e, GraphFileError) and not self.path.exists()
                logger.log(logging.INFO if missing else logging.WARNING,
                           "could not update %s for the change (%s); building the graph from the index",
                           self.path, e)
                self._graph = self._build()
                self._save()
                return
            try:   # readers on other hosts take it from there (PostgreSQL)
                self.db.put_graph_file(self.path, *labels)
            except Exception as e:  # noqa: BLE001 - derived data: other hosts rebuild the graph instead
                logger.warning("could not keep a copy of %s in %s: %s", self.path, self.db.location, e)

    def rebuild(self) -> None:
        """Build the graph from the index (after a change's commit: ``IndexWriter.derive``)."""
        self._graph = self._build()

    def save(self) -> None:
        """Write ``graph.npz`` once the outermost transaction has committed (now, outside one),
        so a file never carries an uncommitted version."""
        self.db.after_commit(self._save)

    def _fetch_file(self) -> bool:
        """Take ``graph.npz`` of the loaded version from the index's store (PostgreSQL keeps a copy
        of the latest), if no local writer holds the folder's lock; True if it was written."""
        with self.lock.held_if_free() as held:
            if not held:
                return False
            try:
                return self.db.fetch_graph_file(self.path, *self._labels())
            except Exception as e:  # noqa: BLE001 - derived data: the graph is rebuilt instead
                logger.warning("could not fetch the graph file from %s: %s", self.db.location, e)
                return False

    def _save(self) -> None:
        """Write ``graph.npz`` labelled with the loaded version and checksum, if this object holds
        (or can take at once) the writer lock and the index on disk is still that version."""
        with self.lock.held_if_free() as held:   # re-entrant: a writer holds it already
            if not held or stored_version(self.db) != self._labels()[0]:
                return
            graph = self._graph
            if graph is None:   # nothing built in this process: nothing to save
                return
            try:
                self._keep_digest()
                graph.save(self.path, *self._labels())
            except (OSError, sqlite3.Error) as e:  # derived data: losing the file costs a rebuild only
                logger.warning("could not save %s: %s", self.path, e)
                return
            try:   # readers on other hosts take it from there (PostgreSQL); a no-op for SQLite
                self.db.put_graph_file(self.path, *self._labels())
            except Exception as e:  # noqa: BLE001 - derived data: other hosts rebuild the graph instead
                logger.warning("could not keep a copy of %s in %s: %s", self.path, self.db.location, e)


__all__ = ["GRAPH_FILE", "GraphKeeper"]
