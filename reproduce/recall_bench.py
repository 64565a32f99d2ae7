"""The retrieval side of ``python -m reproduce table-recall-llm-free``: one dataset variant's queries
encoded once, the engine's first graph walk (``ner_fact`` linking, filter off) for every question, and
the rows built on it (dense, the walk, second-hop strategies, top-rank rules), each as passage rows per
question; Recall@k and the second-hop shares of a ranking.

The first walk is the engine's own :class:`~hippo_engine.retrieve.retriever.Retriever` pieces (fact
candidates, linking strategy, reset matrix, PPR kernel) run over all questions at once; :meth:`Bench.check`
compares its ranking with ``HippoRAG.retrieve`` for the same questions (same passages in the same order).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from hippo_engine.ids import chunk_id
from hippo_engine.retrieve.facts.linking import Block, Links
from hippo_engine.retrieve.scoring import dense_first, top_k
from hippo_engine.retrieve.second.hop_index import HopIndex
from hippo_engine.retrieve.second.second_hop import HopContext, SecondHop

KS = (1, 2, 5, 10, 20)
#: passages kept per question
TOP = 200


@dataclasses.dataclass
class Walk:
    """A first walk: the questions that reached the graph (``cols``), their reset matrix and passage scores."""

    cols: np.ndarray
    resets: np.ndarray
    probs: np.ndarray
    seconds: float
    block: Block | None = None


class Bench:
    """One dataset variant's questions over its ``ner`` index (``rag``), with the topic rule ``rule``."""

    def __init__(self, rag, dataset, rule: str = "central"):
        from hippo_engine.retrieve.facts.query_ner import query_entity_names

        self.rag, self.ds = rag, dataset
        r = self.r = rag.retriever
        t = time.perf_counter()
        self.hop = HopIndex.build(rag.index_state.passage_hyperedges, r.fact_ids, r.views.passage_ids, r.graph,
                                  r.passage_nodes, rule)
        self.hop_build_s = time.perf_counter() - t
        qs = list(dataset.questions)
        self.q_fact, self.q_pass = rag.encode_queries(qs)
        qner = rag.searches.hipporag2._query_ner
        self.q_names = query_entity_names(qs, qner.settings, "ner", None, qner._ner, None)
        self.ner_vectors = qner(qs, {})
        t = time.perf_counter()
        self.dense = r.dense_scores(self.q_pass)
        self.dense_s = time.perf_counter() - t
        self.cand = r.top_facts(self.q_fact, 5)
        row = {str(p): i for i, p in enumerate(r.views.passage_ids)}
        self.gold = [[row.get(chunk_id(g), -1) for g in gs] for gs in dataset.gold_docs]
        self.nq = len(qs)
        self.ctx = HopContext(self.hop, r.fact_mat, r.graph.num_entities, r.passage_counts, r.run_ppr,
                              r.linking, r.link_graph, r.top_facts)

    # ------------------------------------------------------------------ walks
    def links(self, block: Block, topic: bool) -> Links:
        """The ``ner_fact`` links of the block, plus (``topic``) the topic entity of each linked
        sentence's passage with the sentence's score (what a title does on a titled passage)."""
        links = self.r.linking.links(self.r.link_graph, block)
        if not topic:
            return links
        rows, scores = block.candidates
        qq, cc = np.nonzero(block.kept)
        fi, nodes = self.hop.topic_of_facts(rows[qq, cc])
        return Links(np.r_[links.query, qq[fi]], np.r_[links.nodes, nodes], np.r_[links.scores, scores[qq, cc][fi]],
                     links.ner_table)

    def walk(self, n_fact: int = 1, topic: bool = False) -> Walk:
        """The first walk with the ``n_fact`` best sentences (the engine's ``ner_fact_top_k``)."""
        t = time.perf_counter()
        rows, scores = self.cand
        block = Block(0, self.nq, self.q_fact, self.dense, (rows[:, :n_fact], scores[:, :n_fact]),
                      np.ones((self.nq, n_fact), bool), list(self.ner_vectors), [])
        links = self.links(block, topic)
        cols = np.flatnonzero(links.linked(self.nq))
        R, _ = self.r.linking.resets(self.r.link_graph, links, block, cols)
        probs = self.r.run_ppr(R)
        return Walk(cols, R, probs, time.perf_counter() - t, block)

    def refine(self, walk: Walk, strategy: SecondHop) -> Walk:
        """``strategy`` applied to ``walk`` (a second walk conditioned on the first)."""
        t = time.perf_counter()
        probs = strategy.refine(self.ctx, walk.block, walk.cols, walk.resets, walk.probs)
        return Walk(walk.cols, walk.resets, probs, walk.seconds + time.perf_counter() - t, walk.block)

    # ------------------------------------------------------------------ rankings
    def dense_ranking(self) -> list[np.ndarray]:
        return [top_k(self.dense[:, j], TOP) for j in range(self.nq)]

    def ranking(self, walk: Walk, head: int = 0) -> list[np.ndarray]:
        """Passage rows per question: the walk's (``head``: ``dense_first``), dense where it did not run."""
        at = {int(c): i for i, c in enumerate(walk.cols.tolist())}
        out = []
        for j in range(self.nq):
            if j in at:
                c = at[j]
                order = top_k(walk.probs[:, c], TOP)
                order, _ = dense_first(order, walk.probs[order, c], self.dense[:, j], head, TOP)
            else:
                order = top_k(self.dense[:, j], TOP)
            out.append(order)
        return out

    def check(self, ranking: Sequence[np.ndarray], n: int = 20) -> None:
        """The first ``n`` questions through ``HippoRAG.retrieve``: the same top-20 passages in the same order."""
        sols = self.rag.retrieve(list(self.ds.questions[:n]))
        ids = {str(p): i for i, p in enumerate(self.r.views.passage_ids)}
        for j, sol in enumerate(sols):
            engine = [ids[chunk_id(d)] for d in sol.docs[:20]]
            if engine != ranking[j][:20].tolist():
                raise AssertionError(f"question {j}: the bench's first walk differs from HippoRAG.retrieve")

    # ------------------------------------------------------------------ measures
    def recall(self, ranking: Sequence[np.ndarray], ks: Sequence[int] = KS,
               only: list[list[bool]] | None = None) -> dict[int, float]:
        """Mean Recall@k in % (``only``: per question, which gold passages count; questions left
        without one are skipped)."""
        out = {}
        for k in ks:
            vals = []
            for j, order in enumerate(ranking):
                gold = self.gold[j] if only is None else [g for g, s in zip(self.gold[j], only[j], strict=True) if s]
                if only is not None and not gold:
                    continue
                top = set(order[:k].tolist())
                vals.append(sum(g in top for g in gold) / len(gold) if gold else 0.0)
            out[k] = 100.0 * float(np.mean(vals)) if vals else float("nan")
        return out

    def second_hop_gold(self, entities_of: dict[str, set[str]] | None = None) -> list[list[bool]]:
        """Per question and gold passage: whether the passage shares no entity with the question (the
        question's spaCy entities against the passage's sentence entities; ``entities_of``: passage
        entity sets to use instead, keyed by gold position as ``"j:i"``)."""
        ph = self.rag.index_state.passage_hyperedges
        ids = self.r.views.passage_ids
        out = []
        for j in range(self.nq):
            qn = set(self.q_names[j])
            row = []
            for i, g in enumerate(self.gold[j]):
                if entities_of is not None:
                    ents = entities_of.get(f"{j}:{i}", set())
                else:
                    ents = {e for h in ph.get(str(ids[g]), ()) for e in h.entities} if g >= 0 else set()
                row.append(g >= 0 and not (qn & ents))
            out.append(row)
        return out


def agree_first(graph: np.ndarray, dense: np.ndarray, within: int) -> np.ndarray:
    """The top-rank rule ``dense_agree``: dense retrieval's best passage goes first when it is among
    the graph ranking's ``within`` best; otherwise the graph ranking is unchanged."""
    if within <= 0 or len(dense) == 0:
        return graph
    d0 = int(dense[0])
    top = graph[:within].tolist()
    if d0 not in top or top[0] == d0:
        return graph
    return np.concatenate([[d0], graph[graph != d0]])


__all__ = ["Bench", "KS", "TOP", "Walk", "agree_first"]
