"""Metadata filters at query time (``where=``): what one call may use, a :class:`Restriction`.

A filter (:mod:`hippo_engine.store.metadata`) is evaluated in the index database, on either
backend; a passage is allowed when at least one document holding it matches. The filter applies
before ranking. Per mode:

- ``hipporag2``: the candidate facts are the best among the facts of allowed passages (scores
  min-max normalised over those), so the recognition filter and its LLM see no other fact;
  linkings that link query vectors or query entities (``query``, ``ner``, ``ner_fact``) reach only
  entities of allowed passages; passage seeds sit on allowed passages only (their dense scores
  min-max normalised over the allowed ones); community seeds (``use_community_nodes``) are left
  out. The walk runs on the whole graph, seeded only inside the filter, and the ``k`` best allowed
  passages are returned (``dense_first`` and the dense fallback rank allowed passages too), so the
  top-k is full whenever ``k`` passages match. Scores are not those of a memory holding only the
  matching documents: the walk passes through the graph of the others.
- ``naive``: the ``k`` best allowed passages by dense score (min-max over the allowed ones).
- hi_* modes (:func:`context_solutions`): HiRAG assembles its context over the whole graph; under
  a filter only its allowed passages stay, in HiRAG's order (so fewer than ``k`` may remain), and
  what is built from the whole graph is left out: the entities, relations, community reports and
  bridge sections and the context's entity, community and path lists.

Nothing of a non-matching document is returned: passages, candidate and kept facts, seed entities,
``doc_ids`` (matching documents only), explanations (ranks among allowed passages; a walk's node
or fact outside the filter shows as :data:`HIDDEN`). A filter matching nothing gives empty results.
Without a filter nothing here runs and rankings are unchanged.
"""
from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hippo_engine.datatypes import Explanation, HiContext, PathEdge, QuerySolution
from hippo_engine.ids import chunk_id
from hippo_engine.index.graph import KIND_CONTEXT
from hippo_engine.retrieve.facts.fact_search import MatrixSearch, SubsetSearch
from hippo_engine.retrieve.restriction import Restriction
from hippo_engine.store.metadata import parse_where

if TYPE_CHECKING:
    from hippo_engine.index.state import IndexState
    from hippo_engine.retrieve.retriever import Retriever

#: what an explanation shows for a node or fact outside the filter
HIDDEN = "(outside the filter)"


class _Maps:
    """What restrictions of one retriever share: its context edges (entity node, passage node)
    and, for an index read in memory, the entity store row of each entity node."""

    def __init__(self, r: Retriever):
        g = r.graph
        ctx = (g.kinds & KIND_CONTEXT) > 0
        self.ctx_entity, self.ctx_passage = g.src[ctx], g.dst[ctx]       # src < dst: the entity first
        self.entity_row = None
        if r.entity_ids is not None:
            nodes = g.node_index([str(e) for e in r.entity_ids], entities=True)
            self.entity_row = np.full(g.num_nodes, -1, np.int64)
            ok = nodes >= 0
            self.entity_row[nodes[ok]] = np.flatnonzero(ok)
        self.cache: OrderedDict[tuple, Restriction] = OrderedDict()


