"""Explanations of HippoRAG 2 rankings: :func:`explain_result` turns one query's ``RawResult``
(searched with ``explain=True``, so it keeps its reset vector, dense and PPR scores) into an
:class:`~hippo_engine.datatypes.Explanation` per chosen passage.

The numbers come from :mod:`.explain.math` on the retriever's own graph (the operator of
:class:`~.ppr.kernel.PPRKernel`, in float64): each seed's term of the passage's score by one backward solve
per query (all chosen passages as columns of one block), the dense prior as the passage seeds'
total term, the check |sum - score| (within the PPR solver's ``ppr_tol``, see the README), and each
top seed's most probable walk with the text of the facts or sentences on its edges. Nothing here
changes a ranking. Per retriever (one index version) the operator and an entity -> facts map are
built once, on first use (on a lazy PostgreSQL reader only the facts it has fetched are known).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from hippo_engine.datatypes import ExplainedPath, Explanation, Hyperedge, PathEdge, SeedTerm
from hippo_engine.ids import entity_id
from hippo_engine.index.graph import KIND_CONTEXT, KIND_FACT, KIND_SYNONYMY
from hippo_engine.retrieve.explain.fusion import FusedTerms
from hippo_engine.retrieve.explain.math import Operator, contributions, sanitise_reset
from hippo_engine.retrieve.explain.walks import Walk, WalkCosts, WalkSearch
from hippo_engine.retrieve.retriever import RawResult, Retriever
from hippo_engine.retrieve.scoring import top_k

#: walks shown per passage
TOP_PATHS = 3
#: fact or sentence texts shown per edge
TEXTS_PER_EDGE = 2
KIND_NAMES = ((KIND_FACT, "fact"), (KIND_CONTEXT, "context"), (KIND_SYNONYMY, "synonymy"))


class GraphView:
    """What explanations read of one retriever's graph: the operator, edge kinds, node names and
    the facts of each entity node (built on first use)."""

    def __init__(self, r: Retriever):
        g = r.graph
        self.r, self.graph = r, g
        self.op = Operator.from_edges(g.num_nodes, g.src, g.dst, g.weight)
        self.costs = WalkCosts.of(self.op, r.ppr.damping)
        self.op.W.sort_indices()
        self.edge_at = _edge_ids(self.op.W, np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64))
        self.is_passage = np.zeros(g.num_nodes, bool)
        self.is_passage[r.passage_nodes] = True
        self._row_of_node = {int(n): i for i, n in enumerate(r.passage_nodes.tolist())}
        self._facts_of: dict[int, list[str]] | None = None
        self._names: dict[int, str] = {}

    def facts_of(self, node: int) -> list[str]:
        """Fact ids whose entities include entity node ``node``."""
        if self._facts_of is None:
            facts = self.r.facts
            fids = facts.known_ids()
            ents = [list(facts.entities(f)) for f in fids]
            nodes = self.graph.node_index([entity_id(e) for es in ents for e in es], entities=True).tolist()
            self._facts_of = {}
            pos = 0
            for f, es in zip(fids, ents, strict=True):
                for n in nodes[pos:pos + len(es)]:
                    if n >= 0:
                        self._facts_of.setdefault(n, []).append(f)
                pos += len(es)
        return self._facts_of.get(node, [])

    def names(self, nodes: Sequence[int]) -> list[str]:
        """Entity names, ``passage <title>`` for passages, the node id otherwise."""
        g, r = self.graph, self.r
        new = [n for n in dict.fromkeys(nodes) if n not in self._names]
        ents = [n for n in new if n < g.num_entities]
        for n, name in zip(ents, r.entity_texts([str(g.node_ids[n]) for n in ents]), strict=True):
            self._names[n] = name
        pas = [n for n in new if self.is_passage[n]]
        for n, text in zip(pas, self.passage_texts(pas), strict=True):
            self._names[n] = "passage: " + text.split("\n", 1)[0][:80]
        for n in new:
            self._names.setdefault(n, str(g.node_ids[n]))
        return [self._names[n] for n in nodes]

    def passage_texts(self, nodes: Sequence[int]) -> list[str]:
        store = self.r.views.passages.store
        return store.texts([str(store.ids[self._row_of_node[n]]) for n in nodes])

    def step(self, a: int, b: int) -> tuple[str, float]:
        """The kind of edge a - b (its graph edge's bits, "edge" when none) and the probability
        d W[a, b] / D[a] that the walk at a steps to b (one binary search in row a of W)."""
        W = self.op.W
        lo, hi = int(W.indptr[a]), int(W.indptr[a + 1])
        k = lo + int(np.searchsorted(W.indices[lo:hi], b))
        if not (k < hi and int(W.indices[k]) == b):
            return "edge", 0.0
        bits = int(self.graph.kinds[self.edge_at[k]])
        kind = "+".join(name for bit, name in KIND_NAMES if bits & bit) or "edge"
        return kind, self.r.ppr.damping * float(W.data[k]) / float(self.op.strength[a])

    def edge_kind(self, a: int, b: int) -> str:
        return self.step(a, b)[0]

    def fact_text(self, fid: str) -> str:
        f = self.r.facts.fact(fid)
        return f.text if isinstance(f, Hyperedge) else " | ".join(f)

    def edge_texts(self, a: int, b: int, kind: str, texts: dict[int, str] | None = None) -> list[str]:
        """The facts or sentences on edge a - b: facts of both entities (a fact edge), or the
        entity's facts found in the passage (a context edge; ``texts``: the lower-cased passage
        texts already read, by node, filled here)."""
        if "fact" in kind and not (self.is_passage[a] or self.is_passage[b]):
            common = set(self.facts_of(b))
            return [self.fact_text(f) for f in self.facts_of(a) if f in common][:TEXTS_PER_EDGE]
        if "context" in kind:
            ent, pas = (a, b) if self.is_passage[b] else (b, a)
            texts = {} if texts is None else texts
            if pas not in texts:
                texts[pas] = self.passage_texts([pas])[0].lower()
            text = texts[pas]
            out = []
            for f in self.facts_of(ent):
                fact = self.r.facts.fact(f)
                parts = [fact.text] if isinstance(fact, Hyperedge) else [fact[0], fact[2]]
                if all(p.lower() in text for p in parts):
                    out.append(self.fact_text(f))
                if len(out) >= TEXTS_PER_EDGE:
                    break
            return out
        return []

    def path(self, walk: Walk, weight: float, scale: float, score: float, seed_term: float,
             texts: dict[int, str] | None = None) -> ExplainedPath:
        """The walk as an :class:`ExplainedPath` (``texts``: see :meth:`edge_texts`)."""
        nodes = walk.nodes
        names = self.names(nodes)
        edges = []
        for i, (a, b) in enumerate(zip(nodes, nodes[1:], strict=False)):
            kind, prob = self.step(a, b)
            edges.append(PathEdge(names[i], names[i + 1], kind, prob, self.edge_texts(a, b, kind, texts)))
        part = scale * weight * walk.prob
        return ExplainedPath(names, edges, part / score if score > 0 else 0.0,
                             part / seed_term if seed_term > 0 else 0.0, walk.prob)


def _edge_ids(W: sp.csr_matrix, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """For each stored entry of W (built by :meth:`Operator.from_edges` from these edges, sorted
    indices) the graph edge it comes from (of repeated pairs, the last)."""
    e = np.flatnonzero(src != dst)
    rows, cols = np.concatenate([src[e], dst[e]]), np.concatenate([dst[e], src[e]])
    ids = np.concatenate([e, e])
    order = np.lexsort((ids, cols, rows))
    rows, cols, ids = rows[order], cols[order], ids[order]
    last = np.ones(len(ids), bool)
    last[:-1] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    if int(last.sum()) != W.nnz:
        raise RuntimeError("explain: the graph's edges do not match its weight matrix")
    return ids[last]


_VIEWS: weakref.WeakKeyDictionary[Retriever, GraphView] = weakref.WeakKeyDictionary()


def graph_view(r: Retriever) -> GraphView:
    """The retriever's :class:`GraphView` (built once per retriever)."""
    view = _VIEWS.get(r)
    if view is None:
        view = _VIEWS[r] = GraphView(r)
    return view


