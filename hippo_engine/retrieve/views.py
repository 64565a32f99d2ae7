"""What retrieval reads of one index version, chosen once: :class:`ReaderViews`.

An index read in memory (SQLite, or PostgreSQL with ``postgres_search="memory"``) gives every
matrix: facts and entities are searched by :class:`~.fact_search.MatrixSearch`, facts looked up
in the index's dicts. A lazy PostgreSQL reader (``index.lazy_reader``) holds only the passage
vectors and the fact ids: facts and entities are searched in the database
(:class:`~.fact_search.StoreSearch`), facts fetched a batch at a time, and names and passage
texts of rows another process deleted since the view was made are left out (an entity then
shows its id). :func:`reader_views` is the one place that tells the two apart. The passage
rows a search ranked become ``QuerySolution``s through :class:`~.passages.PassageTexts`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hippo_engine.retrieve.facts.fact_search import FactLookup, MatrixSearch, StoreSearch
from hippo_engine.retrieve.passages import PassageTexts


@dataclass
class ReaderViews:
    """The vectors and lookups a ``Retriever`` reads (``fact_mat``/``entity_ids``/``entity_mat``
    are None on a lazy reader, whose searches run in the database)."""

    passage_ids: np.ndarray
    passage_mat: np.ndarray
    #: fact ids by store row, sorted: an object array of str, or on a lazy reader (``fact_ids_utf8``) what it
    #: keeps, a bytes array (``S``) of their UTF-8 encodings
    fact_ids: np.ndarray
    facts: FactLookup
    fact_search: MatrixSearch | StoreSearch
    entity_search: MatrixSearch | StoreSearch
    entity_text: Callable[[str], str]
    entity_texts: Callable[[Sequence[str]], list[str]]
    passages: PassageTexts
    fact_mat: np.ndarray | None = None
    entity_ids: np.ndarray | None = None
    entity_mat: np.ndarray | None = None
    #: a lazy reader's passage store when its HNSW index serves searches (``postgres_search="hnsw"``):
    #: the dense prior can come from it instead of a scan (:mod:`.ann_prior`)
    passage_store: Any = None
    #: whether ``fact_ids`` holds UTF-8 bytes (a lazy reader) rather than str
    fact_ids_utf8: bool = False


def _names_of(store) -> Callable[[Sequence[str]], list[str]]:
    """Entity names from a lazy store; an entity deleted since the reader's view shows its id."""
    def names(keys: Sequence[str]) -> list[str]:
        found = store.texts_found(keys)
        return [found.get(k, k) for k in keys]
    return names


def reader_views(index, exact: bool) -> ReaderViews:
    """The views of ``index``'s current version (``exact``: exact database scans instead of HNSW
    on a lazy reader; see ``postgres_search``)."""
    st = index.reader_stores
    p, f, e = st["passage"], st["fact"], st["entity"]
    if index.lazy_reader:
        facts = StoreSearch(f, exact, floor_ef=index.config.postgres_floor_ef_search)
        return ReaderViews(p.ids, p.matrix, f.ids, FactLookup(fetch=index.db.facts_of), facts,
                           StoreSearch(e, exact), e.text, _names_of(e), PassageTexts(p, drop_missing=True),
                           passage_store=None if exact or not p.has_hnsw() else p, fact_ids_utf8=True)
    known = index.fact_hyperedges if index.passage_hyperedges else index.fact_triples
    return ReaderViews(p.ids, p.matrix, np.asarray(f.ids, dtype=object), FactLookup(known=known),
                       MatrixSearch(f.matrix), MatrixSearch(e.matrix, ids=e.ids), e.text, e.texts, PassageTexts(p),
                       fact_mat=f.matrix, entity_ids=e.ids, entity_mat=e.matrix)
