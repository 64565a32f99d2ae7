"""HippoRAG 2 retrieval (spec section 2): pure scoring/seeding functions and the ``Retriever``.

The math is in small pure functions (``min_max``, ``top_k``, ``entity_seeds``,
``passage_seeds``, ``entity_seed_table``) so each can be tested and benchmarked alone.
``Retriever`` holds the matrices and the PPR kernel of one index version and runs queries in
batches: one matrix product scores all facts (and one all passages) for a block of queries,
entity and passage seeds for the whole block are built with array operations (no Python loop
over facts or entities), and one batched PPR run ranks the passages of every query that
reached the graph.

Determinism: a query's ranking and scores are bit-identical whether it runs alone or in any
batch. Fact scores: the matrix product (BLAS for a batch) only nominates candidates, with a
margin above its worst-case rounding error, and the candidates' scores, the minimum and the
maximum are recomputed exactly in float64 from the stored vectors. Dense passage scores are
computed one query at a time with NumPy's own dot loop (BLAS rounds differently depending on
the batch shape). The PPR kernel gives bit-identical columns whatever the batch.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hippo_engine.config import ConfigError, HippoConfig
from hippo_engine.index.graph import KIND_CONTEXT, GraphData
from hippo_engine.retrieve.ppr import DTYPES as PPR_DTYPES
from hippo_engine.retrieve.ppr import METHODS as PPR_METHODS
from hippo_engine.retrieve.ppr import PPRKernel
from hippo_engine.system import usable_cpus
from hippo_engine.text import facts_by_id, mdhash_id

logger = logging.getLogger(__name__)

Triple = tuple[str, str, str]

#: Rows of a stored matrix scored per BLAS call (a float16 or memory-mapped store is converted
#: to float32 one block at a time, so no full-size copy is made).
ROW_BLOCK = 32768
_EPS32 = 2.0 ** -24


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


def passage_seeds(dpr_scores: np.ndarray, weight: float) -> np.ndarray:
    """``weight x min-max(dense score)`` for every passage (columns: queries, if 2-D)."""
    return weight * min_max(dpr_scores)


def exact_dot(mat: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat[rows] . q`` in float64 (products of float32/float16 values are exact in float64;
    the sum runs in a fixed order), identical for identical inputs."""
    if len(rows) == 0:
        return np.zeros(0)
    a = np.asarray(mat[np.asarray(rows)], dtype=np.float64)
    return np.einsum("ij,j->i", a, np.asarray(q, dtype=np.float64))


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


def _blocks(n: int, size: int | None = None):
    size = size or ROW_BLOCK
    for s in range(0, n, size):
        yield s, min(n, s + size)


_POOL = None
#: threads of the scan pool; matrices with fewer rows than ``_SPLIT_MIN_ROWS`` are scanned
#: in the calling thread (the hand-off costs more than it saves)
_SCAN_THREADS = min(4, usable_cpus())
_SPLIT_MIN_ROWS = 8192


def _pool():
    """A small thread pool for scans of a stored matrix (NumPy releases the GIL in them)."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor
        _POOL = ThreadPoolExecutor(max_workers=_SCAN_THREADS,
                                   thread_name_prefix="hippo-scan")
    return _POOL


def _forget_pool() -> None:  # a forked child has none of the parent's threads
    global _POOL
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _row_scores(mat: np.ndarray, s: int, e: int, q32: np.ndarray) -> np.ndarray:
    """(b, e - s) float32 scores of rows s:e against the query rows ``q32``. One query: NumPy's
    own dot-product loop (each score computed the same way whatever the block or thread);
    several: one BLAS product."""
    blk = np.asarray(mat[s:e], dtype=np.float32)
    if q32.shape[0] == 1:
        return np.einsum("ij,j->i", blk, q32[0])[None, :]
    return q32 @ blk.T


def _blas_column(mat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat @ q`` (float32) for one query by BLAS, a block of rows at a time (a float16 or
    memory-mapped matrix is converted block by block). The rounding may depend on the BLAS
    kernel, so use it only where a margin covers the float32 error (``top_facts``)."""
    out = np.empty(len(mat), np.float32)
    for s, e in _blocks(len(mat)):
        out[s:e] = np.asarray(mat[s:e], dtype=np.float32) @ q
    return out