def candidate_facts(r: Retriever, res: RawResult) -> list[dict]:
    """The query's candidate facts with their (min-max) scores and whether the filter kept them."""
    cands = (res.trace or {}).get("candidates")
    if cands is None:
        return []
    rows, scores = cands
    kept = {tuple(t) for t in res.kept_facts}
    ok = [(int(row), float(sc)) for row, sc in zip(rows.tolist(), scores.tolist(), strict=True)
          if row >= 0 and r.facts.has(r._fid(row))]
    return [{"fact": list(t), "score": sc, "kept": tuple(t) in kept}
            for t, (_, sc) in zip(res.candidate_facts, ok, strict=False)]


def fallback_reason(r: Retriever, res: RawResult) -> str:
    """Why a query got the dense ranking ("" when it reached the graph)."""
    if not res.used_fallback:
        return ""
    if r.linking.scores_facts and not res.candidate_facts:
        return "no candidate fact"
    if r.linking.scores_facts and not res.kept_facts:
        return "the recognition filter kept no fact"
    return "no kept fact or query entity reached an entity node of the graph"


def explain_result(r: Retriever, query: str, res: RawResult, rows: Sequence[int], pids: Sequence[str],
                   ranked: Sequence[float] | None = None) -> list[Explanation]:
    """Explanations of passage store ``rows`` (ids ``pids``; ``ranked``: their scores in the solution)
    for one query searched with ``explain=True``. Each decomposes the score that placed the passage
    exactly: the one walk's PPR probability, or (with a second walk or a dense term) the one score of
    :mod:`.second.fusion`, whose walk terms split into their walks' seed terms (:mod:`.explain.fusion`); ``walk``
    says what the score is made of in a reader's words, ``walk_detail`` as the formula with the settings."""
    if res.trace is None:
        raise ValueError("explain_result needs a result searched with explain=True")
    tr = res.trace
    dense = np.asarray(tr["dense"], np.float64)
    order = [int(x) for x in res.order]
    common: dict[str, Any] = {"candidate_facts": candidate_facts(r, res), "used_fallback": res.used_fallback,
              "fallback_reason": fallback_reason(r, res), "query": query}
    head = set(top_k(tr["dense"], r.config.dense_first).tolist()) if r.config.dense_first > 0 else set()
    agreed = _agreed(r, tr, order)
    out = []
    walks = _Walks(r, tr, [int(x) for x in rows]) if tr["reset"] is not None else None
    for j, (row, pid) in enumerate(zip(rows, pids, strict=True)):
        row = int(row)
        rank = order.index(row) + 1 if row in order else _ppr_rank(tr, dense, row)
        given = float(ranked[j]) if ranked is not None else 0.0
        base: dict[str, Any] = dict(passage_id=pid, dense_score=float(dense[row]),
                    dense_rank=int(np.count_nonzero(dense > dense[row])) + 1, rank=rank, ranked_score=given, **common)
        if walks is None:
            out.append(Explanation(score=given, seeds=[], dense_prior=0.0, paths=[], placed_by="dense_fallback",
                                   **base))
            continue
        seeds, prior, paths, score, (walk, detail), dense_term = walks.terms(row)
        placed = "dense_first" if row in head else "dense_agree" if row == agreed else \
            "score" if walks.fused else "ppr"
        out.append(Explanation(score=score, seeds=seeds, dense_prior=prior, paths=paths, dense_term=dense_term,
                               check=abs(sum(s.contribution for s in seeds) + prior + dense_term - score),
                               placed_by=placed, walk=walk, walk_detail=detail, **base))
    return out