def _rows_in(sorted_ids: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    """Increasing rows of ``keys`` in the sorted id array (str objects, or UTF-8 bytes ``S``);
    keys not there are left out."""
    if not len(keys) or not len(sorted_ids):
        return np.zeros(0, np.int64)
    want = np.array([k.encode("utf-8") for k in keys], dtype="S") if sorted_ids.dtype.kind == "S" else \
        np.array(list(keys), dtype=object)
    pos = np.searchsorted(sorted_ids, want)
    ok = pos < len(sorted_ids)
    ok[ok] = sorted_ids[pos[ok]] == want[ok]
    return np.unique(pos[ok]).astype(np.int64)


class Restrictor:
    """Restrictions of the retrievers of one index (``index``: the ``IndexState``); the last
    :attr:`CACHE` per retriever are kept (keyed by the allowed passages, so a metadata change that
    moves no passage reuses one), those whose vectors take at most :attr:`CACHE_BYTES`."""

    CACHE = 8
    CACHE_BYTES = 64 << 20

    def __init__(self, index: IndexState):
        self.index = index
        self._maps: weakref.WeakKeyDictionary[Retriever, _Maps] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def documents(self, where: Any) -> dict[str, list[str]]:
        """doc id -> passage ids of the documents matching ``where``, asked of the database now."""
        return self.index.db.matching_documents(parse_where(where))

    def of(self, r: Retriever, where: Any) -> Restriction:
        """The restriction of ``where`` for retriever ``r``."""
        docs = self.documents(where)
        with self._lock:
            maps = self._maps.get(r)
            if maps is None:
                maps = self._maps[r] = _Maps(r)
        pids = sorted({p for ps in docs.values() for p in ps})
        key = tuple(pids)
        with self._lock:
            hit = maps.cache.get(key)
            if hit is not None:
                maps.cache.move_to_end(key)
        if hit is None:
            hit = self._build(r, maps, pids, frozenset(docs))
            if hit.fact_search.search.mat.nbytes + hit.entity_search.mat.nbytes <= self.CACHE_BYTES:
                with self._lock:
                    maps.cache[key] = hit
                    while len(maps.cache) > self.CACHE:
                        maps.cache.popitem(last=False)
        return dataclasses.replace(hit, doc_ids=frozenset(docs))

    def _build(self, r: Retriever, maps: _Maps, pids: list[str], doc_ids: frozenset[str]) -> Restriction:
        rows = _rows_in(np.asarray(r.views.passage_ids), pids)
        blocked = np.setdiff1d(np.arange(len(r.passage_nodes), dtype=np.int64), rows)
        fact_ids = sorted(self.index.db.passage_fact_ids(pids)) if len(rows) else []
        allowed = np.zeros(r.graph.num_nodes, bool)
        allowed[r.passage_nodes[rows]] = True
        entities = np.unique(maps.ctx_entity[allowed[maps.ctx_passage]])
        needs_entities = r.linking.needs_ner or not r.linking.scores_facts
        return Restriction(doc_ids, rows, blocked, frozenset(fact_ids), self._fact_search(r, fact_ids), entities,
                           self._entity_search(r, maps, entities) if needs_entities else _nothing(r))

    @staticmethod
    def _fact_search(r: Retriever, fact_ids: list[str]) -> SubsetSearch:
        """A search over the allowed facts' vectors: from the matrix in memory, or read from the
        database on a lazy PostgreSQL reader."""
        if r.fact_mat is not None:
            rows = _rows_in(r.fact_ids, fact_ids)
            return SubsetSearch(MatrixSearch(np.asarray(r.fact_mat[rows])), rows)
        found, mat = r.fact_search.store.vectors_found(fact_ids)   # type: ignore[union-attr]
        rows = _rows_in(r.fact_ids, found)
        if len(rows) != len(found):              # facts of a newer version than the retriever's
            keep = set(np.asarray(r.fact_ids[rows]).tolist())
            sel = [i for i, f in enumerate(found) if (f.encode("utf-8") if r.views.fact_ids_utf8 else f) in keep]
            mat = mat[sel]
        return SubsetSearch(MatrixSearch(mat), rows)

    @staticmethod
    def _entity_search(r: Retriever, maps: _Maps, nodes: np.ndarray) -> MatrixSearch:
        """A search over the allowed entities' vectors (ids kept, so it finds graph nodes)."""
        if maps.entity_row is not None and r.entity_mat is not None and r.entity_ids is not None:
            rows = maps.entity_row[nodes]
            rows = np.sort(rows[rows >= 0])
            return MatrixSearch(np.asarray(r.entity_mat[rows]), ids=np.asarray(r.entity_ids)[rows])
        ids = [str(x) for x in r.graph.node_ids[nodes]]
        found, mat = r.entity_search.store.vectors_found(ids)   # type: ignore[union-attr]
        return MatrixSearch(mat, ids=np.array(found, dtype=object))


def _nothing(r: Retriever) -> MatrixSearch:
    """An empty entity search (a linking that never searches entities gets this one)."""
    dim = r.passage_mat.shape[1] if r.passage_mat.ndim == 2 else 0
    return MatrixSearch(np.zeros((0, dim), np.float32), ids=np.zeros(0, dtype=object))


# ----------------------------------------------------------------------------- results
def empty_solutions(queries: Sequence[str]) -> list[QuerySolution]:
    """What a filter matching no passage gives: a solution without passages per query."""
    return [QuerySolution.from_ranking(q, [], np.zeros(0)) for q in queries]


def keep_matching_documents(solutions: Sequence[QuerySolution], doc_ids: frozenset[str]) -> None:
    """Each passage's ``doc_ids`` cut to the matching documents (a passage two documents share
    names only the one inside the filter)."""
    for s in solutions:
        s.doc_ids = [[d for d in ds if d in doc_ids] for ds in s.doc_ids]


def context_solutions(contexts: Sequence[HiContext], passage_ids: frozenset[str], k: int) -> list[QuerySolution]:
    """hi_* contexts under a filter: each context's allowed passages (HiRAG's order, at most ``k``,
    scored ``n/n, ..., 1/n`` as a mode's context ranking is) as a solution, with nothing else of
    the context (see the module docs)."""
    out = []
    for ctx in contexts:
        kept = [p for p in ctx.passages if chunk_id(p) in passage_ids][:k]
        sol = QuerySolution.from_ranking(ctx.query, kept, np.arange(len(kept), 0, -1) / max(len(kept), 1))
        sol.passage_ids = [chunk_id(p) for p in kept]
        out.append(sol)
    return out


def hide_outside(r: Retriever, restriction: Restriction, explanations: Sequence[Explanation]) -> None:
    """Replace, in the explanations' walks, the names of nodes outside the filter (passages not
    allowed, entities of no allowed passage, community nodes) and the facts of no allowed passage
    by :data:`HIDDEN`."""
    from hippo_engine.retrieve.explain.core import graph_view
    view = graph_view(r)
    named: Mapping[int, str] = getattr(view, "_names", {})     # every node a walk has shown, by number
    allowed_nodes = set(r.passage_nodes[restriction.passage_rows].tolist()) | set(restriction.entity_nodes.tolist())
    shown: dict[str, bool] = {}
    for node, label in named.items():
        shown[label] = shown.get(label, False) or node in allowed_nodes
    facts = r.facts
    texts = {view.fact_text(f) for f in restriction.fact_ids if facts.has(f)}

    def name(n: str) -> str:
        return n if shown.get(n, False) else HIDDEN

    def fact(t: str) -> str:
        return t if t in texts else HIDDEN

    def edge(e: PathEdge) -> PathEdge:
        return dataclasses.replace(e, source=name(e.source), target=name(e.target),
                                   text=list(dict.fromkeys(fact(t) for t in e.text)))

    for ex in explanations:
        ex.paths = [dataclasses.replace(p, nodes=[name(n) for n in p.nodes], edges=[edge(e) for e in p.edges])
                    for p in ex.paths]


__all__ = ["HIDDEN", "Restriction", "Restrictor", "empty_solutions", "hide_outside", "keep_matching_documents",
           "context_solutions"]
