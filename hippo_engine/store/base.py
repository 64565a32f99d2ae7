"""The storage interface an index is kept behind: :class:`IndexStore`.

One ``IndexStore`` holds everything of one index but the graph (which is derived and rebuilt
from it): metadata, each passage's facts (triples or hyperedges), the synonymy lists, which
documents hold which passages, the communities and their reports, and, through
:meth:`IndexStore.embedding_store`, the texts and vectors of passages, entities, facts and
community reports (:class:`~hippo_engine.store.vectors.EmbeddingStore`).

Implementations: :class:`~hippo_engine.store.db.IndexDB` (an embedded SQLite file, the
default), the PostgreSQL + pgvector backend and the FalkorDB one (:mod:`hippo_engine.store.falkordb`).
Writes happen inside :meth:`transaction`: one ``index()`` or ``delete()`` is one transaction, so a
crash leaves the previous state.
"""
from __future__ import annotations

import contextlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.ids import hyperedge_id, triple_id
from hippo_engine.store.metadata import Filter

logger = logging.getLogger(__name__)


#: the embedding stores of an index (``community``: the HiRAG report vectors)
STORE_NAMES = ("passage", "entity", "fact")
ALL_STORE_NAMES = (*STORE_NAMES, "community")


class StoreError(RuntimeError):
    """The stored index is unreadable or belongs to another configuration."""


class StoreConnectionLost(StoreError):
    """The database server of an index went away: the store object cannot be used any more;
    open the index again."""


class GraphQueries(Protocol):
    """The graph questions of the kb_* modes a backend may answer in its database (see
    :meth:`IndexStore.graph_queries`); every answer equals what the engine's graph of the same index
    version gives (passages: the passage ids of that graph)."""

    def reach(self, seeds: Sequence[str], hops: int, passages: Container[str]) -> dict[str, int]:
        """Entity id -> hops from the nearest seed, for every entity within ``hops`` of ``seeds``."""

    def entity_passages(self, entity_ids: Iterable[str]) -> dict[str, set[str]]:
        """Entity id -> the ids of the passages that mention it."""

    def nearest_communities(self, vector: np.ndarray, k: int) -> list[str]:
        """Ids of (at most) ``k`` communities whose report vectors are near ``vector`` (approximate)."""


