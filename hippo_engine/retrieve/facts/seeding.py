"""Seeding the graph walk (the entity and passage seeds of the PageRank reset vector), as pure
functions, and the interface of extra seed sources.

Entity seeds: each (fact, entity) link weighs ``fact score / passages of the entity``; an
entity linked several times gets the mean; the ``linking_top_k`` heaviest entities stay.
Passage seeds: ``passage_node_weight x min-max(dense score)`` on every passage node. A
:class:`SeedSource` (e.g. :class:`hippo_engine.hirag.seeds.CommunitySeeds`) adds reset
weights on nodes of its own after both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from hippo_engine.retrieve.scoring import Rows, min_max


def entity_seeds(linked: Sequence[tuple[int, float]], passage_counts: np.ndarray, num_nodes: int,
                 keep: int) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Seed weights of entity nodes for one query.

    ``linked``: (node index, score) pairs, one per (fact, entity) link. Each link weighs
    ``score / passage_counts[node]``; an entity linked several times gets the mean; only the
    ``keep`` heaviest entities (ties: lower index) stay. Returns (weights over all nodes,
    [(node, weight)] best first).
    """
    q, nodes, w = entity_seed_table(np.zeros(len(linked), np.int64),
                                    np.array([n for n, _ in linked], dtype=np.int64),
                                    np.array([s for _, s in linked], dtype=np.float64), passage_counts, keep)
    weights = np.zeros(num_nodes)
    weights[nodes] = w
    return weights, list(zip(nodes.tolist(), w.tolist(), strict=False))


