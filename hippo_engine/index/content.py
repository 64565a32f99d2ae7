"""What an :class:`~hippo_engine.index.pipeline.Index` reads from its store on demand: each
passage's facts, the synonymy lists and the passage ids (:class:`ContentState`), and the views
retrieval reads (:meth:`ContentState.reader_stores`).

Nothing here is read when an index is opened: a process that only queries a large PostgreSQL
index never loads the facts into Python (the graph comes from ``graph.npz``, facts from the
database, a batch of ids at a time). When something is read, it is read in one snapshot and
only if the store still holds the version the index has loaded; if another writer moved it on,
the whole in-memory state is reloaded (``_reload``), so what is held always belongs together.
"""
from __future__ import annotations

import logging

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.progress import loading
from hippo_engine.store.base import STORE_NAMES

logger = logging.getLogger(__name__)

#: what a lazy reader keeps of each store (see ``LazyPostgresStore``)
READER_KEEP = {"passage": "ids+matrix", "fact": "ids", "entity": "count"}


class ContentState:
    """Mixin of ``Index``: lazily loaded content and the retrieval views of the stores."""

    _passage_triples: dict[str, list[Triple]] | None
    _passage_hyperedges: dict[str, list[Hyperedge]] | None
    _synonymy: dict[str, dict[str, float]] | None
    _pids: list[str] | None
    _views: dict | None
    _views_version: str | None
    _mirrors: dict | None
    _mirrors_version: str | None

    def _forget_content(self) -> None:
        self._passage_triples = self._passage_hyperedges = self._synonymy = None
        self._pids = None
        self._views = None
        self._views_version = None
        self._mirrors = None
        self._mirrors_version = None

    def _read_content(self) -> None:
        """Read facts, synonymy and passage ids (the caller holds a snapshot of the loaded version)."""
        self._passage_triples = self.db.load_passage_triples()
        self._passage_hyperedges = self.db.load_passage_hyperedges()
        self._synonymy = self.db.load_synonymy()
        self._pids = self.db.passage_ids()

    def _load_content(self) -> None:
        if self._passage_triples is not None:
            return
        with self.db.snapshot():
            current = self.version == self._loaded_version
            if current:
                self._read_content()
        if not current:     # another writer moved the index on: reload everything, together
            logger.info("index %s changed on disk (version %s -> %s): reloading", self.save_dir,
                        self._loaded_version, self.version)
            self._reload(read_content=True)

    @property
    def passage_triples(self) -> dict[str, list[Triple]]:
        """passage id -> its normalised triples (read on first use)."""
        self._load_content()
        return self._passage_triples

    @passage_triples.setter
    def passage_triples(self, value: dict[str, list[Triple]]) -> None:
        self._passage_triples = value

    @property
    def passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        """passage id -> its hyperedges (read on first use)."""
        self._load_content()
        return self._passage_hyperedges

    @passage_hyperedges.setter
    def passage_hyperedges(self, value: dict[str, list[Hyperedge]]) -> None:
        self._passage_hyperedges = value

    @property
    def synonymy(self) -> dict[str, dict[str, float]]:
        """entity id -> {neighbour entity id: cosine} (read on first use)."""
        self._load_content()
        return self._synonymy

    @property
    def content_loaded(self) -> bool:
        """Whether the facts and synonymy lists are held in memory."""
        return self._passage_triples is not None

    # ------------------------------------------------------------------ retrieval views
    @property
    def lazy_reader(self) -> bool:
        """Whether retrieval reads the stores lazily (PostgreSQL with ``postgres_search`` other
        than ``"memory"``) instead of the writers' in-memory mirrors."""
        return not self.db.vectors_in_memory

    @property
    def reader_stores(self) -> dict:
        """The stores retrieval reads: the mirrored ``stores``, or on a lazy reader read-only
        views of the loaded version that hold only passage vectors and ids (made on first use,
        again after a change)."""
        if not self.lazy_reader:
            return self.stores
        while self._views is None or self._views_version != self._loaded_version:
            dim = self.db.get_meta("dim")
            dim = int(dim) if dim is not None else self.encoder.dim
            with loading(f"passage vectors and fact ids from {self.db.location}",
                         self.config.show_progress and len(self) > 0), self.db.snapshot():
                current = self.version == self._loaded_version
                if current:
                    self._views = {ns: self.db.vector_search(ns, dim, keep=READER_KEEP[ns],
                                                             vector_dtype=self.config.embedding_storage_dtype)
                                   for ns in STORE_NAMES}
                    self._views_version = self._loaded_version
            if not current:
                self._reload()
        return self._views


    @property
    def mirrored_stores(self) -> dict:
        """Stores with every vector in memory, for what scans whole matrices (HiRAG's contexts,
        comparing two indexes): the stores themselves, except on a lazy PostgreSQL index, whose
        writer and reader keep the vectors in the database; there they are read on first use
        (and again after a change)."""
        if not self.lazy_reader:
            return self.stores
        while self._mirrors is None or self._mirrors_version != self._loaded_version:
            dim = self.db.get_meta("dim")
            dim = int(dim) if dim is not None else self.encoder.dim
            with loading(f"every vector of {self.db.location}", self.config.show_progress and len(self) > 0), \
                    self.db.snapshot():
                current = self.version == self._loaded_version
                if current:
                    self._mirrors = {ns: self.db.vector_scan(ns, dim, vector_dtype=self.config.embedding_storage_dtype)
                                     for ns in STORE_NAMES}
                    self._mirrors_version = self._loaded_version
            if not current:
                self._reload()
        return self._mirrors


__all__ = ["READER_KEEP", "ContentState"]
