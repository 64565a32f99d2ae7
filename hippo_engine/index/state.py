"""The index state: what an index holds in memory, composed of collaborators (:class:`IndexState`).

A passage's facts are OpenIE triples (``extractor="openie"``) or hyperedges: sentences or n-ary
facts linked to all the entities they mention (``"ner"``, ``"nary"``). An index holds one kind;
the extractor is recorded in its metadata and mixing is refused.

``IndexState`` holds the loaded version (and its content checksum), the embedding stores and
four collaborators, each built with what it uses:

* ``content`` (:class:`.content.ContentCache`): each passage's facts, the synonymy lists and
  the passage ids, read on first use;
* ``graph_keeper`` (:class:`.graphstate.GraphKeeper`): the graph and its file ``graph.npz``;
* ``synonymy_keeper`` (:class:`.synonymystate.SynonymyKeeper`): the synonymy lists' update;
* ``documents`` (:class:`.documents.DocumentTable`): which documents hold which passages.

Changes go through :class:`.writer.IndexWriter` (plan, one transaction, derive after the
commit): ``add(passages)`` and ``remove(passage_ids)`` here, documents from
:mod:`.documents`. An insert merges its edges into the graph in place of a rebuild and runs
the synonymy kNN for the new entities only; a removal rebuilds the graph from the stored
content. Either way the result is identical to building the index from scratch with the same
passages, and deleting passages leaves the index exactly as if they had never been added.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.index.content import READER_KEEP, ContentCache, stored_version
from hippo_engine.index.digest import META_KEY as DIGEST_KEY
from hippo_engine.index.digest import content_digest
from hippo_engine.index.document_table import DocumentPlan, DocumentTable
from hippo_engine.index.facts import graph_input
from hippo_engine.index.graph import GraphData, build_graph
from hippo_engine.index.graphstate import GRAPH_FILE, GraphKeeper
from hippo_engine.index.synonymystate import SynonymyKeeper
from hippo_engine.models.encoder import Encoder
from hippo_engine.progress import QUIET, Progress
from hippo_engine.store import EmbeddingStore, StoreError
from hippo_engine.store.base import STORE_NAMES, IndexStore
from hippo_engine.store.files import remove_orphan_temps
from hippo_engine.store.lock import WriterLock
from hippo_engine.store.opening import open_index_store

logger = logging.getLogger(__name__)


class IndexState:
    """Persistent HippoRAG index state. One writer at a time per folder (a lock file: other
    writers wait, then fail clearly; the writer removes orphaned temp files of interrupted
    writes); readers pick up a newer version with :meth:`refresh`."""

    def __init__(self, save_dir: Path, config: HippoConfig, encoder_factory: Callable[[], Encoder],
                 embedding_model_name: str, *, progress: Progress = QUIET):
        self.save_dir = Path(save_dir)
        self.config = config
        self.progress = progress    # bars while vectors load, and while new texts are encoded
        self._encoder_factory = encoder_factory
        self._encoder: Encoder | None = None
        self.db: IndexStore = open_index_store(self.save_dir, config)
        self.lock = WriterLock(self.save_dir, config.write_lock_timeout,
                               on_acquire=self._remove_orphan_temps)
        self._check_meta(embedding_model_name)
        self.embedding_model_name = embedding_model_name
        self._stores: dict[str, EmbeddingStore] | None = None
        self._loaded_version = "0"
        self._digest = ""
        self._digest_stored = False
        self._views: dict | None = None
        self._views_version: str | None = None
        self._mirrors: dict | None = None
        self._mirrors_version: str | None = None
        self.content = ContentCache(self.db, lambda: self._loaded_version, lambda: self._reload(read_content=True))
        self.graph_keeper = GraphKeeper(self.db, self.lock, self.save_dir / GRAPH_FILE,
                                        lambda: (self._loaded_version, self._digest), self._build_graph,
                                        self._store_digest, parts=not self.lazy_reader)
        self.synonymy_keeper = SynonymyKeeper(
            self.db, lambda: self.stores["entity"], lambda: self.content.synonymy,
            threshold=config.synonymy_threshold, max_neighbors=config.synonymy_max_neighbors,
            block_size=config.synonymy_block_size, min_alnum_chars=config.synonymy_min_alnum_chars,
            held=lambda: self.content.synonymy if self.content.loaded else None)
        self.documents = DocumentTable(self.db)
        self._reload()

    def _remove_orphan_temps(self) -> None:
        """Writer-lock hook: remove temporary files a killed writer left in the folder."""
        remove_orphan_temps(self.save_dir)

    def _check_meta(self, embedding_model_name: str) -> None:
        """Refuse a config that disagrees with what the index was built with."""
        known = self.db.get_meta("embedding_model")
        if known is not None and known != embedding_model_name:
            raise StoreError(f"the index in {self.save_dir} was built with embedding model {known!r}, "
                             f"not {embedding_model_name!r}; use the same model or another save_dir")
        for key in ("normalization", "passage_vectors"):
            known = self.db.get_meta(key)
            if known is not None and known != getattr(self.config, key):
                raise StoreError(f"the index in {self.save_dir} uses {key}={known!r}; "
                                 f"config says {getattr(self.config, key)!r}")
        built = self.db.get_meta("embedding_model") is not None   # an index without the mark encodes sentences alone
        sentences = self.db.get_meta("sentence_vectors") or ("encode" if built else None)
        if sentences is not None and sentences != self.config.sentence_vectors:
            raise StoreError(f"the index in {self.save_dir} uses sentence_vectors={sentences!r}; "
                             f"config says {self.config.sentence_vectors!r}")

    def _loading(self, what: str):
        """The loading bar of ``what`` (vectors), shown only for a non-empty index (an empty one
        is not counted when no bar is shown)."""
        return self.progress.when(self.progress.show and len(self) > 0).loading(what)

    # ------------------------------------------------------------------ lazy parts
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._encoder_factory()
        return self._encoder

    def _dim(self) -> int:
        dim = self.db.get_meta("dim")
        return int(dim) if dim is not None else self.encoder.dim

    @property
    def stores(self) -> dict[str, EmbeddingStore]:
        if self._stores is None:
            dim = self._dim()
            with self._loading(f"index vectors from {self.db.location}"), \
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
    def loaded_stores(self) -> dict[str, EmbeddingStore]:
        """The stores if they were opened (none opened: empty), without opening them."""
        return self._stores or {}

    @property
    def loaded_version(self) -> str:
        """The index version whose state is held in memory (``version`` is the stored one)."""
        return self._loaded_version

    @property
    def version(self) -> str:
        return stored_version(self.db)

    @property
    def digest(self) -> str:
        """The content checksum of the loaded version."""
        return self._digest

    @property
    def extractor(self) -> str | None:
        """The extractor this index was built with (None while empty)."""
        return self.db.get_meta("extractor")

    # ------------------------------------------------------------------ content (read on first use)
    @property
    def passage_triples(self) -> dict[str, list[Triple]]:
        """passage id -> its normalised triples (read on first use)."""
        return self.content.passage_triples

    @property
    def passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        """passage id -> its hyperedges (read on first use)."""
        return self.content.passage_hyperedges

    @property
    def synonymy(self) -> dict[str, dict[str, float]]:
        """entity id -> {neighbour entity id: cosine} (read on first use)."""
        return self.content.synonymy

    @property
    def content_loaded(self) -> bool:
        """Whether the facts and synonymy lists are held in memory."""
        return self.content.loaded

    @property
    def fact_triples(self) -> dict[str, Triple]:
        """fact id -> its normalised triple (kept up to date by add/remove)."""
        return self.content.fact_triples

    @property
    def fact_hyperedges(self) -> dict[str, Hyperedge]:
        """fact id -> hyperedge (sentence / n-ary fact and its entities), kept up to date."""
        return self.content.fact_hyperedges

    def fact_entities(self) -> dict[str, tuple[str, ...]]:
        """fact id -> the normalised entities it links (subject and object of a triple)."""
        if self.passage_hyperedges:
            return {f: h.entities for f, h in self.fact_hyperedges.items()}
        return {f: (t[0], t[2]) for f, t in self.fact_triples.items()}

    def graph_triples(self) -> tuple[dict[str, list[Triple]], dict[str, list[float]]]:
        """What the graph is built from: each passage's triples, or its hyperedges as weighted
        pseudo-triples (:func:`.facts.hyperedge_graph_triples`), and the weights of the latter."""
        return graph_input(self.passage_triples, self.passage_hyperedges)

    def _passage_ids(self) -> list[str]:
        """The passage ids of the loaded state (never newer than the facts held in memory)."""
        if self._stores is not None:
            return list(self._stores["passage"].ids)
        return self.content.passage_ids()

    # ------------------------------------------------------------------ graph
    @property
    def graph(self) -> GraphData:
        return self.graph_keeper.graph

    @property
    def graph_path(self) -> Path:
        return self.graph_keeper.path

    def _build_graph(self) -> GraphData:
        triples, weights = self.graph_triples()
        return build_graph(self._passage_ids(), triples, self.synonymy, weights)

    # ------------------------------------------------------------------ documents
    def stored_documents(self, doc_ids: Iterable[str]) -> tuple[dict[str, list[str]], set[str]]:
        return self.documents.stored_documents(doc_ids)

    def document_plan(self, documents: Mapping[str, Sequence[str]]) -> DocumentPlan:
        return self.documents.document_plan(documents)

    def documents_of(self, pids: Sequence[str]) -> list[list[str]]:
        return self.documents.documents_of(pids)

    def all_documents(self) -> dict[str, list[str]]:
        return self.documents.all_documents()

    def has_passage(self, pid: str) -> bool:
        return self.db.has_passage(pid)

    def __len__(self) -> int:
        return self.db.passage_count()

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
            dim = self._dim()
            with self._loading(f"passage vectors and fact ids from {self.db.location}"), \
                    self.db.snapshot():
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
            dim = self._dim()
            with self._loading(f"every vector of {self.db.location}"), \
                    self.db.snapshot():
                current = self.version == self._loaded_version
                if current:
                    self._mirrors = {ns: self.db.vector_scan(ns, dim, vector_dtype=self.config.embedding_storage_dtype)
                                     for ns in STORE_NAMES}
                    self._mirrors_version = self._loaded_version
            if not current:
                self._reload()
        return self._mirrors

    # ------------------------------------------------------------------ changes
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
        from hippo_engine.index.writer import IndexWriter
        return IndexWriter(self).add(passages, triples, hyperedges, extractor=extractor)

    def remove(self, passage_ids: Iterable[str]) -> dict:
        """Remove passages and everything only they contributed (holding the writer lock)."""
        from hippo_engine.index.writer import IndexWriter
        return IndexWriter(self).remove(passage_ids)

    def mark(self, marks: tuple[str, str]) -> None:
        """Take on the (version, checksum) a change wrote."""
        self._loaded_version, self._digest = marks

    def reload(self) -> None:
        self._reload()

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
        PostgreSQL reader only if asked, else on first use: :class:`.content.ContentCache`). An
        index written before the content checksum was kept gets it computed (which reads the
        content)."""
        self.content.forget()
        self._views = self._views_version = self._mirrors = self._mirrors_version = None
        with self.db.snapshot():
            for s in (self._stores or {}).values():
                s.reload()
            self._loaded_version = self.version
            stored = self.db.get_meta(DIGEST_KEY)
            if read_content or stored is None or not self.lazy_reader:
                self.content.read()
            self._digest = stored or content_digest(self._passage_ids(), self.content.passage_triples,
                                                    self.content.passage_hyperedges, self.content.synonymy)
        self._digest_stored = stored is not None
        self.graph_keeper.forget()
        self.synonymy_keeper.forget()

    def close(self) -> None:
        self.db.close()


__all__ = ["IndexState"]
