"""Where the retriever finds facts and entities for a query: small strategy objects.

HippoRAG 2 scores every fact against the query, keeps the ``linking_top_k`` best and min-max
normalises their scores over all facts. Two ways to get that:

- :class:`MatrixSearch`: an in-memory matrix of every vector (the SQLite store, or a PostgreSQL
  store mirrored in RAM): :func:`~hippo_engine.retrieve.scoring.top_fact_rows`, exact.
- :class:`StoreSearch`: a :class:`~hippo_engine.store.postgres.lazy.LazyPostgresStore` that holds
  no vectors. ``exact=True``: the database streams every vector once per query batch and the
  scores are the same float64 numbers :class:`MatrixSearch` gives (so are the rankings).
  ``exact=False``: the HNSW index nominates ``max(100, k)`` candidates for ``q``, rescored
  exactly; the minimum of the normalisation is the lowest exact score among HNSW candidates for
  ``-q`` (the facts least like the query). HNSW is approximate: a missed best fact changes the
  candidates, a missed lowest fact makes the minimum slightly too high (scores of the kept
  facts slightly lower, by the same affine map for all of them). The benchmarks report both.

Both return rows of the store's sorted ids, so the retriever's row-based code is the same.
:class:`FactLookup` gives the triple (or hyperedge) of a fact id: from the index's dicts in
memory, or from the database, a batch of ids at a time, for a reader that loaded none.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hippo_engine.datatypes import Hyperedge, Triple, hyperedge_triple
from hippo_engine.ids import entity_id
from hippo_engine.retrieve.scoring import Rows, max_row_norm, nearest_rows, row_blocks, row_scores, top_fact_rows, top_k

if TYPE_CHECKING:
    from hippo_engine.index.graph import GraphData


class MatrixSearch:
    """Top-k over an in-memory matrix whose rows follow the store's sorted ids."""

    def __init__(self, mat: np.ndarray, ids: np.ndarray | None = None):
        self.mat, self.ids = mat, ids     # ids: needed by ``nearest_nodes`` only
        self._norm: float | None = None
        self._nodes: tuple[object, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.mat)

    def _row_norm(self) -> float:
        if self._norm is None:
            self._norm = max_row_norm(self.mat)
        return self._norm

    def top_normalised(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` best rows and their min-max normalised scores (see ``top_fact_rows``)."""
        return top_fact_rows(self.mat, self._row_norm(), q, k)

    def nearest(self, vecs: np.ndarray, per_vector: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each vector's ``per_vector`` nearest rows by cosine: (rows, float scores), best first.
        One nearest row is exact (float64, ``nearest_rows``); more come from float32 scores."""
        v = np.atleast_2d(np.asarray(vecs, np.float32))
        if len(self.mat) == 0 or len(v) == 0:
            return [(np.zeros(0, np.int64), np.zeros(0)) for _ in range(len(v))]
        if per_vector == 1:
            rows, sims = nearest_rows(self.mat, self._row_norm(), v)
            return [(rows[j:j + 1], sims[j:j + 1]) for j in range(len(v))]
        sims = np.empty((len(self.mat), len(v)), np.float32)
        for s, e in row_blocks(len(self.mat)):
            sims[s:e] = row_scores(self.mat, s, e, v).T
        out = []
        for j in range(len(v)):
            rows = top_k(sims[:, j], per_vector)
            out.append((rows, sims[rows, j]))
        return out

    def nearest_nodes(self, vecs: np.ndarray, per_vector: int, graph) -> list[tuple[np.ndarray, np.ndarray]]:
        """``nearest`` as entity nodes of ``graph`` (-1: a row not in the graph)."""
        if self._nodes is None or self._nodes[0] is not graph:
            self._nodes = (graph, graph.node_index(np.asarray(self.ids, dtype=object), entities=True))
        nodes = self._nodes[1]
        return [(nodes[rows], sims) for rows, sims in self.nearest(vecs, per_vector)]


class StoreSearch:
    """Top-k asked of the database (``store.extremes``); rows are positions in ``store.ids`` or,
    for a store that keeps no ids (entities), the ids themselves are returned by :meth:`nearest_ids`.
    ``floor_ef``: the HNSW ``ef_search`` of the search for the normalisation's minimum (None: the
    top search's; ``postgres_floor_ef_search``)."""

    def __init__(self, store, exact: bool, floor_ef: int | None = None):
        self.store, self.exact, self.floor_ef = store, bool(exact), floor_ef

    def __len__(self) -> int:
        return len(self.store)

    def top_normalised(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(q, np.float32))
        kk = min(k, len(self.store))
        if kk <= 0 or len(q) == 0:
            return np.zeros((len(q), 0), np.int64), np.zeros((len(q), 0))
        ids, scores, lows = self.store.extremes(q, kk, self.exact, floor_ef=self.floor_ef)
        rows_out, scores_out = [], []
        for j in range(len(q)):
            rows = self.store.rows_of(ids[j])
            ok = rows >= 0                     # rows of a newer version than this view: dropped
            rows, s = rows[ok], scores[j, :len(ids[j])][ok]
            hi, lo = (float(s[0]), float(lows[j])) if len(s) else (0.0, 0.0)
            lo = min(lo, float(s.min())) if len(s) else lo
            rows_out.append(rows)
            scores_out.append((s - lo) / (hi - lo) if hi > lo else np.ones(len(s)))
        # a rectangle; a query with fewer candidates (rows a writer added or deleted since the
        # view was made) is padded with row -1, which the retriever skips
        rows_arr = np.full((len(q), kk), -1, np.int64)
        scores_arr = np.zeros((len(q), kk))
        for j, (r, s) in enumerate(zip(rows_out, scores_out, strict=True)):
            rows_arr[j, :len(r)], scores_arr[j, :len(s)] = r, s
        return rows_arr, scores_arr

    def nearest_ids(self, vecs: np.ndarray, per_vector: int) -> list[tuple[list[str], np.ndarray]]:
        """Each vector's ``per_vector`` nearest ids with their exact scores, best first."""
        v = np.atleast_2d(np.asarray(vecs, np.float32))
        if len(self.store) == 0 or len(v) == 0:
            return [([], np.zeros(0)) for _ in range(len(v))]
        ids, scores, _ = self.store.extremes(v, per_vector, self.exact, lowest=False)
        return [(ids[j], scores[j, :len(ids[j])]) for j in range(len(v))]

    def nearest_nodes(self, vecs: np.ndarray, per_vector: int, graph) -> list[tuple[np.ndarray, np.ndarray]]:
        """``nearest_ids`` as entity nodes of ``graph`` (-1: an id not in the graph)."""
        return [(graph.node_index(ids, entities=True), sims) for ids, sims in self.nearest_ids(vecs, per_vector)]


class SubsetSearch:
    """Top-k among some rows of a store only (a metadata filter's facts): ``search`` holds the
    vectors of those rows, in the order of ``rows`` (their rows in the store, increasing); results
    are rows of the store, scores min-max normalised over the subset."""

    def __init__(self, search: MatrixSearch, rows: np.ndarray):
        self.search, self.rows = search, np.asarray(rows, np.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def top_normalised(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        rows, scores = self.search.top_normalised(q, k)
        return self.rows[rows], scores


class FactLookup:
    """Fact id -> what the retriever shows and links: the triple (a hyperedge is shown as its
    pseudo-triple) and the entities. ``fetch(ids) -> {id: Triple | Hyperedge}`` reads a batch
    (from the database); ``known`` is a dict already in memory. Fetched facts are kept (a
    query touches a few dozen facts)."""

    def __init__(self, fetch: Callable[[Iterable[str]], Mapping[str, Triple | Hyperedge]] | None = None,
                 known: Mapping[str, Triple | Hyperedge] | None = None,
                 entities: Mapping[str, Sequence[str]] | None = None):
        self._fetch = fetch
        #: what a fetching lookup has read (a copy of ``known``, then the fetched facts)
        self._fetched: dict[str, Triple | Hyperedge] | None = dict(known or {}) if fetch is not None else None
        self._facts: Mapping[str, Triple | Hyperedge] = (self._fetched if self._fetched is not None
                                                         else known if known is not None else {})
        self._entities = entities    # overrides a triple's (subject, object)

    def known_ids(self) -> list[str]:
        """Ids of the facts at hand (all of them unless they are fetched on demand)."""
        return list(self._facts)

    #: facts a fetching lookup keeps at most (it starts again empty beyond; a query needs dozens)
    MAX_KEPT = 200_000

    def prefetch(self, ids: Sequence[str]) -> None:
        missing = [i for i in ids if i not in self._facts]
        if missing and self._fetch is not None and self._fetched is not None:
            if len(self._fetched) + len(missing) > self.MAX_KEPT:
                self._fetched.clear()
                missing = list(dict.fromkeys(ids))
            self._fetched.update(self._fetch(missing))

    def _get(self, fid: str) -> Triple | Hyperedge:
        if fid not in self._facts:
            self.prefetch([fid])
        return self._facts[fid]

    def has(self, fid: str) -> bool:
        """Whether the fact is known (fetched; a fact deleted since the reader's view is not)."""
        return fid in self._facts

    def fact(self, fid: str) -> Triple | Hyperedge:
        """The fact as stored: a triple or a hyperedge."""
        return self._get(fid)

    def triple(self, fid: str) -> Triple:
        f = self._get(fid)
        if isinstance(f, Hyperedge):
            return hyperedge_triple(f)
        subject, relation, obj = f
        return (subject, relation, obj)

    def entities(self, fid: str) -> Sequence[str]:
        if self._entities is not None:
            return self._entities[fid]
        f = self._get(fid)
        return f.entities if isinstance(f, Hyperedge) else (f[0], f[2])


class FactRows:
    """Mixin of the ``Retriever``: facts by store row (``fact_ids``, ``facts``), the entity nodes
    each fact row links (cached per row) and the links of kept facts."""

    fact_ids: np.ndarray
    facts: FactLookup
    graph: GraphData
    _fact_row_nodes: dict[int, np.ndarray]

    @property
    def fact_map(self) -> Mapping[str, Triple]:
        """Fact id -> the triple shown for it (facts read so far, on a lazy reader)."""
        return {f: self.facts.triple(f) for f in self.facts.known_ids()}

    def _fid(self, row: int) -> str:
        f = self.fact_ids[row]
        return f.decode() if isinstance(f, bytes) else f

    def fact_triple(self, row: int) -> Triple:
        """The triple of fact store row ``row``."""
        return self.facts.triple(self._fid(row))

    @property
    def fact_triples(self) -> list[Triple]:
        """Triples of all fact rows (built on demand; not used on the query path)."""
        self.facts.prefetch([self._fid(i) for i in range(len(self.fact_ids))])
        return [self.fact_triple(i) for i in range(len(self.fact_ids))]

    def _entities_of_row(self, row: int) -> Sequence[str]:
        fid = self._fid(row)
        return self.facts.entities(fid) if self.facts.has(fid) else ()   # () : deleted since the view

    def fact_links(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """Entity nodes of fact rows: (entities per row, their nodes concatenated in row order;
        -1: not in the graph). A triple links its subject then its object."""
        missing = [r for r in dict.fromkeys(int(r) for r in rows) if r not in self._fact_row_nodes]
        if len(self._fact_row_nodes) > FactLookup.MAX_KEPT:     # bounded, like the facts themselves
            self._fact_row_nodes.clear()
            missing = list(dict.fromkeys(int(r) for r in rows))
        if missing:
            self.facts.prefetch([self._fid(r) for r in missing])
            ents = [[entity_id(e) for e in self._entities_of_row(r)] for r in missing]
            nodes = self.graph.node_index([e for es in ents for e in es], entities=True)
            ends = np.cumsum([len(es) for es in ents])
            for r, part in zip(missing, np.split(nodes.astype(np.int64), ends[:-1]), strict=True):
                self._fact_row_nodes[r] = part
        parts = [self._fact_row_nodes[int(r)] for r in rows]
        lengths = np.array([len(x) for x in parts], dtype=np.int64)
        return lengths, (np.concatenate(parts) if parts else np.zeros(0, np.int64))

    def fact_nodes_of(self, rows: Rows) -> np.ndarray:
        """(len(rows), 2) subject/object node of each triple fact row (-1: not in the graph)."""
        lengths, nodes = self.fact_links(rows)
        if np.any(lengths != 2):
            raise ValueError("fact_nodes_of: these facts are not triples; use fact_links")
        return nodes.reshape(-1, 2)


    def link_facts(self, kept_rows: Rows, fact_scores) -> list[tuple[int, float]]:
        """(entity node, score) per subject/object of the kept facts; ``fact_scores`` maps a
        fact row to its score (an array over all facts, or a dict)."""
        linked = []
        lengths, nodes = self.fact_links(kept_rows)
        for r, node in zip(np.repeat(np.asarray(kept_rows, np.int64), lengths).tolist(), nodes.tolist(), strict=True):
            if node >= 0:
                linked.append((int(node), float(fact_scores[r])))
        return linked


__all__ = ["FactLookup", "FactRows", "MatrixSearch", "StoreSearch", "SubsetSearch"]