def dense_column(mat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``mat @ q`` (float32) for one query, computed row by row with NumPy's dot loop (blocks
    of rows on a few threads), so a query's scores never depend on what else is scored."""
    q32 = np.asarray(q, dtype=np.float32).reshape(1, -1)
    out = np.empty(len(mat), np.float32)

    def work(se):
        out[se[0]:se[1]] = _row_scores(mat, se[0], se[1], q32)[0]

    n = len(mat)
    # equal blocks, one per scan thread at least once the matrix is worth splitting (an
    # unbalanced split, e.g. 16384 + 649 rows, leaves one thread doing all the work)
    parts = max(-(-n // 16384), _SCAN_THREADS if n >= _SPLIT_MIN_ROWS else 1)
    size = -(-n // parts) if n else 1
    blocks = list(_blocks(n, size))
    if len(blocks) > 1:
        list(_pool().map(work, blocks))
    elif blocks:
        work(blocks[0])
    return out


# ------------------------------------------------------------------ the retriever
class Retriever:
    """Query-time view of one index version. Build it once; it is invalid after index/delete.

    ``fact_triples`` (fact id -> triple, e.g. ``Index.fact_triples``) saves deriving it from
    ``passage_triples`` (one hash per stored triple)."""

    def __init__(self, config: HippoConfig, graph: GraphData, passage_ids: np.ndarray, passage_mat: np.ndarray,
                 fact_ids: np.ndarray, fact_mat: np.ndarray, entity_ids: np.ndarray, entity_mat: np.ndarray,
                 entity_text: Callable[[str], str], passage_triples: Mapping[str, Sequence[Triple]],
                 fact_triples: Mapping[str, Triple] | None = None):
        self.config = config
        _check_config(config)
        self.graph = graph
        self.passage_mat, self.fact_mat, self.entity_mat = passage_mat, fact_mat, entity_mat
        self.entity_ids = entity_ids
        self.fact_ids = np.asarray(fact_ids, dtype=object)
        self.passage_nodes = self._nodes_of(passage_ids, entities=False, required=True)
        self.entity_nodes = self._nodes_of(entity_ids, entities=True, required=False)
        self.entity_text = entity_text
        self._passage_triples = passage_triples
        self._fact_map = fact_triples
        self._fact_row_nodes: dict[int, tuple[int, int]] = {}
        # passages per entity node = its context edges
        ctx = (graph.kinds & KIND_CONTEXT) > 0
        self.passage_counts = (np.bincount(graph.src[ctx], minlength=graph.num_nodes)
                               + np.bincount(graph.dst[ctx], minlength=graph.num_nodes)).astype(np.float64)
        self.kernel = PPRKernel.from_graph(graph, config.ppr_dtype) if config.ppr_backend == "power" else None
        self._fact_norm: float | None = None
        self._igraph = None

    def _nodes_of(self, ids: np.ndarray, entities: bool, required: bool) -> np.ndarray:
        g = self.graph
        ids = np.asarray(ids, dtype=object)
        start = 0 if entities else g.num_entities
        seg = g.node_ids[start:start + len(ids)]
        if len(seg) == len(ids) and (len(ids) == 0 or bool(np.all(seg == ids))):
            return np.arange(start, start + len(ids), dtype=np.int64)   # same sorted order
        idx = g.index_of
        if required:
            return np.fromiter((idx[p] for p in ids), np.int64, len(ids))
        return np.fromiter((idx.get(e, -1) for e in ids), np.int64, len(ids))

    # --- facts -------------------------------------------------------------------------------
    @property
    def fact_map(self) -> Mapping[str, Triple]:
        if self._fact_map is None:
            self._fact_map = facts_by_id(self._passage_triples)
        return self._fact_map

    def fact_triple(self, row: int) -> Triple:
        return tuple(self.fact_map[self.fact_ids[row]])

    @property
    def fact_triples(self) -> list[Triple]:
        """Triples of all fact rows (built on demand; not used on the query path)."""
        return [self.fact_triple(i) for i in range(len(self.fact_ids))]

    def fact_nodes_of(self, rows: Sequence[int]) -> np.ndarray:
        """(len(rows), 2) subject/object node of each fact row (-1: not in the graph)."""
        missing = [r for r in dict.fromkeys(int(r) for r in rows) if r not in self._fact_row_nodes]
        if missing:
            ents = []
            for r in missing:
                t = self.fact_triple(r)
                ents += [mdhash_id(t[0], "entity-"), mdhash_id(t[2], "entity-")]
            nodes = self.graph.node_index(ents, entities=True).reshape(-1, 2)
            for r, (a, b) in zip(missing, nodes.tolist(), strict=False):
                self._fact_row_nodes[r] = (a, b)
        return np.array([self._fact_row_nodes[int(r)] for r in rows], dtype=np.int64).reshape(-1, 2)

    @property
    def fact_nodes(self) -> np.ndarray:
        return self.fact_nodes_of(range(len(self.fact_ids)))

    def _fact_row_norm(self) -> float:
        if self._fact_norm is None:
            m = 0.0
            for s, e in _blocks(len(self.fact_mat)):
                blk = np.asarray(self.fact_mat[s:e], dtype=np.float32)
                m = max(m, float(np.einsum("ij,ij->i", blk, blk).max(initial=0.0)))
            self._fact_norm = float(np.sqrt(m))
        return self._fact_norm

    # --- scoring --------------------------------------------------------------------------
    def dense_scores(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_passages, n_queries) raw cosine scores (float32), one query at a time, so they are
        bit-identical whatever the batch (one pass over the passage matrix per query)."""
        q32 = np.atleast_2d(np.asarray(q_pass, dtype=np.float32))
        out = np.empty((len(self.passage_mat), q32.shape[0]), np.float32)
        for j in range(q32.shape[0]):
            out[:, j] = dense_column(self.passage_mat, q32[j])
        return out

    def top_facts(self, q_fact: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` best facts and their min-max normalised scores.

        Returns (rows, scores), each (n_queries, k') with k' = min(k, n_facts), best first,
        ties to the lower row; scores are exact: (s - min) / (max - min) over all facts with
        s the float64 dot product (1.0 for every fact when all scores are equal). One float32
        product per block of fact rows nominates candidates within a margin of its rounding
        error; only those are rescored exactly.
        """
        q = np.atleast_2d(np.asarray(q_fact, dtype=np.float32))
        b, n = q.shape[0], len(self.fact_mat)
        kk = min(k, n)
        if kk <= 0 or b == 0:
            return np.zeros((b, 0), np.int64), np.zeros((b, 0))
        # |float32 dot - exact| <= dim * 2^-24 * |row| * |q|; twice that as the margin
        qnorm = np.sqrt(np.einsum("ij,ij->i", q.astype(np.float64), q.astype(np.float64)))
        delta = 2.0 * (2.0 * q.shape[1] * _EPS32 * self._fact_row_norm() * qnorm + 1e-30)
        hi_c: list[list[np.ndarray]] = [[] for _ in range(b)]
        lo_c: list[list[np.ndarray]] = [[] for _ in range(b)]
        qidx = np.arange(b + 1)
        # one query: one BLAS pass over all rows; several: one BLAS product per block of rows
        # (either way the margin delta covers the float32 rounding, whatever the kernel)
        spans = [(0, n)] if b == 1 else list(_blocks(n))
        for s, e in spans:
            sc = _blas_column(self.fact_mat, q[0])[None, :] if b == 1 else _row_scores(self.fact_mat, s, e, q)
            m = e - s
            kb = min(kk, m)
            kth = np.partition(sc, m - kb, axis=1)[:, m - kb]   # per query, k-th best in the block
            for lst, mask in ((hi_c, sc >= (kth - delta).astype(np.float32)[:, None]),
                              (lo_c, sc <= (sc.min(axis=1) + delta).astype(np.float32)[:, None])):
                r, c = np.divmod(np.flatnonzero(mask), m)   # 1-D search: much faster than 2-D nonzero
                bounds = np.searchsorted(r, qidx)
                for j in range(b):
                    lst[j].append(s + c[bounds[j]:bounds[j + 1]])
        rows_out = np.zeros((b, kk), np.int64)
        scores_out = np.zeros((b, kk))
        for j in range(b):
            cand = np.unique(np.concatenate(hi_c[j]))
            ex = exact_dot(self.fact_mat, cand, q[j])
            order = np.lexsort((cand, -ex))
            best_rows, best = cand[order][:kk], ex[order][:kk]
            low = np.unique(np.concatenate(lo_c[j]))
            lo = float(exact_dot(self.fact_mat, low, q[j]).min())
            hi = float(best[0])
            rows_out[j] = best_rows
            scores_out[j] = (best - lo) / (hi - lo) if hi > lo else 1.0
        return rows_out, scores_out

    def fact_scores(self, q_fact: np.ndarray) -> np.ndarray:
        """(n_facts, n_queries) min-max normalised scores of every fact (not on the query path)."""
        q = np.atleast_2d(np.asarray(q_fact, dtype=np.float32))
        if len(self.fact_mat) == 0:
            return np.zeros((0, q.shape[0]))
        out = np.empty((len(self.fact_mat), q.shape[0]), np.float32)
        for s, e in _blocks(len(self.fact_mat)):
            out[s:e] = _row_scores(self.fact_mat, s, e, q).T
        return min_max(out, axis=0)

    def dense_rank(self, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        order = top_k(scores, k)
        return order, min_max(scores)[order]

    # --- linking ---------------------------------------------------------------------------
    def link_facts(self, kept_rows: Sequence[int], fact_scores) -> list[tuple[int, float]]:
        """(entity node, score) per subject/object of the kept facts; ``fact_scores`` maps a
        fact row to its score (an array over all facts, or a dict)."""
        linked = []
        nodes = self.fact_nodes_of(kept_rows)
        for r, pair in zip(kept_rows, nodes.tolist(), strict=False):
            for node in pair:
                if node >= 0:
                    linked.append((int(node), float(fact_scores[r])))
        return linked

    def link_entities(self, vectors: np.ndarray, per_vector: int) -> list[tuple[int, float]]:
        """Each vector linked to its ``per_vector`` nearest entity nodes by cosine."""
        if len(self.entity_mat) == 0 or vectors is None or len(vectors) == 0:
            return []
        v32 = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        sims = np.empty((len(self.entity_mat), v32.shape[0]), np.float32)
        for s, e in _blocks(len(self.entity_mat)):
            sims[s:e] = _row_scores(self.entity_mat, s, e, v32).T
        linked = []
        for j in range(sims.shape[1]):
            for r in top_k(sims[:, j], per_vector):
                if self.entity_nodes[r] >= 0:
                    linked.append((int(self.entity_nodes[r]), float(max(sims[r, j], 0.0))))
        return linked

    # --- graph search ------------------------------------------------------------------------
    def reset_vector(self, linked: Sequence[tuple[int, float]], dense: np.ndarray
                     ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """One query's reset vector (entity seeds + passage seeds) and its seeds, best first."""
        cfg = self.config
        weights, seeds = entity_seeds(linked, self.passage_counts, self.graph.num_nodes, cfg.linking_top_k)
        if cfg.use_passage_nodes and len(dense):
            weights[self.passage_nodes] += passage_seeds(dense[: len(self.passage_nodes)], cfg.passage_node_weight)
        return weights, seeds

    def reset_matrix(self, query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, dense: np.ndarray,
                     cols: Sequence[int]) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
        """Reset vectors of several queries at once, (n_nodes, len(cols)).

        ``query``/``nodes``/``scores``: one row per (fact, entity) link, ``query`` numbering
        the columns of ``dense`` (passage scores, (n_passages, b)); ``cols`` picks the queries
        to build. Returns the matrix and each column's seeds (node, weight), best first.
        """
        cfg = self.config
        cols = np.asarray(cols, dtype=np.int64)
        pos = np.full(dense.shape[1] if dense.ndim == 2 else 0, -1, np.int64)
        pos[cols] = np.arange(len(cols))
        R = np.zeros((self.graph.num_nodes, len(cols)))
        sel = pos[query] >= 0 if len(query) else np.zeros(0, bool)
        sq, sn, sw = entity_seed_table(pos[query[sel]], nodes[sel], scores[sel], self.passage_counts,
                                       cfg.linking_top_k)
        R[sn, sq] = sw
        seeds: list[list[tuple[int, float]]] = [[] for _ in cols]
        for c, n_, w_ in zip(sq.tolist(), sn.tolist(), sw.tolist(), strict=False):
            seeds[c].append((n_, w_))
        if cfg.use_passage_nodes and dense.shape[0] and len(cols):
            R[self.passage_nodes] += passage_seeds(dense[: len(self.passage_nodes)][:, cols], cfg.passage_node_weight)
        return R, seeds

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
            probs = self.kernel.run(resets, cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, cfg.ppr_method,
                                    cfg.ppr_block_size)
        return probs[self.passage_nodes]

    # --- the whole query path ----------------------------------------------------------------
    def search(self, queries: Sequence[str], q_fact: np.ndarray, q_pass: np.ndarray, k: int,
               filter_fn: FilterFn | None = None, ner_vectors: Sequence[np.ndarray] | None = None
               ) -> tuple[list[RawResult], dict]:
        """Rank passages for a batch of encoded queries (spec section 2).

        ``q_fact``/``q_pass``: (b, dim) query vectors for fact and passage matching.
        ``filter_fn(question, candidates) -> kept`` is the recognition filter (None: keep all
        candidates). ``ner_vectors[j]``: embeddings of query j's NER entities (``linking="ner"``).
        Queries run in blocks of ``query_batch_size``. Returns the results and a timing
        breakdown in seconds.
        """
        tim = {"scoring": 0.0, "filter": 0.0, "seeding": 0.0, "ppr": 0.0}
        q_fact = np.atleast_2d(np.asarray(q_fact))
        q_pass = np.atleast_2d(np.asarray(q_pass))
        results: list[RawResult] = []
        bs = self.config.query_batch_size
        if type(self).dense_scores is not Retriever.dense_scores:
            bs = max(1, len(queries))   # a subclass may keep per-call state for the whole batch
        t0 = time.perf_counter()
        for s in range(0, len(queries), bs):
            e = min(len(queries), s + bs)
            results += self._search_block(list(queries[s:e]), q_fact[s:e], q_pass[s:e], k, filter_fn,
                                          None if ner_vectors is None else list(ner_vectors[s:e]), tim)
        tim["total"] = time.perf_counter() - t0
        return results, tim

    def _search_block(self, queries, q_fact, q_pass, k, filter_fn, ner_vectors, tim) -> list[RawResult]:
        cfg = self.config
        b = len(queries)
        t0 = time.perf_counter()
        dense = self.dense_scores(q_pass)
        cand_rows = cand_scores = None
        if cfg.linking == "fact":
            cand_rows, cand_scores = self.top_facts(q_fact, cfg.linking_top_k)
        tim["scoring"] += time.perf_counter() - t0
        t1 = time.perf_counter()
        filter_before = tim["filter"]
        results = [RawResult() for _ in range(b)]
        # links: one row per (query, fact or vector, entity)
        lq, ln, ls = [], [], []
        if cfg.linking == "fact":
            kept = cand_rows.copy()
            kept_mask = np.ones(kept.shape, bool)
            flat = np.unique(cand_rows)
            triples = {int(r): self.fact_triple(int(r)) for r in flat.tolist()}
            for j, q in enumerate(queries):
                res = results[j]
                cands = cand_rows[j].tolist()
                res.candidate_facts = [triples[r] for r in cands]
                if filter_fn is not None and cands:
                    tf = time.perf_counter()
                    keep = set(filter_fn(q, res.candidate_facts))
                    tim["filter"] += time.perf_counter() - tf
                    kept_mask[j] = [triples[r] in keep for r in cands]
                res.kept_facts = [triples[r] for r, m in zip(cands, kept_mask[j], strict=False) if m]
            qq, cc = np.nonzero(kept_mask)
            rows = kept[qq, cc]
            nodes = self.fact_nodes_of(rows) if len(rows) else np.zeros((0, 2), np.int64)
            lq = np.repeat(qq, 2)
            ln = nodes.reshape(-1)
            ls = np.repeat(cand_scores[qq, cc], 2)
            ok = ln >= 0
            lq, ln, ls = lq[ok], ln[ok], ls[ok]
        else:
            for j in range(b):
                if cfg.linking == "query":
                    linked = self.link_entities(q_fact[j:j + 1], cfg.linking_top_k)
                else:
                    vecs = ner_vectors[j] if ner_vectors is not None else None
                    linked = self.link_entities(vecs, 1) if vecs is not None and len(vecs) else []
                lq += [j] * len(linked)
                ln += [n for n, _ in linked]
                ls += [w for _, w in linked]
            lq, ln, ls = np.array(lq, np.int64), np.array(ln, np.int64), np.array(ls, np.float64)
        has_link = np.zeros(b, bool)
        has_link[lq] = True
        graph_cols = np.flatnonzero(has_link)
        for j in np.flatnonzero(~has_link).tolist():
            results[j].used_fallback = True
            results[j].order, results[j].scores = self.dense_rank(dense[:, j], k)
        ids = self.graph.node_ids
        if len(graph_cols) and type(self).reset_vector is Retriever.reset_vector:
            R, seeds = self.reset_matrix(lq, ln, ls, dense, graph_cols)
        elif len(graph_cols):  # a subclass adds its own seeds: one query at a time
            cols, seeds = [], []
            for j in graph_cols.tolist():
                m = lq == j
                reset, sd = self.reset_vector(list(zip(ln[m].tolist(), ls[m].tolist(), strict=False)), dense[:, j])
                cols.append(reset)
                seeds.append(sd)
            R = np.column_stack(cols)
        for c, j in enumerate(graph_cols.tolist()):
            results[j].seed_entities = [(self.entity_text(ids[n]), float(w)) for n, w in seeds[c]]
        t2 = time.perf_counter()
        tim["seeding"] += t2 - t1 - (tim["filter"] - filter_before)
        if len(graph_cols):
            probs = self.run_ppr(R)
            for c, j in enumerate(graph_cols.tolist()):
                order = top_k(probs[:, c], k)
                results[j].order, results[j].scores = order, probs[order, c]
        tim["ppr"] += time.perf_counter() - t2
        return results


def _check_config(cfg: HippoConfig) -> None:
    """Validate the performance fields this module reads (their home is HippoConfig)."""
    if getattr(cfg, "ppr_dtype", "float32") == "float32" and cfg.ppr_backend == "power" and cfg.ppr_tol < 1e-7:
        logger.warning("ppr_tol=%g is below what float32 PPR can reach (about 1e-7): every query will run "
                       "ppr_max_iter=%d steps; use ppr_dtype='float64' for tight tolerances",
                       cfg.ppr_tol, cfg.ppr_max_iter)
    if getattr(cfg, "ppr_dtype", "float32") not in PPR_DTYPES:
        raise ConfigError(f"ppr_dtype must be one of {PPR_DTYPES}, got {cfg.ppr_dtype!r}")
    if getattr(cfg, "ppr_method", "chebyshev") not in PPR_METHODS:
        raise ConfigError(f"ppr_method must be one of {PPR_METHODS}, got {cfg.ppr_method!r}")
    for name in ("ppr_block_size", "query_batch_size"):
        v = getattr(cfg, name)
        if v is None and name == "ppr_block_size":
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ConfigError(f"{name} must be a positive integer{' or None' if name == 'ppr_block_size' else ''}, "
                              f"got {v!r}")
