"""The walk of one index version: Personalized PageRank for reset columns, solved as the PPR section
(:class:`~hippo_engine.config.PPRConfig`) says: the exact kernel (:mod:`.kernel`), forward push (:mod:`.push`,
with the passage prior of :mod:`.push_ann`) or igraph's prpack (``ppr_backend="igraph"``).

It reads nothing but its section, the graph and the passage nodes; the ``Retriever`` holds one
(:attr:`~hippo_engine.retrieve.retriever.Retriever.walk`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push import PushPPR
from hippo_engine.retrieve.ppr.push_ann import run_seed_table

if TYPE_CHECKING:
    from hippo_engine.config import PPRConfig
    from hippo_engine.index.graph import GraphData


class PPRSolver:
    """PPR on ``graph`` with the settings of ``ppr``, returning the scores of ``passage_nodes`` (by store row).
    The kernel is built here (``ppr_backend="power"``); the push solver and the igraph graph on first use."""

    def __init__(self, ppr: PPRConfig, graph: GraphData, passage_nodes: np.ndarray):
        self.ppr, self.graph, self.passage_nodes = ppr, graph, passage_nodes
        self.kernel = PPRKernel.from_graph(graph, ppr.ppr_dtype) if ppr.ppr_backend == "power" else None
        self._igraph: Any = None
        self._pusher: PushPPR | None = None    # built on the first push (retrieve.ppr.push)

    def run(self, resets: np.ndarray, priors: list | None = None) -> np.ndarray:
        """PPR for reset columns (n_nodes, b); returns passage scores (n_passages, b) by store row.
        ``priors``: per column, the ``AnnPrior`` of its passage prior (push only; None: exact)."""
        ppr = self.ppr
        if self.kernel is None:    # ppr_backend="igraph"
            if self._igraph is None:
                self._igraph = self.graph.to_igraph()
            cols = [np.array(self._igraph.personalized_pagerank(
                damping=ppr.damping, directed=False, weights="weight", reset=resets[:, j].tolist(),
                implementation="prpack")) for j in range(resets.shape[1])]
            probs = np.column_stack(cols) if cols else np.zeros((self.graph.num_nodes, 0))
        elif self.uses_push:
            cols = [self.pusher.run_split(resets[:, j], self.passage_nodes, ppr.damping, ppr.ppr_push_r_max,
                                           ppr.ppr_push_head, exact_prior=None if priors is None else priors[j])[0]
                    for j in range(resets.shape[1])]
            return np.column_stack(cols) if cols else np.zeros((len(self.passage_nodes), 0))
        else:
            probs = self.kernel.run(resets, ppr.damping, ppr.ppr_tol, ppr.ppr_max_iter, ppr.ppr_method,
                                    ppr.ppr_block_size)
        return probs[self.passage_nodes]

    def run_table(self, table: tuple[np.ndarray, np.ndarray, np.ndarray], priors: list) -> np.ndarray:
        """The passage scores of a block's seed table by push, each column with its ``AnnPrior``
        (:func:`.push_ann.run_seed_table`)."""
        ppr = self.ppr
        return run_seed_table(self.pusher, table, priors, self.passage_nodes, ppr.damping, ppr.ppr_push_r_max,
                              ppr.ppr_push_head)

    @property
    def pusher(self) -> PushPPR:
        """The forward-push solver on this version's kernel (built on first use)."""
        if self._pusher is None:
            if self.kernel is None:
                raise ValueError("forward push needs ppr_backend='power'")
            self._pusher = PushPPR(self.kernel)
        return self._pusher

    @property
    def uses_push(self) -> bool:
        """Whether PPR runs by forward push (``ppr_solver``; "auto": from ``ppr_push_min_nodes`` nodes)."""
        ppr = self.ppr
        if self.kernel is None or ppr.ppr_solver == "exact":
            return False
        return ppr.ppr_solver == "push" or self.graph.num_nodes >= ppr.ppr_push_min_nodes