def _agreed(r: Retriever, tr: dict, order: list[int]) -> int:
    """The row ``dense_agree`` moved to the front (-1: none): dense retrieval's best passage, first in
    the returned ranking but not in the order of the scores it was ranked by."""
    if not order or not tr.get("agree") or r.config.dense_first > 0 or tr.get("ranked") is None:
        return -1
    best = int(top_k(tr["dense"], 1)[0])
    return best if order[0] == best and int(top_k(tr["ranked"], 1)[0]) != best else -1


def _ppr_rank(tr: dict, dense: np.ndarray, row: int) -> int:
    scores = next((x for x in (tr.get("ranked"), tr["ppr"]) if x is not None), dense)
    return int(np.count_nonzero(scores > scores[row])) + 1


class _Walks:
    """The terms of one query's score for ``rows``: the one walk's (its PPR probability), or the one score's
    (``fused``: :class:`.explain.fusion.FusedTerms`, the last walk for every row and the first walk for the
    rows of its head term); each walk's backward rows are solved once, for its rows only."""

    def __init__(self, r: Retriever, tr: dict, rows: list[int]):
        fusion = tr.get("fusion")
        self.fused = fusion is not None
        last = _terms(r, tr["reset"], tr["ppr"], rows)
        if fusion is None:
            self._plain = last
            self._index = {x: i for i, x in enumerate(rows)}
            return
        head = set() if tr.get("head") is None else {int(x) for x in tr["head"]}
        head_rows = [x for x in rows if x in head] if tr.get("first") is not None else []
        first = _terms(r, tr["first"][0], tr["first"][1], head_rows) if head_rows else None
        self._fused = FusedTerms(fusion, tr, rows, last, first, head_rows)

    def terms(self, row: int):
        """(seed terms, dense prior, paths, score, what the score is (in words, with the settings), dense term)
        of ``row``."""
        if not self.fused:
            return (*self._plain(self._index[row], row), ("", ""), 0.0)
        seeds, prior, paths, score, dense_term = self._fused.terms(row)
        return seeds, prior, paths, score, (self._fused.note, self._fused.detail), dense_term


