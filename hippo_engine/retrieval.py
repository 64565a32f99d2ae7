"""HippoRAG 2 retrieval (spec section 2): pure scoring/seeding functions and the ``Retriever``.

The math is in small pure functions (``min_max``, ``top_k``, ``entity_seeds``,
``passage_seeds``) so each can be tested and benchmarked alone. ``Retriever`` holds the
matrices and the PPR transition matrix of one index version and runs queries in batches:
one matrix product scores all facts (and one all passages) for all queries, and one batched
power iteration runs PPR for every query that reached the graph.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from .config import HippoConfig
from .graph import GraphData
from .ppr import personalized_pagerank, transition_matrix
from .text import fact_text, mdhash_id

logger = logging.getLogger(__name__)

Triple = tuple[str, str, str]


# ------------------------------------------------------------------ pure functions
def min_max(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Min-max normalise along ``axis``; a constant slice becomes all ones (as the reference)."""
    x = np.asarray(x, dtype=np.float64)
    lo = x.min(axis=axis, keepdims=True)
    rng = x.max(axis=axis, keepdims=True) - lo
    safe = np.where(rng > 0, rng, 1.0)
    return np.where(rng > 0, (x - lo) / safe, 1.0)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first; ties go to the lower index."""
    scores = np.asarray(scores)
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < len(scores):
        part = np.argpartition(-scores, k - 1)[:k]
        thresh = scores[part].min()
        cand = np.flatnonzero(scores >= thresh)  # include every tie at the cut
    else:
        cand = np.arange(len(scores))
    order = np.lexsort((cand, -scores[cand]))
    return cand[order][:k]


def entity_seeds(linked: Sequence[tuple[int, float]], passage_counts: np.ndarray, num_nodes: int,
                 keep: int) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Seed weights of entity nodes.

    ``linked``: (node index, score) pairs, one per (fact, entity) link. Each link weighs
    ``score / passage_counts[node]``; an entity linked several times gets the mean; only the
    ``keep`` heaviest entities (ties: lower index) stay. Returns (weights over all nodes,
    [(node, weight)] best first).
    """
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for node, score in linked:
        w = score / max(1.0, float(passage_counts[node]))
        sums[node] = sums.get(node, 0.0) + w
        counts[node] = counts.get(node, 0) + 1
    items = sorted(((n, sums[n] / counts[n]) for n in sums), key=lambda t: (-t[1], t[0]))[:keep]
    weights = np.zeros(num_nodes)
    for n, w in items:
        weights[n] = w
    return weights, items


def passage_seeds(dpr_scores: np.ndarray, weight: float) -> np.ndarray:
    """``weight x min-max(dense score)`` for every passage."""
    return weight * min_max(dpr_scores)


@dataclass
class RawResult:
    """One query's ranking as passage store rows, plus what the graph search used."""

    order: np.ndarray = None     # passage rows, best first (top k)
    scores: np.ndarray = None
    candidate_facts: list = field(default_factory=list)
    kept_facts: list = field(default_factory=list)
    seed_entities: list = field(default_factory=list)   # [(phrase, weight)]
    used_fallback: bool = False


FilterFn = Callable[[str, list], list]


