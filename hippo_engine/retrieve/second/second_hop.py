"""A second hop without an LLM: a second graph walk conditioned on what the first walk found.

HippoRAG 2 seeds one Personalized PageRank walk from the query's entities and ranks passages by its
mass. On multi-hop questions the second gold passage is often the page of an entity that only the
first passage names (the "bridge"); the first walk reaches it only as much as it spreads over every
entity of the first passage. Each strategy takes a block's first walk (reset vectors and passage
scores) and returns new passage scores; the first walk's ``keep_head`` best passages stay in front,
in its order (so the top ranks are those of the first walk), the rest follow the second walk. All read
the index through a :class:`HopContext`:

- :class:`WideHop` (``"wide"``): the second walk is seeded like the first from the query's
  ``sentences`` best sentences instead of its best one (``ner_fact_top_k``): the second-best sentence
  is often the second hop's.
- :class:`BridgeHop` (``"bridge"``): activation spreads from the seed entities through sentences, as
  LinearRAG's semantic bridging does: each round, every newly active entity passes its activation times
  a sentence's cosine to the query through its ``top_sentences`` best unused sentences to the entities
  they mention (``iterations`` rounds; below ``threshold`` an entity stays inactive); the activated
  entities join the seeds with ``weight`` times the seeds' mass.
- :class:`ReseedHop` (``"reseed"``): the best sentence of each of the first walk's ``top_passages``
  passages names the bridge entities; their ``weight`` share of mass goes to their nodes
  (``target="entity"``) or to their pages, the passages whose topic entity they are (``"page"``).

Nothing here calls an LLM. :func:`make_second_hop` builds the strategy of a retrieval configuration.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hippo_engine.retrieve.scoring import min_max, top_k
from hippo_engine.retrieve.second.hop_index import HopIndex

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.linking import Block, LinkGraph, Linking, Links


@dataclass
class HopContext:
    """What a second hop reads for one block: the ``hop`` index, the fact vectors (``fact_mat``, rows
    = fact store rows), the number of entity nodes (``num_entities``; nodes below it are entities),
    passages per entity node (``passage_counts``), ``run_ppr(resets) -> passage scores`` (the first
    walk's kernel) and, for :class:`WideHop`, the linking strategy, its graph and ``top_facts(q, k)``
    (each query's ``k`` best facts, as the first walk got its candidates)."""

    hop: HopIndex | None
    fact_mat: np.ndarray
    num_entities: int
    passage_counts: np.ndarray
    run_ppr: Callable[..., np.ndarray]
    linking: Linking | None = None
    link_graph: LinkGraph | None = None
    top_facts: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None
    #: the first walk's links (their query NER table is reused: it does not depend on the sentences)
    links: Links | None = None

    def fact_sims(self, q: np.ndarray) -> np.ndarray:
        """(n_facts, b) cosine of every fact to each query row of ``q`` (float32 BLAS; a ranking aid only)."""
        if len(self.fact_mat) == 0:
            return np.zeros((0, len(q)), np.float32)
        return np.asarray(self.fact_mat, np.float32) @ np.atleast_2d(np.asarray(q, np.float32)).T

    @property
    def index(self) -> HopIndex:
        """The hop index (an error where the context was made without one)."""
        if self.hop is None:
            raise ValueError("this second hop needs the hop index (HopContext.hop)")
        return self.hop

    def best_fact(self, passage: int, sims: np.ndarray) -> tuple[int, float]:
        """The passage's fact row with the largest of ``sims`` (one query's column; ties: lower row)
        and that value ((-1, 0.0): no fact)."""
        pf = self.index.passage_facts
        rows = pf.indices[pf.indptr[passage]:pf.indptr[passage + 1]]
        if len(rows) == 0:
            return -1, 0.0
        i = int(np.lexsort((rows, -sims[rows]))[0])
        return int(rows[i]), float(sims[rows[i]])

    def fact_entity_nodes(self, row: int) -> np.ndarray:
        """The entity nodes a fact row mentions."""
        fn = self.index.fact_nodes
        return fn.indices[fn.indptr[row]:fn.indptr[row + 1]]


def keep_head(first: np.ndarray, second: np.ndarray, head: int, blocked: np.ndarray | None = None) -> np.ndarray:
    """``second``'s scores (one column or (n, b)) with ``first``'s ``head`` best passages in front, in
    ``first``'s order (ties: the lower row): their scores become ``2 + min-max(first)`` over them (3 for a
    single one), above any walk probability. All columns at once; ``blocked`` rows (a metadata filter's)
    are never in front."""
    if head <= 0 or second.size == 0:
        return second
    f = np.asarray(first, np.float64).reshape(len(first), -1)
    k = min(head, len(f))
    if blocked is not None and len(blocked):
        f = f.copy()
        f[blocked] = -np.inf
        k = min(k, len(f) - len(np.unique(blocked)))
        if k <= 0:
            return second
    out = np.asarray(second, np.float64).reshape(len(second), -1).copy()
    top = _head_rows(f, k)
    vals = min_max(np.take_along_axis(f, top, axis=0), axis=0) + 2.0 if k > 1 else np.full(top.shape, 3.0)
    np.put_along_axis(out, top, vals, axis=0)
    return out.reshape(np.shape(second))


def _head_rows(f: np.ndarray, k: int) -> np.ndarray:
    """(k, b): each column's ``k`` largest rows of ``f``, best first, ties to the lower row (as
    :func:`.scoring.top_k`), by ``k`` passes of argmax (which takes the first of equal maxima)."""
    f = f.copy() if k > 1 else f
    cols = np.arange(f.shape[1])
    top = np.empty((k, f.shape[1]), np.int64)
    for i in range(k):
        top[i] = np.argmax(f, axis=0)
        if i + 1 < k:
            f[top[i], cols] = -np.inf
    return top


def _add_share(R: np.ndarray, c: int, weights: dict[int, float], mass: float) -> None:
    """``mass`` spread over the nodes of ``weights`` in proportion to their weights (column ``c``)."""
    total = sum(weights.values())
    if total > 0:
        for n, w in weights.items():
            R[n, c] += mass * w / total


@dataclass(frozen=True)
class SecondHop:
    """Base of the strategies: ``name`` (the ``second_hop`` setting), whether it reads the
    :class:`~.hop_index.HopIndex` (``needs_hop``) and ``keep_head``."""

    name: ClassVar[str] = ""
    needs_hop: ClassVar[bool] = True
    keep_head: int = 2

    def refine(self, ctx: HopContext, block: Block, cols: np.ndarray, resets: np.ndarray,
               first: np.ndarray) -> np.ndarray:
        """New (n_passages, len(cols)) passage scores for the block's queries ``cols`` (numbering the
        block's queries), from the first walk's ``resets`` (n_nodes, len(cols)) and scores ``first``."""
        _, second = self.walk(ctx, block, cols, resets, first)
        return keep_head(first, second, self.keep_head)

    def walk(self, ctx: HopContext, block: Block, cols: np.ndarray, resets: np.ndarray,
             first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The second walk: its reset vectors (n_nodes, len(cols)) and passage scores (n_passages,
        len(cols)), before the first walk's head is put in front (what an explanation decomposes)."""
        R = self.second_resets(ctx, block, cols, resets, first)
        return R, ctx.run_ppr(R) if block.ann is None else ctx.run_ppr(R, block.priors(cols))

    def second_resets(self, ctx: HopContext, block: Block, cols: np.ndarray, resets: np.ndarray,
                      first: np.ndarray) -> np.ndarray:
        """The second walk's reset vectors."""
        raise NotImplementedError

    def describe(self) -> str:
        """What seeds the second walk, in words (said by explanations of its passages)."""
        raise NotImplementedError


@dataclass(frozen=True)
class WideHop(SecondHop):
    """A second walk seeded from the query's ``sentences`` best sentences."""

    sentences: int = 2
    name: ClassVar[str] = "wide"
    needs_hop: ClassVar[bool] = False

    def describe(self) -> str:
        return (f"the second walk (second_hop='wide'), seeded like the first from the query's {self.sentences} best "
                "sentences instead of its best one")

    def second_resets(self, ctx, block, cols, resets, first):
        if ctx.linking is None or ctx.link_graph is None or ctx.top_facts is None:
            raise ValueError('second_hop="wide" needs the linking strategy, its graph and the fact search')
        rows, scores = ctx.top_facts(block.q_fact, self.sentences)
        reuse = ctx.links is not None and ctx.links.ner_table is not None
        wide = dataclasses.replace(block, candidates=(rows, scores), kept=rows >= 0,
                                   ner_vectors=None if reuse else block.ner_vectors)
        links = ctx.linking.links(ctx.link_graph, wide)
        if reuse and links.ner_table is not None:
            links.ner_table = ctx.links.ner_table
        R, _ = ctx.linking.resets(ctx.link_graph, links, wide, cols)
        return R


@dataclass(frozen=True)
class BridgeHop(SecondHop):
    """Activation from the seed entities through their best sentences (LinearRAG's bridging)."""

    iterations: int = 3
    top_sentences: int = 2
    threshold: float = 0.3
    weight: float = 0.5
    name: ClassVar[str] = "bridge"

    def activated(self, ctx: HopContext, seeds: np.ndarray, sims: np.ndarray) -> dict[int, float]:
        """Entity node -> activation reached from the ``seeds`` (activation 1) for one query."""
        nf = ctx.index.node_facts
        act = {int(n): 1.0 for n in seeds.tolist()}
        frontier, used = list(act), np.zeros(len(sims), bool)
        for _ in range(self.iterations):
            nxt: dict[int, float] = {}
            for e in frontier:
                rows = nf.indices[nf.indptr[e]:nf.indptr[e + 1]]
                rows = rows[~used[rows]]
                if len(rows) == 0:
                    continue
                pick = rows[np.lexsort((rows, -sims[rows]))[:self.top_sentences]]
                used[pick] = True
                for r in pick.tolist():
                    a = act[e] * max(float(sims[r]), 0.0)
                    if a < self.threshold:
                        continue
                    for n in ctx.fact_entity_nodes(r).tolist():
                        if a > act.get(n, 0.0) and a > nxt.get(n, 0.0):
                            nxt[n] = a
            if not nxt:
                break
            act.update(nxt)
            frontier = list(nxt)
        return act

    def describe(self) -> str:
        return ("the second walk (second_hop='bridge'): the first walk's seeds plus the entities activated from "
                f"them through their best sentences ({self.iterations} rounds)")

    def second_resets(self, ctx, block, cols, resets, first):
        R = resets.copy()
        ne = ctx.num_entities
        sims = ctx.fact_sims(block.q_fact[cols])
        for c in range(R.shape[1]):
            seeds = np.flatnonzero(R[:ne, c] > 0)
            mass = float(R[seeds, c].sum())
            if mass <= 0:
                continue
            act = self.activated(ctx, seeds, sims[:, c])
            new = {n: a / max(1.0, float(ctx.passage_counts[n])) for n, a in act.items() if R[n, c] <= 0}
            _add_share(R, c, new, self.weight * mass)
        return R


@dataclass(frozen=True)
class ReseedHop(SecondHop):
    """The bridge entities of the first walk's top passages' best sentences join the seeds."""

    top_passages: int = 2
    weight: float = 0.25
    #: where the bridge entities' mass goes: ``"entity"`` (their nodes: the walk spreads it over every
    #: passage that mentions them) or ``"page"`` (the passages whose topic entity they are)
    target: str = "page"
    name: ClassVar[str] = "reseed"

    def bridges(self, ctx: HopContext, reset: np.ndarray, first: np.ndarray, sims: np.ndarray) -> dict[int, float]:
        """Bridge entity node -> weight for one query: the entities of the best sentence of each of the
        ``top_passages`` best passages, other than that passage's topic and the seeds, weighted by the
        sentence's cosine to the query over the entity's passage count (the largest per entity)."""
        add: dict[int, float] = {}
        for p in top_k(first, self.top_passages).tolist():
            row, sim = ctx.best_fact(p, sims)
            if row < 0 or sim <= 0:
                continue
            own = int(ctx.index.topic[p])
            for n in ctx.fact_entity_nodes(row).tolist():
                if n != own and reset[n] <= 0:
                    add[n] = max(add.get(n, 0.0), sim / max(1.0, float(ctx.passage_counts[n])))
        return add

    def describe(self) -> str:
        where = "their pages" if self.target == "page" else "their nodes"
        return (f"the second walk (second_hop='reseed'): the first walk's seeds plus the bridge entities of the best "
                f"sentences of its {self.top_passages} best passages, seeded on {where}")

    def second_resets(self, ctx, block, cols, resets, first):
        R = resets.copy()
        ne = ctx.num_entities
        pages = ctx.index.node_pages
        sims = ctx.fact_sims(block.q_fact[cols])
        for c in range(R.shape[1]):
            mass = float(R[:ne, c].sum())
            add = self.bridges(ctx, R[:, c], first[:, c], sims[:, c]) if mass > 0 else {}
            if self.target == "entity":
                _add_share(R, c, add, self.weight * mass)
                continue
            total = sum(add.values())
            for n, w in add.items():
                ps = pages.indices[pages.indptr[n]:pages.indptr[n + 1]]
                if len(ps) and total > 0:
                    R[ctx.index.passage_nodes[ps], c] += self.weight * mass * w / total / len(ps)
        return R


STRATEGIES: dict[str, type[SecondHop]] = {s.name: s for s in (WideHop, BridgeHop, ReseedHop)}


def make_second_hop(name: str, **settings: Any) -> SecondHop | None:
    """The strategy called ``name`` with ``settings`` (None for ``"none"``)."""
    if name == "none":
        return None
    if name not in STRATEGIES:
        raise ValueError(f"second_hop must be none or one of {', '.join(STRATEGIES)}, got {name!r}")
    return STRATEGIES[name](**settings)


__all__ = ["STRATEGIES", "BridgeHop", "HopContext", "ReseedHop", "SecondHop", "WideHop", "keep_head",
           "make_second_hop"]
