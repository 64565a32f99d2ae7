"""The second walk of one :class:`~.retriever.Retriever` (``second_hop``, :mod:`.second_hop`): what it reads
(:meth:`SecondWalk.context`, the :class:`~.hop_index.HopIndex` built on first use) and how a block's
ranking scores come out of it (:meth:`SecondWalk.run`).

Cost: the query's best facts are searched once for both walks (``top``); a query whose second reset
vector equals its first keeps the first walk's scores instead of walking again (the PPR kernel's columns do
not depend on their batch); by default (``second_walk_solver="solve"``) the second walk is a walk of its own,
bit-identical to a walk of the second reset alone, so explanations add up to the score; ``"update"`` updates
the first walk by a push of the seeds that changed (:mod:`.walk_update`) instead of walking the whole graph.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hippo_engine.retrieve.ppr.walk_update import passage_rows, updated_walk
from hippo_engine.retrieve.second.hop_index import HopIndex
from hippo_engine.retrieve.second.second_hop import HopContext, SecondHop

if TYPE_CHECKING:
    from hippo_engine.config import PPRConfig, RetrievalConfig
    from hippo_engine.index.graph import GraphData
    from hippo_engine.retrieve.facts.linking import Block, LinkGraph, Linking
    from hippo_engine.retrieve.ppr.kernel import PPRKernel
    from hippo_engine.retrieve.ppr.push import PushPPR
    from hippo_engine.retrieve.restriction import Restriction
    from hippo_engine.retrieve.views import ReaderViews


class WalkHost(Protocol):
    """What the second walk reads of the retriever it runs on (a :class:`~.retriever.Retriever`)."""

    @property
    def config(self) -> RetrievalConfig: ...
    @property
    def ppr(self) -> PPRConfig: ...
    @property
    def graph(self) -> GraphData: ...
    @property
    def views(self) -> ReaderViews: ...
    @property
    def linking(self) -> Linking: ...
    @property
    def fact_mat(self) -> np.ndarray | None: ...
    @property
    def fact_ids(self) -> np.ndarray: ...
    @property
    def passage_nodes(self) -> np.ndarray: ...
    @property
    def passage_counts(self) -> np.ndarray: ...
    @property
    def kernel(self) -> PPRKernel | None: ...
    @property
    def pusher(self) -> PushPPR: ...
    @property
    def uses_push(self) -> bool: ...

    def top_facts(self, q_fact: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def run_ppr(self, resets: np.ndarray, priors: list | None = None) -> np.ndarray: ...


def reuse_top(top: tuple[np.ndarray, np.ndarray], search: Callable) -> Callable:
    """``search(q, k)`` answered from ``top`` (rows, scores of the same queries, best first) while k
    fits its width: the first k columns of a top-n search are exactly the top-k search's."""
    rows, scores = top

    def search_top(q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k <= rows.shape[1] and len(q) == len(rows):
            return rows[:, :k], scores[:, :k]
        return search(q, k)
    return search_top


class SecondWalk:
    """The strategy ``hop`` run on retriever ``r`` (``hyperedges``: a provider of the index's passage
    hyperedges; ``extractor``: the index's, when known)."""

    def __init__(self, hop: SecondHop, r: WalkHost, hyperedges: Callable[[], Any] | None,
                 extractor: str | None):
        self.hop, self.r = hop, r
        self._hyperedges, self._extractor = hyperedges, extractor
        self._hop_index: HopIndex | None = None
        self._row_of: np.ndarray | None = None     # node -> passage row, for the update (built on first use)
        self._checked = False

    @property
    def facts_needed(self) -> int:
        """How many best facts per query the strategy reads (0: none)."""
        return int(getattr(self.hop, "sentences", 0))

    def _check(self) -> None:
        """The index must hold hyperedges (``extractor="ner"``); a strategy that reads the hop index
        gets it built here, once. A known ``ner`` index is not read for "wide" (a lazy reader loads nothing)."""
        r, hop = self.r, self.hop
        setting = r.config.second_hop
        hyper: Any = self._extractor == "ner"
        if self._hyperedges is not None and (hop.needs_hop or self._extractor is None):
            hyper = self._hyperedges()
        if not hyper:
            raise ValueError(f"second_hop={setting!r} needs an index of hyperedges (extractor='ner')")
        if hop.needs_hop:
            if r.fact_mat is None:
                raise ValueError(f"second_hop={setting!r} needs the fact vectors in memory "
                                 "(postgres_search='memory' on PostgreSQL)")
            self._hop_index = HopIndex.build(hyper, r.fact_ids, r.views.passage_ids, r.graph, r.passage_nodes)
        self._checked = True

    def context(self, g: LinkGraph, restriction: Restriction | None = None, links=None,
                top: tuple[np.ndarray, np.ndarray] | None = None) -> HopContext:
        """What the strategy reads for one block (``top``: the block's best facts already searched)."""
        if not self._checked:
            self._check()
        r = self.r
        search = r.top_facts if restriction is None else restriction.fact_search.top_normalised
        if top is not None:
            search = reuse_top(top, search)
        fact_mat = r.fact_mat if r.fact_mat is not None else np.zeros((0, 1), np.float32)
        return HopContext(self._hop_index, fact_mat, r.graph.num_entities, r.passage_counts, r.run_ppr,
                          r.linking, g, search, links)

    def run(self, g: LinkGraph, block: Block, cols: np.ndarray, R: np.ndarray, first: np.ndarray, links,
            restriction: Restriction | None, walks: dict, top: tuple | None = None) -> np.ndarray:
        """The second walk's passage scores (under a filter: seeds from allowed passages only); the ranking
        score combines them with the first walk's (:mod:`.second.fusion`). ``walks`` gets the second walk's reset
        vectors (``second_reset``) and scores (``second``)."""
        r, hop = self.r, self.hop
        hb = block if restriction is None else dataclasses.replace(block, dense=restriction.seed_dense(block.dense))
        R2 = hop.second_resets(self.context(g, restriction, links, top), hb, cols, R, first)
        if restriction is not None:
            restriction.block_seeds(R2, r.passage_nodes)
        kernel = self._update_kernel()
        if kernel is not None:                # (a query whose seeds did not change keeps its first walk)
            if self._row_of is None:
                self._row_of = passage_rows(kernel.n, r.passage_nodes)
            second = updated_walk(kernel, r.pusher, r.passage_nodes, first, R, R2, r.ppr.damping,
                                  r.config.second_walk_r_max, self._row_of)
        else:
            new = ~np.all(R2 == R, axis=0)
            second = np.array(first, copy=True)
            priors = block.priors(cols)
            if new.all():
                second = r.run_ppr(R2, priors)
            elif new.any():
                second[:, new] = r.run_ppr(R2[:, new], None if priors is None else
                                           [p for p, n in zip(priors, new, strict=True) if n])
        walks.update(second_reset=R2, second=second)
        return second

    def _update_kernel(self):
        """The exact kernel when the second walk is the first one updated (``second_walk_solver="update"``),
        else None (forward push and igraph solve it afresh)."""
        r = self.r
        return r.kernel if r.config.second_walk_solver == "update" and not r.uses_push else None


__all__ = ["SecondWalk", "WalkHost", "reuse_top"]