def _terms(r: Retriever, reset_nz: tuple[np.ndarray, np.ndarray], ppr: np.ndarray, rows: Sequence[int]):
    """A function (j, row) -> (seed terms, dense prior, paths, PPR score) for one walk: its reset
    (nonzero nodes, weights) and passage scores ``ppr``; ``rows`` are the targets, ``j`` numbers them."""
    view = graph_view(r)
    d = r.ppr.damping
    nz, w = reset_nz
    reset = np.zeros(r.graph.num_nodes)
    reset[nz] = w
    clean = sanitise_reset(reset)
    targets = [int(r.passage_nodes[row]) for row in rows]
    U = view.op.backward(targets, d)
    seed_nodes = nz[~view.is_passage[nz]].tolist()
    names = dict(zip(seed_nodes, view.names(seed_nodes), strict=True))
    total = view.op.normaliser(reset, d)
    scale = 1.0 / total
    kinds = {n: "entity" if n < r.graph.num_entities else "community" for n in seed_nodes}
    weights = {n: float(reset[n]) for n in seed_nodes}
    search = WalkSearch(view.op, weights, d, view.costs)
    search.plan(targets, U, TOP_PATHS)
    texts: dict[int, str] = {}                   # passage texts read for this query's walks

    def terms(j: int, row: int):
        term, _ = contributions(view.op, clean, U[:, j], d, total)
        score = float(ppr[row])
        share = (lambda x: x / score) if score > 0 else (lambda x: 0.0)
        seeds = sorted((SeedTerm(names[n], weights[n], float(term[n]), share(float(term[n])), kinds[n])
                        for n in seed_nodes), key=lambda s: -s.contribution)
        prior = float(term[view.is_passage].sum())
        walks = search.best(targets[j], TOP_PATHS, U[:, j])
        paths = [view.path(wk, float(reset[wk.seed]), scale, score, float(term[wk.seed]), texts)
                 for wk in walks]
        return seeds, prior, paths, score

    return terms


def rows_of(r: Retriever, passage_ids: Sequence[str]) -> list[int]:
    """Passage store rows of ``passage_ids`` (``ValueError`` for an id not in the index)."""
    row = {str(p): i for i, p in enumerate(r.views.passages.store.ids)}
    missing = [p for p in passage_ids if p not in row]
    if missing:
        raise ValueError(f"explain: passage id(s) not in the index: {', '.join(missing[:5])}")
    return [row[p] for p in passage_ids]


def explain_solutions(r: Retriever, results: Sequence[RawResult], sols: Sequence) -> None:
    """Fill each solution's ``explanations`` (its returned passages, rank order)."""
    for res, sol in zip(results, sols, strict=True):
        pos = {str(p): i for i, p in enumerate(r.views.passages.store.ids[np.asarray(res.order, np.int64)])}
        keep = [pos[p] for p in sol.passage_ids]        # passages a lazy reader dropped are left out
        rows = [int(res.order[i]) for i in keep]
        sol.explanations = explain_result(r, sol.question, res, rows, list(sol.passage_ids),
                                          [float(res.scores[i]) for i in keep])
