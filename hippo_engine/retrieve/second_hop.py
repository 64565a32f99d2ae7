"""A second hop without an LLM: the graph walk conditioned on what the first walk found.

HippoRAG 2 seeds one Personalized PageRank walk from the query's entities and ranks passages by its
mass. On multi-hop questions the second gold passage is often the page of an entity that only the
first passage names (the "bridge"); the first walk reaches it only as much as it spreads over every
entity of the first passage. Each strategy here takes the first walk's reset vectors and passage
scores of a block of queries and returns new passage scores; all read the index through a
:class:`HopContext` (the :class:`~.hop_index.HopIndex`, the fact vectors and the PPR kernel):

- :class:`ReseedHop` (``"reseed"``): the best sentence of each of the first walk's ``top_passages``
  passages (by similarity to the query) names the bridge entities; they join the seeds with
  ``weight`` times the entity seeds' mass, and a second walk ranks the passages.
- :class:`BridgeHop` (``"bridge"``): activation spreads from the seed entities through sentences, as
  LinearRAG's semantic bridging does: each round, every active entity passes its activation times
  the sentence's similarity to the query through its ``top_sentences`` best sentences to the
  entities they mention (``iterations`` rounds, entities below ``threshold`` stay inactive); the
  activated entities join the seeds and a second walk ranks the passages.
- :class:`RequeryHop` (``"requery"``): the query vector moves towards the best sentence of the first
  walk's top passage (``q + weight * s``, normalised, as TreeHop re-embeds the query with the
  first-hop evidence, without its trained update); the passage seeds of a second walk come from the
  new vector's dense scores.

Every strategy keeps the first walk's ``keep_head`` best passages in front (so the top ranks are
those of one walk) and ranks the rest by the second walk. Nothing here calls an LLM.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hippo_engine.retrieve.hop_index import HopIndex
from hippo_engine.retrieve.scoring import min_max, top_k


@dataclass
class HopContext:
    """What a second hop reads: the ``hop`` index, the fact vectors (``fact_mat``, rows = fact store
    rows), the number of entity nodes (``num_entities``: nodes before it are entities), passages per
    entity node (``passage_counts``), the passage seed weight (None: no passage seeds) and
    ``run_ppr(resets) -> passage scores`` (the first walk's kernel)."""

    hop: HopIndex
    fact_mat: np.ndarray
    num_entities: int
    passage_counts: np.ndarray
    passage_weight: float | None
    run_ppr: Callable[[np.ndarray], np.ndarray]
    passage_mat: np.ndarray | None = None

    def fact_sims(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosine of fact rows to one query vector (float64)."""
        if len(rows) == 0:
            return np.zeros(0)
        return np.asarray(self.fact_mat[rows], np.float64) @ np.asarray(q, np.float64)

    def best_fact(self, passage: int, q: np.ndarray) -> tuple[int, float]:
        """The passage's fact row most similar to ``q`` and its cosine ((-1, 0.0): no fact)."""
        pf = self.hop.passage_facts
        rows = pf.indices[pf.indptr[passage]:pf.indptr[passage + 1]]
        if len(rows) == 0:
            return -1, 0.0
        sims = self.fact_sims(rows, q)
        i = int(np.lexsort((rows, -sims))[0])
        return int(rows[i]), float(sims[i])

    def fact_entity_nodes(self, row: int) -> np.ndarray:
        fn = self.hop.fact_nodes
        return fn.indices[fn.indptr[row]:fn.indptr[row + 1]]


def keep_head(first: np.ndarray, second: np.ndarray, head: int) -> np.ndarray:
    """``second``'s scores with ``first``'s ``head`` best passages in front, in ``first``'s order
    (scores ``2 + min-max(first)`` over them, above any probability)."""
    if head <= 0:
        return second
    out = np.asarray(second, np.float64).copy()
    top = top_k(first, head)
    out[top] = 2.0 + min_max(np.asarray(first, np.float64)[top]) if len(top) > 1 else 3.0
    return out


@dataclass(frozen=True)
class SecondHop:
    """Base of the strategies: ``name`` (the ``second_hop`` setting) and ``keep_head``."""

    name: ClassVar[str] = ""
    keep_head: int = 1

    def refine(self, ctx: HopContext, resets: np.ndarray, first: np.ndarray, q_fact: np.ndarray,
               q_pass: np.ndarray, dense: np.ndarray) -> np.ndarray:
        """New (n_passages, b) passage scores of a block: ``resets`` (n_nodes, b) and ``first``
        (n_passages, b) of the first walk, the block's query vectors (b, dim) and dense scores
        (n_passages, b)."""
        raise NotImplementedError

    @staticmethod
    def entity_mass(reset: np.ndarray, num_entities: int) -> float:
        return float(reset[:num_entities].sum())


@dataclass(frozen=True)
class ReseedHop(SecondHop):
    """The bridge entities of the first walk's top passages' best sentences join the seeds."""

    top_passages: int = 2
    weight: float = 1.0
    name: ClassVar[str] = "reseed"

    def refine(self, ctx: HopContext, resets: np.ndarray, first: np.ndarray, q_fact: np.ndarray,
               q_pass: np.ndarray, dense: np.ndarray) -> np.ndarray:
        R = resets.copy()
        ne = ctx.num_entities
        for c in range(R.shape[1]):
            mass = self.entity_mass(R[:, c], ne)
            if mass <= 0:
                continue
            add: dict[int, float] = {}
            for p in top_k(first[:, c], self.top_passages).tolist():
                row, sim = ctx.best_fact(p, q_fact[c])
                if row < 0:
                    continue
                nodes = ctx.fact_entity_nodes(row)
                t = int(ctx.hop.topic[p])
                cand = set(nodes.tolist()) | ({t} if t >= 0 else set())
                for n in cand:
                    if R[n, c] > 0:
                        continue
                    w = max(sim, 0.0) / max(1.0, float(ctx.passage_counts[n]))
                    add[n] = max(add.get(n, 0.0), w)
            total = sum(add.values())
            if total <= 0:
                continue
            for n, w in add.items():
                R[n, c] += self.weight * mass * w / total
        second = ctx.run_ppr(R)
        return np.column_stack([keep_head(first[:, c], second[:, c], self.keep_head)
                                for c in range(R.shape[1])]) if R.shape[1] else second


@dataclass(frozen=True)
class BridgeHop(SecondHop):
    """Activation from the seed entities through their best sentences (LinearRAG's bridging)."""

    iterations: int = 3
    top_sentences: int = 2
    threshold: float = 0.1
    weight: float = 1.0
    name: ClassVar[str] = "bridge"

    def refine(self, ctx: HopContext, resets: np.ndarray, first: np.ndarray, q_fact: np.ndarray,
               q_pass: np.ndarray, dense: np.ndarray) -> np.ndarray:
        R = resets.copy()
        ne = ctx.num_entities
        nf = ctx.hop.node_facts
        for c in range(R.shape[1]):
            seeds = np.flatnonzero(R[:ne, c] > 0)
            mass = float(R[seeds, c].sum())
            if mass <= 0:
                continue
            act = {int(n): 1.0 for n in seeds.tolist()}     # seed entities fully active
            frontier = list(act)
            used: set[int] = set()
            for _ in range(self.iterations):
                nxt: dict[int, float] = {}
                for e in frontier:
                    rows = nf.indices[nf.indptr[e]:nf.indptr[e + 1]]
                    rows = np.array([r for r in rows.tolist() if r not in used], np.int64)
                    if len(rows) == 0:
                        continue
                    sims = ctx.fact_sims(rows, q_fact[c])
                    pick = np.lexsort((rows, -sims))[:self.top_sentences]
                    for r, s in zip(rows[pick].tolist(), sims[pick].tolist(), strict=True):
                        used.add(r)
                        a = act[e] * max(s, 0.0)
                        for n in ctx.fact_entity_nodes(r).tolist():
                            if a > act.get(n, 0.0) and a >= self.threshold:
                                nxt[n] = max(nxt.get(n, 0.0), a)
                if not nxt:
                    break
                act.update(nxt)
                frontier = list(nxt)
            new = {n: a for n, a in act.items() if R[n, c] <= 0}
            if not new:
                continue
            w = {n: a / max(1.0, float(ctx.passage_counts[n])) for n, a in new.items()}
            total = sum(w.values())
            for n, x in w.items():
                R[n, c] += self.weight * mass * x / total
        second = ctx.run_ppr(R)
        return np.column_stack([keep_head(first[:, c], second[:, c], self.keep_head)
                                for c in range(R.shape[1])]) if R.shape[1] else second


@dataclass(frozen=True)
class RequeryHop(SecondHop):
    """Passage seeds of a second walk from the query moved towards the first hop's best sentence."""

    weight: float = 1.0
    name: ClassVar[str] = "requery"

    def refine(self, ctx: HopContext, resets: np.ndarray, first: np.ndarray, q_fact: np.ndarray,
               q_pass: np.ndarray, dense: np.ndarray) -> np.ndarray:
        R = resets.copy()
        if ctx.passage_weight is None:
            return first
        nodes = ctx.hop.passage_nodes
        for c in range(R.shape[1]):
            p = int(top_k(first[:, c], 1)[0])
            row, _ = ctx.best_fact(p, q_fact[c])
            if row < 0:
                continue
            q2 = np.asarray(q_pass[c], np.float64) + self.weight * np.asarray(ctx.fact_mat[row], np.float64)
            q2 /= max(float(np.linalg.norm(q2)), 1e-12)
            if ctx.passage_mat is None:
                continue
            d2 = np.asarray(ctx.passage_mat @ q2.astype(np.float32), np.float64)
            R[nodes, c] = ctx.passage_weight * min_max(d2)
        second = ctx.run_ppr(R)
        return np.column_stack([keep_head(first[:, c], second[:, c], self.keep_head)
                                for c in range(R.shape[1])]) if R.shape[1] else second


STRATEGIES: dict[str, type[SecondHop]] = {s.name: s for s in (ReseedHop, BridgeHop, RequeryHop)}

__all__ = ["STRATEGIES", "BridgeHop", "HopContext", "RequeryHop", "ReseedHop", "SecondHop", "keep_head"]