class IndexStore(ABC):
    """Everything of one index but the graph. ``location`` names it in messages (a file path,
    or a database and schema); ``shown_location`` names it where others may read it (the service's
    ``/stats``): never an absolute path or a DSN."""

    location: str
    shown_location: str = ""

    def __init__(self) -> None:
        self._depth = 0                                    # transaction nesting (0: none open)
        self._after_commit: list[Callable[[], None]] = []  # hooks of the open transaction

    # ------------------------------------------------------------------ transactions
    # The protocol is owned here, once: nesting (an inner block joins the outer one), rollback of
    # the outermost block on any exception, and the after-commit hooks. Backends implement the
    # three steps of one outermost transaction: ``_begin`` (which may refuse, e.g. inside a
    # snapshot, and rolls back what it started if it fails), ``_commit`` and ``_rollback``.
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """All writes inside are committed together or not at all (nesting allowed: an inner
        block joins the outer one). Yields the backend's connection (``_connection``)."""
        if self._depth:
            self._depth += 1
            try:
                yield self._connection()
            finally:
                self._depth -= 1
            return
        self._begin()
        self._depth = 1
        try:
            yield self._connection()
        except BaseException:
            self._depth = 0
            self._after_commit.clear()
            self._rollback()
            raise
        self._depth = 0
        try:
            self._commit()
        except BaseException:
            self._after_commit.clear()
            raise
        self._run_after_commit()

    @abstractmethod
    def _begin(self) -> None:
        """Start the outermost write transaction (taking whatever lock the backend's writers take)."""

    @abstractmethod
    def _commit(self) -> None:
        """Commit the outermost write transaction."""

    @abstractmethod
    def _rollback(self) -> None:
        """Roll the outermost write transaction back (never raises for a connection already gone)."""

    def _connection(self) -> Any:
        """What ``transaction()`` yields (the backend's connection); None by default."""
        return None

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[Any]:
        """Reads inside see one committed state, whatever other processes commit meanwhile."""

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the current transaction has committed (now, outside one); dropped if
        the transaction rolls back."""
        if self._depth == 0:
            fn()
        elif fn not in self._after_commit:
            self._after_commit.append(fn)

    def _run_after_commit(self) -> None:
        todo, self._after_commit = self._after_commit, []
        for fn in todo:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - derived data only; the commit stands
                logger.warning("after-commit step %r failed: %s", fn, e)

    # ------------------------------------------------------------------ metadata
    @abstractmethod
    def get_meta(self, key: str) -> str | None: ...

    @abstractmethod
    def set_meta(self, key: str, value: str) -> None: ...

    # ------------------------------------------------------------------ passages
    @abstractmethod
    def passage_ids(self) -> list[str]:
        """Ids of the stored passages (any order)."""

    @abstractmethod
    def has_passage(self, pid: str) -> bool: ...

    @abstractmethod
    def passage_count(self) -> int: ...

    # ------------------------------------------------------------------ facts
    @abstractmethod
    def load_passage_triples(self) -> dict[str, list[Triple]]:
        """passage id -> its normalised triples, in stored order."""

    @abstractmethod
    def put_passage_triples(self, pid: str, triples: Sequence[Triple]) -> None: ...

    @abstractmethod
    def delete_passage_triples(self, pids: Iterable[str]) -> None: ...

    @abstractmethod
    def load_passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        """passage id -> its hyperedges (sentences / n-ary facts with their entities), in order."""

    @abstractmethod
    def put_passage_hyperedges(self, pid: str, hyperedges: Sequence[Hyperedge]) -> None: ...

    @abstractmethod
    def delete_passage_hyperedges(self, pids: Iterable[str]) -> None: ...

    def facts_of(self, fact_ids: Iterable[str]) -> dict[str, Triple | Hyperedge]:
        """The stored triple or hyperedge of each fact id (:func:`hippo_engine.ids.fact_id` of its
        text; unknown ids are left out). This default reads every fact; a backend with a fact-id
        index answers from it."""
        want = set(fact_ids)
        out: dict[str, Triple | Hyperedge] = {}
        for ts in self.load_passage_triples().values():
            for t in ts:
                fid = triple_id(t)
                if fid in want:
                    out.setdefault(fid, (t[0], t[1], t[2]))
        for hs in self.load_passage_hyperedges().values():
            for h in hs:
                fid = hyperedge_id(h)
                if fid in want:
                    out.setdefault(fid, h)
        return out

    # ------------------------------------------------------------------ synonymy
    @abstractmethod
    def load_synonymy(self) -> dict[str, dict[str, float]]:
        """entity id -> {neighbour entity id: similarity}."""

    @abstractmethod
    def replace_synonymy_lists(self, lists: Mapping[str, Mapping[str, float]]) -> None:
        """Overwrite the neighbour lists of the given sources (an empty dict clears one)."""

    # ------------------------------------------------------------------ documents
    @abstractmethod
    def put_documents(self, docs: Mapping[str, Sequence[str]]) -> None:
        """Record (or replace) which passages each document id holds, in order."""

    @abstractmethod
    def document_passages(self, doc_ids: Iterable[str]) -> dict[str, list[str]]:
        """doc id -> its passage ids, for the ids that are stored (unknown ids are left out)."""

    @abstractmethod
    def passage_documents(self, pids: Iterable[str]) -> dict[str, list[str]]:
        """passage id -> the ids of the documents holding it (passages without a recorded
        document are left out)."""

    @abstractmethod
    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        """Remove the document rows of ``doc_ids``, their metadata and their registry rows."""

    # ------------------------------------------------------------------ document registry
    # One row per document (see :mod:`hippo_engine.store.document_registry`): ``put_documents`` adds or
    # touches rows, ``delete_documents`` removes them; the index writer registers passages kept without
    # document rows under their legacy ids.
    @abstractmethod
    def register_documents(self, doc_ids: Iterable[str]) -> None:
        """Add registry rows for new ids (in the given order) and touch the known ones."""

    @abstractmethod
    def unregister_documents(self, doc_ids: Iterable[str]) -> None:
        """Remove the registry rows of ``doc_ids`` (unknown ids are ignored)."""

    @abstractmethod
    def document_count(self) -> int:
        """How many documents the index holds (registry rows)."""

    @abstractmethod
    def document_page(self, offset: int = 0, limit: int = 50) -> list[tuple[str, float, float]]:
        """``(doc id, first indexed, last indexed)`` of the documents from ``offset`` on, in the order
        they were first indexed (epoch seconds)."""

    # ------------------------------------------------------------------ document metadata
    # One JSON object per document (see :mod:`hippo_engine.store.metadata`), kept by doc id: it
    # outlives a re-index of the id with another text and goes with ``delete_documents``.
    @abstractmethod
    def put_document_metadata(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        """Set (replace) the metadata of each doc id; an empty object removes a document's metadata."""

    @abstractmethod
    def document_metadata(self, doc_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """doc id -> its metadata, for the ids that have some (the others are left out)."""

    @abstractmethod
    def matching_documents(self, where: Filter) -> dict[str, list[str]]:
        """doc id -> its passage ids, for every document whose metadata passes the parsed filter
        ``where`` (:func:`hippo_engine.store.metadata.parse_where`), evaluated in the database."""

    @abstractmethod
    def passage_fact_ids(self, pids: Iterable[str]) -> set[str]:
        """The ids of the facts (triples and hyperedges) of the passages ``pids``."""

    # ------------------------------------------------------------------ communities (HiRAG)
    @abstractmethod
    def load_community_rows(self) -> list[str]:
        """The stored communities as JSON texts, by (level, id)."""

    @abstractmethod
    def load_report_rows(self) -> list[tuple[str, str]]:
        """(member key, report JSON) of the stored community reports."""

    @abstractmethod
    def replace_communities(self, rows: Sequence[tuple[str, int, str | None, str]],
                            reports: Sequence[tuple[str, str, str]]) -> None:
        """Replace all communities (``(id, level, parent, JSON)``) and keep exactly the reports
        of ``reports`` (``(member key, report JSON, source)``). Call inside a transaction."""

    # ------------------------------------------------------------------ vectors, by role
    # Callers ask for the store of a namespace (one of ``ALL_STORE_NAMES``) by the role they use
    # it in; each backend hands out the right object. Every object is an
    # :class:`~hippo_engine.store.vectors.EmbeddingStore`; ``holds_vectors`` says whether its
    # ``matrix`` holds every vector (else the vectors stay in the backend: a writer reads them
    # back with ``blocks()``/``vectors_of()``, a search object asks ``extremes()``).
    @property
    def vectors_in_memory(self) -> bool:
        """Whether every vector is mirrored in memory (so the writer's stores also serve
        retrieval); False for a backend that searches its vectors where they are stored."""
        return True

    @abstractmethod
    def embedding_store(self, namespace: str, dim: int, **options):
        """The :class:`~hippo_engine.store.vectors.EmbeddingStore` of ``namespace`` (one of
        :data:`ALL_STORE_NAMES`) in this index, ``dim``-dimensional, every vector in memory."""

    def vector_writer(self, namespace: str, dim: int, *, vector_dtype: str = "float32", mmap: bool = False):
        """Role *writing vectors*: ``upsert``/``delete``, ``ids``, ``__contains__``, ``texts``,
        ``iter_texts``, ``vectors_of``, ``blocks`` (every vector in row blocks, for a kNN over all
        of them) and ``prepare_search`` (build the backend's search index, if it keeps one)."""
        return self.embedding_store(namespace, dim, vector_dtype=vector_dtype, mmap=mmap)

    def vector_search(self, namespace: str, dim: int, *, keep: str, vector_dtype: str = "float32"):
        """Role *searching vectors*, for retrieval on a store whose vectors are not in memory
        (``vectors_in_memory`` False): ``ids`` and ``matrix`` as far as ``keep`` says
        (``"ids+matrix"``, ``"ids"``, ``"count"``), ``texts``/``texts_found``, and top-k with the
        exact scores HippoRAG 2 normalises (``extremes``). By default the full store."""
        return self.embedding_store(namespace, dim, vector_dtype=vector_dtype)

    def vector_scan(self, namespace: str, dim: int, *, vector_dtype: str = "float32"):
        """Role *scanning ids and matrices*: every id and vector in memory (HiRAG's contexts,
        comparing two indexes), whatever the backend keeps."""
        return self.embedding_store(namespace, dim, vector_dtype=vector_dtype)

    # ------------------------------------------------------------------ graph questions
    def graph_queries(self) -> GraphQueries | None:
        """The kb_* modes' graph questions answered in the database (:class:`GraphQueries`), for a backend
        that traverses where it stores the graph; None (the default): the modes use the engine's graph."""
        return None

    # ------------------------------------------------------------------ the graph file
    def put_graph_file(self, path, version: str, digest: str) -> bool:
        """Keep a copy of the graph file ``path`` (built for ``version``/``digest``) where other
        hosts' readers find it; False if not kept. A backend whose index is a local folder has
        nothing to add (the file already sits in it)."""
        return False

    def fetch_graph_file(self, dest, version: str, digest: str) -> bool:
        """Write the kept graph file of ``version``/``digest`` to ``dest``; False if there is none."""
        return False

    @abstractmethod
    def close(self) -> None: ...


def encode_entities(entities: Sequence[str]) -> str:
    """A hyperedge's entity list as stored (JSON)."""
    return json.dumps(list(entities), ensure_ascii=False)


def hyperedges_by_passage(rows: Iterable[Sequence[str]], location: object) -> dict[str, list[Hyperedge]]:
    """passage id -> its hyperedges, from stored ``(passage id, text, entity list JSON)`` rows in order
    (``location`` names the index in the error about an unreadable entity list)."""
    out: dict[str, list[Hyperedge]] = {}
    for pid, text, ents in rows:
        try:
            entities = tuple(json.loads(ents))
        except ValueError as e:
            raise StoreError(f"{location}: unreadable entity list of a fact of passage {pid}: {e}") from e
        out.setdefault(pid, []).append(Hyperedge(text, entities))
    return out


def iter_chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    """``items`` in slices of ``size`` (for bounded ``IN (...)`` lists)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


__all__ = ["ALL_STORE_NAMES", "STORE_NAMES", "GraphQueries", "IndexStore", "StoreConnectionLost", "StoreError",
           "Triple", "encode_entities", "iter_chunks"]