# ------------------------------------------------------------------ the retriever
class Retriever:
    """Query-time view of one index version. Build it once; it is invalid after index/delete."""

    def __init__(self, config: HippoConfig, graph: GraphData, passage_ids: np.ndarray, passage_mat: np.ndarray,
                 fact_ids: np.ndarray, fact_mat: np.ndarray, entity_ids: np.ndarray, entity_mat: np.ndarray,
                 entity_text: Callable[[str], str], passage_triples: dict[str, list[Triple]]):
        self.config = config
        self.graph = graph
        self.passage_mat, self.fact_mat, self.entity_mat = passage_mat, fact_mat, entity_mat
        self.entity_ids = entity_ids
        idx = graph.index_of
        # passages: store row -> graph node
        self.passage_nodes = np.fromiter((idx[p] for p in passage_ids), np.int64, len(passage_ids))
        # facts: store row -> (triple, subject node, object node)
        fact_of: dict[str, Triple] = {}
        for ts in passage_triples.values():
            for t in ts:
                fact_of.setdefault(mdhash_id(fact_text(t), "fact-"), t)
        self.fact_triples = [fact_of[f] for f in fact_ids]
        self.fact_nodes = np.array([[idx.get(mdhash_id(t[0], "entity-"), -1), idx.get(mdhash_id(t[2], "entity-"), -1)]
                                    for t in self.fact_triples], dtype=np.int64).reshape(-1, 2)
        self.entity_nodes = np.fromiter((idx[e] for e in entity_ids), np.int64, len(entity_ids))
        self.entity_text = entity_text
        # passages per entity node = its context edges
        from .graph import KIND_CONTEXT
        ctx = (graph.kinds & KIND_CONTEXT) > 0
        counts = np.zeros(graph.num_nodes)
        np.add.at(counts, graph.src[ctx], 1)
        np.add.at(counts, graph.dst[ctx], 1)
        self.passage_counts = counts
        self.P, self.dangling = transition_matrix(graph.num_nodes, graph.src, graph.dst, graph.weight)
        self._igraph = None

    # --- scoring --------------------------------------------------------------------------
    def fact_scores(self, q_fact: np.ndarray) -> np.ndarray:
        """(n_facts, n_queries) min-max normalised fact scores."""
        if len(self.fact_mat) == 0:
            return np.zeros((0, q_fact.shape[0]))
        return min_max(self.fact_mat @ q_fact.T, axis=0)

    def dense_scores(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_passages, n_queries) raw cosine scores."""
        return self.passage_mat @ q_pass.T

    def dense_rank(self, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        order = top_k(scores, k)
        return order, min_max(scores)[order]

    # --- linking ---------------------------------------------------------------------------
    def link_facts(self, kept_rows: Sequence[int], fact_scores: np.ndarray) -> list[tuple[int, float]]:
        linked = []
        for r in kept_rows:
            for node in self.fact_nodes[r]:
                if node >= 0:
                    linked.append((int(node), float(fact_scores[r])))
        return linked

    def link_entities(self, vectors: np.ndarray, per_vector: int) -> list[tuple[int, float]]:
        """Each vector linked to its ``per_vector`` nearest entity nodes by cosine."""
        if len(self.entity_mat) == 0 or len(vectors) == 0:
            return []
        sims = self.entity_mat @ vectors.T
        linked = []
        for j in range(sims.shape[1]):
            for r in top_k(sims[:, j], per_vector):
                linked.append((int(self.entity_nodes[r]), float(max(sims[r, j], 0.0))))
        return linked

    # --- graph search ------------------------------------------------------------------------
    def reset_vector(self, linked: Sequence[tuple[int, float]], dense: np.ndarray
                     ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        cfg = self.config
        weights, seeds = entity_seeds(linked, self.passage_counts, self.graph.num_nodes, cfg.linking_top_k)
        if cfg.use_passage_nodes and len(dense):
            weights[self.passage_nodes] += passage_seeds(dense, cfg.passage_node_weight)
        return weights, seeds

    def run_ppr(self, resets: np.ndarray) -> np.ndarray:
        """PPR for reset columns (n_nodes, b); returns passage scores (n_passages, b) by store row."""
        cfg = self.config
        if cfg.ppr_backend == "igraph":
            if self._igraph is None:
                self._igraph = self.graph.to_igraph()
            cols = [np.array(self._igraph.personalized_pagerank(
                damping=cfg.damping, directed=False, weights="weight", reset=resets[:, j].tolist(),
                implementation="prpack")) for j in range(resets.shape[1])]
            probs = np.column_stack(cols) if cols else np.zeros((self.graph.num_nodes, 0))
        else:
            probs = personalized_pagerank(self.P, self.dangling, resets, cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter)
        return probs[self.passage_nodes]

    # --- the whole query path ----------------------------------------------------------------
    def search(self, queries: Sequence[str], q_fact: np.ndarray, q_pass: np.ndarray, k: int,
               filter_fn: Optional[FilterFn] = None, ner_vectors: Optional[Sequence[np.ndarray]] = None
               ) -> tuple[list[RawResult], dict]:
        """Rank passages for a batch of encoded queries (spec section 2).

        ``q_fact``/``q_pass``: (b, dim) query vectors for fact and passage matching.
        ``filter_fn(question, candidates) -> kept`` is the recognition filter (None: keep all
        candidates). ``ner_vectors[j]``: embeddings of query j's NER entities (``linking="ner"``).
        Returns the results and a timing breakdown in seconds.
        """
        cfg = self.config
        t0 = time.perf_counter()
        dense = self.dense_scores(q_pass)
        fact_scores = self.fact_scores(q_fact) if cfg.linking == "fact" else None
        t_score = time.perf_counter() - t0
        t_filter = 0.0
        results: list[RawResult] = []
        resets, cols = [], []
        ids = self.graph.node_ids
        for j, q in enumerate(queries):
            res = RawResult()
            if cfg.linking == "fact":
                cand = [int(i) for i in top_k(fact_scores[:, j], cfg.linking_top_k)]
                res.candidate_facts = [self.fact_triples[i] for i in cand]
                kept_rows = cand
                if filter_fn is not None and cand:
                    tf = time.perf_counter()
                    kept = set(filter_fn(q, res.candidate_facts))
                    t_filter += time.perf_counter() - tf
                    kept_rows = [i for i in cand if self.fact_triples[i] in kept]
                res.kept_facts = [self.fact_triples[i] for i in kept_rows]
                linked = self.link_facts(kept_rows, fact_scores[:, j])
            elif cfg.linking == "query":
                linked = self.link_entities(q_fact[j:j + 1], cfg.linking_top_k)
            else:
                vecs = ner_vectors[j] if ner_vectors is not None else None
                linked = self.link_entities(vecs, 1) if vecs is not None and len(vecs) else []
            if not linked:
                res.used_fallback = True
                res.order, res.scores = self.dense_rank(dense[:, j], k)
            else:
                reset, seeds = self.reset_vector(linked, dense[:, j])
                res.seed_entities = [(self.entity_text(ids[n]), float(w)) for n, w in seeds]
                resets.append(reset)
                cols.append(j)
            results.append(res)
        t1 = time.perf_counter()
        if resets:
            probs = self.run_ppr(np.column_stack(resets))
            for c, j in enumerate(cols):
                order = top_k(probs[:, c], k)
                results[j].order, results[j].scores = order, probs[order, c]
        t2 = time.perf_counter()
        timings = {"scoring": t_score, "filter": t_filter, "seeding": t1 - t0 - t_score - t_filter,
                   "ppr": t2 - t1, "total": t2 - t0}
        return results, timings
