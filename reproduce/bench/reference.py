"""The reference approach the speed benchmark compares with: HippoRAG 2's query path (igraph
PRPACK per query, its per-query Python loops) and its all-vs-all synonymy kNN."""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from hippo_engine.config import HippoConfig
from hippo_engine.ids import entity_id
from hippo_engine.index.graph import KIND_CONTEXT
from hippo_engine.index.synonymy import _MARGIN, exact_scores
from hippo_engine.retrieve.retriever import Retriever, min_max


def reference_knn(mat: np.ndarray, threshold: float, rows: np.ndarray | None = None,
                  block: int | None = None) -> int:
    """The reference's synonymy search: every entity (``rows``) against all, no symmetry used.
    Returns the number of pairs found (scores are checked exactly as ours are)."""
    rows = np.arange(len(mat)) if rows is None else rows
    block = block or int(max(256, min(4096, (1 << 27) // max(1, len(mat)))))  # <= 512 MB of scores
    found = 0
    for s in range(0, len(rows), block):
        q = rows[s:s + block]
        sims = mat[q] @ mat.T
        qi, ki = np.nonzero(sims >= threshold - _MARGIN)
        qi = q[qi]
        keep = qi != ki
        found += int((exact_scores(mat, qi[keep], ki[keep]) >= threshold).sum())
    return found


def igraph_single_thread():
    """igraph's PRPACK runs on an OpenMP pool; on a loaded 2-core machine its threads spin and
    a call takes 5-50x longer (measured: 170 ms instead of 3.4 ms at P=1k). The reference is
    timed at its best: OpenMP limited to one thread (BLAS threads are not affected)."""
    return threadpool_limits(limits=1, user_api="openmp")


class ReferenceRetriever:
    """HippoRAG 2's query path as the reference code runs it, one query at a time: NumPy scores,
    Python loops over the linked facts and entities, an igraph PRPACK call per query."""

    def __init__(self, r: Retriever, cfg: HippoConfig):
        self.r, self.cfg = r, cfg
        g = r.graph
        self.g = g.to_igraph()
        self.n = g.num_nodes
        self.triples = None
        ne = g.num_entities
        self.ent_node = {e: i for i, e in enumerate(g.node_ids[:ne])}
        self.passage_nodes = r.passage_nodes
        self.counts = r.passage_counts

    def search(self, q: np.ndarray) -> np.ndarray:
        cfg, r = self.cfg, self.r
        fs = min_max(np.asarray(r.fact_mat @ q, dtype=np.float64))
        top = np.argsort(fs)[::-1][: cfg.linking_top_k]
        w_sum: dict[int, float] = {}
        w_cnt: dict[int, int] = {}
        for row in top:
            t = r.fact_triple(int(row))
            for phrase in (t[0], t[2]):
                node = self.ent_node.get(entity_id(phrase))
                if node is None:
                    continue
                w = fs[row] / max(1.0, self.counts[node])
                w_sum[node] = w_sum.get(node, 0.0) + w
                w_cnt[node] = w_cnt.get(node, 0) + 1
        reset = np.zeros(self.n)
        for node, w in sorted(w_sum.items(), key=lambda kv: -kv[1] / w_cnt[kv[0]])[: cfg.linking_top_k]:
            reset[node] = w / w_cnt[node]
        dense = min_max(np.asarray(r.passage_mat @ q, dtype=np.float64))
        reset[self.passage_nodes] += cfg.passage_node_weight * dense
        ppr = np.array(self.g.personalized_pagerank(vertices=range(self.n), damping=cfg.damping, directed=False,
                                                    weights="weight", reset=reset.tolist(), implementation="prpack"))
        return np.argsort(ppr[self.passage_nodes])[::-1][: cfg.retrieval_top_k]

    def ppr(self, reset: np.ndarray) -> np.ndarray:
        return np.array(self.g.personalized_pagerank(vertices=range(self.n), damping=self.cfg.damping,
                                                     directed=False, weights="weight", reset=reset.tolist(),
                                                     implementation="prpack"))


class HippoRAG2Loop(ReferenceRetriever):
    """The reference's query path step by step as HippoRAG 2's ``retrieve`` runs it (its
    ``get_fact_scores``, ``rerank_facts`` without the LLM filter, ``graph_search_with_fact_entities``,
    ``get_top_k_weights``, ``dense_passage_retrieval`` and ``run_ppr``), including its per-query
    Python work over all nodes and passages (vertex-name lists, a loop over every node to zero
    non-selected phrases, a loop over every passage, ``sum()`` over the reset vector)."""

    def __init__(self, r: Retriever, cfg: HippoConfig):
        super().__init__(r, cfg)
        g = r.graph
        self.node_name_to_vertex_idx = {k: i for i, k in enumerate(g.node_ids)}
        ctx = (g.kinds & KIND_CONTEXT) > 0
        self.ent_node_to_chunk_ids: dict[str, set] = {}
        for a, b in zip(g.src[ctx].tolist(), g.dst[ctx].tolist(), strict=False):
            self.ent_node_to_chunk_ids.setdefault(g.node_ids[a], set()).add(g.node_ids[b])
        self.passage_node_keys = list(g.node_ids[r.passage_nodes])
        self.passage_node_idxs = r.passage_nodes.tolist()
        self.passage_text = {}

    def get_row(self, key: str) -> dict:
        return {"hash_id": key, "content": self.passage_text.get(key, key)}

    def search(self, q: np.ndarray) -> np.ndarray:
        cfg, r = self.cfg, self.r
        k = cfg.linking_top_k
        query_fact_scores = min_max(np.dot(r.fact_mat, q.T))
        cand = np.argsort(query_fact_scores)[-k:][::-1].tolist()
        top_k_facts = [r.fact_triple(i) for i in cand]
        phrase_weights = np.zeros(len(self.g.vs["name"]))
        passage_weights = np.zeros(len(self.g.vs["name"]))
        number_of_occurs = np.zeros(len(self.g.vs["name"]))
        phrases_and_ids = set()
        for rank, f in enumerate(top_k_facts):
            fact_score = query_fact_scores[cand[rank]]
            for phrase in (f[0].lower(), f[2].lower()):
                key = entity_id(phrase)
                pid = self.node_name_to_vertex_idx.get(key)
                if pid is not None:
                    w = fact_score
                    if len(self.ent_node_to_chunk_ids.get(key, set())) > 0:
                        w /= len(self.ent_node_to_chunk_ids[key])
                    phrase_weights[pid] += w
                    number_of_occurs[pid] += 1
                phrases_and_ids.add((phrase, pid))
        with np.errstate(invalid="ignore", divide="ignore"):
            phrase_weights /= number_of_occurs
        phrase_scores: dict = {}
        for phrase, pid in phrases_and_ids:
            phrase_scores.setdefault(phrase, []).append(phrase_weights[pid])
        linking_score_map = {p: float(np.mean(v)) for p, v in phrase_scores.items()}
        # get_top_k_weights: a Python loop over every node
        linking_score_map = dict(sorted(linking_score_map.items(), key=lambda x: x[1], reverse=True)[:k])
        top_keys = {entity_id(p) for p in linking_score_map}
        for key in self.node_name_to_vertex_idx:
            if key not in top_keys:
                phrase_weights[self.node_name_to_vertex_idx[key]] = 0.0
        # dense_passage_retrieval, then a Python loop over every passage
        dpr = min_max(np.dot(r.passage_mat, q.T))
        ids = np.argsort(dpr)[::-1]
        norm = min_max(dpr[ids.tolist()])
        for i, did in enumerate(ids.tolist()):
            key = self.passage_node_keys[did]
            score = norm[i]
            passage_weights[self.node_name_to_vertex_idx[key]] = score * cfg.passage_node_weight
            linking_score_map[self.get_row(key)["content"]] = score * cfg.passage_node_weight
        node_weights = phrase_weights + passage_weights
        if len(linking_score_map) > 30:
            linking_score_map = dict(sorted(linking_score_map.items(), key=lambda x: x[1], reverse=True)[:30])
        assert sum(node_weights) > 0
        reset = np.where(np.isnan(node_weights) | (node_weights < 0), 0, node_weights)
        pr = self.g.personalized_pagerank(vertices=range(len(self.node_name_to_vertex_idx)), damping=cfg.damping,
                                          directed=False, weights="weight", reset=reset, implementation="prpack")
        doc_scores = np.array([pr[idx] for idx in self.passage_node_idxs])
        return np.argsort(doc_scores)[::-1][: cfg.retrieval_top_k]

