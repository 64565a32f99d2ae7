"""The index: passages, their facts, the three embedding stores, synonymy and graph.

A passage's facts are OpenIE triples (``extractor="openie"``) or hyperedges: sentences or n-ary
facts linked to all the entities they mention (``"ner"``, ``"nary"``). An index holds one kind;
the extractor is recorded in its metadata and mixing is refused.

``Index`` owns the on-disk state under ``save_dir`` and keeps it consistent:
``add(passages)`` and ``remove(passage_ids)`` each run as one SQLite transaction. ``add``
then updates the graph in place of a rebuild (``graph.insert_passages``: the new passages'
edges and the changed synonymy lists are merged into the sorted edge arrays), and the
synonymy kNN only runs the new entities against all entities, so an insert costs in
proportion to what it adds. ``remove`` rebuilds the graph from the stored content. Either
way the result is identical to building the index from scratch with the same passages, and
deleting passages leaves the index exactly as if they had never been added. Documents (which
passages each document id holds) are kept in the same transactions by
:class:`.documents.DocumentState` (``add_documents``, ``remove_documents``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.ids import facts_by_id, hyperedge_id, hyperedges_by_id, triple_id
from hippo_engine.index.content import ContentState
from hippo_engine.index.digest import META_KEY as DIGEST_KEY
from hippo_engine.index.digest import content_digest
from hippo_engine.index.documents import DocumentState
from hippo_engine.index.facts import graph_input as _graph_input
from hippo_engine.index.facts import normalize_hyperedges, normalize_triples  # noqa: F401 (re-exported)
from hippo_engine.index.graph import GraphData, build_graph
from hippo_engine.index.graphstate import GraphState
from hippo_engine.index.synonymystate import SynonymyState
from hippo_engine.index.writer import IndexWriter
from hippo_engine.models.encoder import Encoder
from hippo_engine.progress import loading
from hippo_engine.store import EmbeddingStore, StoreError
from hippo_engine.store.base import STORE_NAMES, IndexStore
from hippo_engine.store.files import remove_orphan_temps
from hippo_engine.store.lock import WriterLock
from hippo_engine.store.opening import open_index_store

logger = logging.getLogger(__name__)


class Index(GraphState, DocumentState, ContentState, SynonymyState):
    """Persistent HippoRAG index state. One writer at a time per folder (a lock file: other
    writers wait, then fail clearly; the writer removes orphaned temp files of interrupted
    writes); readers pick up a newer version with :meth:`refresh`. The graph and its file:
    :class:`.graphstate.GraphState`; documents: :class:`.documents.DocumentState`."""

    def __init__(self, save_dir: Path, config: HippoConfig, encoder_factory: Callable[[], Encoder],
                 embedding_model_name: str):
        self.save_dir = Path(save_dir)
        self.config = config
        self._encoder_factory = encoder_factory
        self._encoder: Encoder | None = None
        self.db: IndexStore = open_index_store(self.save_dir, config)
        self.lock = WriterLock(self.save_dir, config.write_lock_timeout,
                               on_acquire=lambda: remove_orphan_temps(self.save_dir))
        known = self.db.get_meta("embedding_model")
        if known is not None and known != embedding_model_name:
            raise StoreError(f"the index in {self.save_dir} was built with embedding model {known!r}, "
                             f"not {embedding_model_name!r}; use the same model or another save_dir")
        for key in ("normalization", "passage_vectors"):
            known = self.db.get_meta(key)
            if known is not None and known != getattr(config, key):
                raise StoreError(f"the index in {self.save_dir} uses {key}={known!r}; "
                                 f"config says {getattr(config, key)!r}")
        self.embedding_model_name = embedding_model_name
        self._stores: dict[str, EmbeddingStore] | None = None
        self.timings: dict[str, float] = {}
        self._reload()

    # ------------------------------------------------------------------ lazy parts
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._encoder_factory()
        return self._encoder

    @property
    def stores(self) -> dict[str, EmbeddingStore]:
        if self._stores is None:
            dim = self.db.get_meta("dim")
            dim = int(dim) if dim is not None else self.encoder.dim
            with loading(f"index vectors from {self.db.location}", self.config.show_progress and len(self) > 0), \
                    self.db.snapshot():
                # vectors searched where they are stored: the writer's stores hold ids only
                self._stores = {ns: self.db.vector_writer(ns, dim, vector_dtype=self.config.embedding_storage_dtype,
                                                          mmap=self.config.embedding_mmap)
                                for ns in STORE_NAMES}
                moved_on = self.version != self._loaded_version
            if moved_on:   # another process wrote since the facts were loaded: load both again, together
                self._reload()
        return self._stores

    @property
    def loaded_version(self) -> str:
        """The index version whose state is held in memory (``version`` is the stored one)."""
        return self._loaded_version

    @property
    def version(self) -> str:
        return self.db.get_meta("version") or "0"

    @property
    def fact_triples(self) -> dict[str, Triple]:
        """fact id -> its normalised triple (kept up to date by add/remove)."""
        if self._fact_triples is None:
            self._fact_triples = facts_by_id(self.passage_triples)
        return self._fact_triples

    @property
    def extractor(self) -> str | None:
        """The extractor this index was built with (None while empty)."""
        return self.db.get_meta("extractor")

    @property
    def fact_hyperedges(self) -> dict[str, Hyperedge]:
        """fact id -> hyperedge (sentence / n-ary fact and its entities), kept up to date."""
        if self._fact_hyperedges is None:
            self._fact_hyperedges = hyperedges_by_id(self.passage_hyperedges)
        return self._fact_hyperedges

    def fact_entities(self) -> dict[str, tuple[str, ...]]:
        """fact id -> the normalised entities it links (subject and object of a triple)."""
        if self.passage_hyperedges:
            return {f: h.entities for f, h in self.fact_hyperedges.items()}
        return {f: (t[0], t[2]) for f, t in self.fact_triples.items()}

    def graph_triples(self) -> tuple[dict[str, list[Triple]], dict[str, list[float]]]:
        """What the graph is built from: each passage's triples, or its hyperedges as weighted
        pseudo-triples (``text.hyperedge_graph_triples``), and the weights of the latter."""
        return _graph_input(self.passage_triples, self.passage_hyperedges)

    def _passage_ids(self) -> list[str]:
        """The passage ids of the loaded state (never newer than the facts held in memory)."""
        if self._stores is not None:
            return list(self._stores["passage"].ids)
        self._load_content()
        return list(self._pids)

    def _build_graph(self) -> GraphData:
        triples, weights = self.graph_triples()
        return build_graph(self._passage_ids(), triples, self.synonymy, weights)

    def has_passage(self, pid: str) -> bool:
        return self.db.has_passage(pid)

    def __len__(self) -> int:
        return self.db.passage_count()

    # ------------------------------------------------------------------ mutation
    def check_extractor(self, extractor: str) -> None:
        """Refuse to add facts of another kind than the index holds."""
        known = self.extractor
        if known is None and len(self) and extractor != "openie":
            known = "openie"   # an index written before extractors were recorded
        if known is not None and known != extractor:
            raise StoreError(f"the index in {self.save_dir} was built with extractor={known!r}; it cannot take "
                             f"extractor={extractor!r} facts (use extractor={known!r} or another save_dir)")

    def refresh(self) -> bool:
        """Reload what is held in memory if another writer changed the index; True if it did."""
        version = self.version
        if version == self._loaded_version:
            return False
        logger.info("index %s changed on disk (version %s -> %s): reloading", self.save_dir,
                    self._loaded_version, version)
        self._reload()
        return True

    def add(self, passages: Mapping[str, str], triples: Mapping[str, Sequence[Triple]] | None = None,
            hyperedges: Mapping[str, Sequence[Hyperedge]] | None = None, *, extractor: str = "openie") -> dict:
        """Add passages (id -> text) with their raw facts: OpenIE triples or hyperedges
        (sentences / n-ary facts with their entities), holding the writer lock. Returns a small report."""
        with self.lock.held():
            self.refresh()
            return IndexWriter(self).add(passages, triples, hyperedges, extractor=extractor)

    def remove(self, passage_ids: Iterable[str]) -> dict:
        """Remove passages and everything only they contributed (holding the writer lock)."""
        with self.lock.held():
            self.refresh()
            return IndexWriter(self).remove(passage_ids)

    # ------------------------------------------------------------------ what IndexWriter updates
    @property
    def digest(self) -> str:
        """The content checksum of the loaded version."""
        return self._digest

    def mark(self, marks: tuple[str, str]) -> None:
        """Take on the (version, checksum) a change wrote."""
        self._loaded_version, self._digest = marks

    @property
    def synonymy_keeper(self):
        return self

    def update(self, added: Sequence[str], removed: Sequence[str]) -> dict:
        return self._update_synonymy(added=added, removed=removed)

    def reload(self) -> None:
        self._reload()

    def note_removed(self, gone: Sequence[str], dead_facts: Sequence[str]) -> None:
        """Drop the removed passages and facts from what is held in memory."""
        gone_set = set(gone)
        self.passage_triples = {p: t for p, t in self.passage_triples.items() if p not in gone_set}
        self.passage_hyperedges = {p: h for p, h in self.passage_hyperedges.items() if p not in gone_set}
        self._pids = [p for p in self._pids if p not in gone_set]
        for cache in (self._fact_triples, self._fact_hyperedges):
            if cache is not None:
                for f in dead_facts:
                    cache.pop(f, None)

    def note_added(self, new_ids: Sequence[str], norm: Mapping[str, list[Triple]],
                   hyper: Mapping[str, list[Hyperedge]]) -> None:
        """Take the new passages' facts into what is held in memory."""
        if self.content_loaded:    # (read before the change, or inside it: then it holds them already)
            for p in new_ids:
                if norm[p]:
                    self._passage_triples[p] = norm[p]
                if hyper[p]:
                    self._passage_hyperedges[p] = hyper[p]
            self._pids = sorted(set(self._pids).union(new_ids))
        if self._fact_triples is not None:
            for p in new_ids:
                for t in norm[p]:
                    self._fact_triples.setdefault(triple_id(t), t)
        if self._fact_hyperedges is not None:
            for p in new_ids:
                for h in hyper[p]:
                    self._fact_hyperedges.setdefault(hyperedge_id(h), h)

    def _store_digest(self) -> None:
        """Keep a checksum computed for an index written before checksums were kept (the caller
        holds the writer lock and the index is still the version it was computed for)."""
        if not self._digest_stored:
            with self.db.transaction():
                if self.db.get_meta(DIGEST_KEY) is None and self.version == self._loaded_version:
                    self.db.set_meta(DIGEST_KEY, self._digest)
            self._digest_stored = True

    def _reload(self, read_content: bool = False) -> None:
        """(Re)read what is held in memory, all from one committed state of the database: the
        version, its checksum, the stores already loaded, and the facts and synonymy (on a lazy
        PostgreSQL reader only if asked, else on first use: :class:`.content.ContentState`). An
        index written before the content checksum was kept gets it computed (which reads the
        content)."""
        self._forget_content()
        with self.db.snapshot():
            for s in (self._stores or {}).values():
                s.reload()
            self._loaded_version = self.version
            stored = self.db.get_meta(DIGEST_KEY)
            if read_content or stored is None or not self.lazy_reader:
                self._read_content()
            self._digest = stored or content_digest(self._passage_ids(), self._passage_triples,
                                                    self._passage_hyperedges, self._synonymy)
        self._digest_stored = stored is not None
        self._graph: GraphData | None = None
        self._short_entities: set[str] | None = None   # entities too short to be synonymy queries
        self._fact_triples: dict[str, Triple] | None = None
        self._fact_hyperedges: dict[str, Hyperedge] | None = None

    def close(self) -> None:
        self.db.close()