def entity_seed_table(query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, passage_counts: np.ndarray,
                      keep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``entity_seeds`` for many queries at once, as arrays.

    One row per (query, fact, entity) link: ``query`` number, entity ``nodes`` and fact
    ``scores``. Returns (query, node, weight) of the kept seeds, grouped by query, best first
    within a query (ties: lower node). Sums run in link order (``np.bincount``), so a query's
    weights do not depend on the other queries.
    """
    query, nodes = np.asarray(query, np.int64), np.asarray(nodes, np.int64)
    if len(nodes) == 0 or keep <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    w = np.asarray(scores, np.float64) / np.maximum(1.0, np.asarray(passage_counts, np.float64)[nodes])
    span = int(nodes.max()) + 1
    ukey, inv = np.unique(query * span + nodes, return_inverse=True)
    mean = np.bincount(inv, weights=w, minlength=len(ukey)) / np.bincount(inv, minlength=len(ukey))
    uq, un = ukey // span, ukey % span
    order = np.lexsort((un, -mean, uq))
    uq, un, mean = uq[order], un[order], mean[order]
    starts = np.flatnonzero(np.r_[True, uq[1:] != uq[:-1]])
    rank = np.arange(len(uq)) - np.repeat(starts, np.diff(np.r_[starts, len(uq)]))
    sel = rank < keep
    return uq[sel], un[sel], mean[sel]


def ner_seed_table(query: np.ndarray, nodes: np.ndarray, sims: np.ndarray, passage_counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeds of query NER entities linked to entity nodes (one row per link: ``query`` number,
    entity ``nodes``, cosine ``sims``): ``max(cos, 0) / passages of the entity``, the largest
    per (query, node), all kept. Returns (query, node, weight) sorted by (query, node)."""
    query, nodes = np.asarray(query, np.int64), np.asarray(nodes, np.int64)
    if len(nodes) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    w = np.maximum(np.asarray(sims, np.float64), 0.0) / np.maximum(1.0, np.asarray(passage_counts)[nodes])
    return max_merge((query, nodes, w))


def max_merge(*tables: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of (query, node, weight) seed tables keeping the largest weight per (query, node);
    sorted by (query, node); zero weights dropped."""
    q = np.concatenate([np.asarray(t[0], np.int64) for t in tables])
    n = np.concatenate([np.asarray(t[1], np.int64) for t in tables])
    w = np.concatenate([np.asarray(t[2], np.float64) for t in tables])
    if len(q) == 0:
        return q, n, w
    span = int(n.max()) + 1
    ukey, inv = np.unique(q * span + n, return_inverse=True)
    best = np.full(len(ukey), -np.inf)
    np.maximum.at(best, inv, w)
    keep = best > 0
    return (ukey // span)[keep], (ukey % span)[keep], best[keep]


def passage_seeds(dpr_scores: np.ndarray, weight: float) -> np.ndarray:
    """``weight x min-max(dense score)`` for every passage (columns: queries, if 2-D)."""
    return weight * min_max(dpr_scores)


def reset_vector(linked: Sequence[tuple[int, float]], dense: np.ndarray, passage_nodes: np.ndarray,
                 passage_counts: np.ndarray, num_nodes: int, keep: int, passage_weight: float | None
                 ) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """One query's reset vector (entity seeds + passage seeds) and its seeds, best first.
    ``passage_weight=None``: no passage seeds (``use_passage_nodes=False``)."""
    weights, seeds = entity_seeds(linked, passage_counts, num_nodes, keep)
    if passage_weight is not None and len(dense):
        weights[passage_nodes] += passage_seeds(dense[: len(passage_nodes)], passage_weight)
    return weights, seeds


def reset_matrix(query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, dense: np.ndarray,
                 cols: Rows, passage_nodes: np.ndarray, passage_counts: np.ndarray, num_nodes: int,
                 keep: int, passage_weight: float | None) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
    """Reset vectors of several queries at once, (num_nodes, len(cols)).

    ``query``/``nodes``/``scores``: one row per (fact, entity) link, ``query`` numbering
    the columns of ``dense`` (passage scores, (n_passages, b)); ``cols`` picks the queries
    to build. Column c equals :func:`reset_vector` of query ``cols[c]``. Returns the matrix and
    each column's seeds (node, weight), best first.
    """
    cols = np.asarray(cols, dtype=np.int64)
    pos = np.full(dense.shape[1] if dense.ndim == 2 else 0, -1, np.int64)
    pos[cols] = np.arange(len(cols))
    sel = pos[query] >= 0 if len(query) else np.zeros(0, bool)
    table = entity_seed_table(pos[query[sel]], nodes[sel], scores[sel], passage_counts, keep)
    return reset_matrix_from_seeds(table, dense, cols, passage_nodes, num_nodes, passage_weight)


def reset_matrix_from_seeds(table: tuple[np.ndarray, np.ndarray, np.ndarray], dense: np.ndarray,
                            cols: Rows, passage_nodes: np.ndarray, num_nodes: int,
                            passage_weight: float | None) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
    """Reset vectors from a seed table (column c, node, weight; columns number ``cols``) plus
    passage seeds from ``dense``'s columns ``cols``. Returns the matrix and each column's seeds."""
    cols = np.asarray(cols, dtype=np.int64)
    sq, sn, sw = table
    R = np.zeros((num_nodes, len(cols)))
    R[sn, sq] = sw
    seeds = table_seeds(table, len(cols))
    if passage_weight is not None and dense.shape[0] and len(cols):
        R[passage_nodes] += passage_seeds(dense[: len(passage_nodes)][:, cols], passage_weight)
    return R, seeds


def table_seeds(table: tuple[np.ndarray, np.ndarray, np.ndarray], ncols: int) -> list[list[tuple[int, float]]]:
    """Each of ``ncols`` columns' seeds (node, weight) from a seed table (column, node, weight), in
    the table's order."""
    seeds: list[list[tuple[int, float]]] = [[] for _ in range(ncols)]
    for c, n_, w_ in zip(table[0].tolist(), table[1].tolist(), table[2].tolist(), strict=False):
        seeds[c].append((n_, w_))
    return seeds


@runtime_checkable
class SeedSource(Protocol):
    """Extra seeds of the graph walk: nodes of its own, weighted per query.

    ``Retriever.search`` calls ``score`` once per call with every query's passage vector, then
    ``add_seeds`` once per block of queries with those scores' columns of the block and the
    block's reset matrix, whose columns ``cols`` (numbering the block's queries) it fills in place.
    """

    def score(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_items, n_queries) scores of the source's items for the queries."""

    def add_seeds(self, resets: np.ndarray, scores: np.ndarray, cols: Rows) -> None:
        """Add reset weights: ``resets[:, c]`` is the reset vector of query ``cols[c]``, whose
        item scores are ``scores[:, cols[c]]``."""
