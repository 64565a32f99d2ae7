"""What one filtered call may use of one retriever: a :class:`Restriction` (built by
:class:`.filtering.Restrictor`; what a filter does per mode: see :mod:`.filtering`). Kept below the
``Retriever``, which applies it while it links, seeds, walks and ranks."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from hippo_engine.retrieve.facts.fact_search import MatrixSearch, SubsetSearch
from hippo_engine.retrieve.scoring import dense_first, top_k

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.linking import LinkGraph


class DenseRanking(Protocol):
    """What :meth:`Restriction.dense_rank` needs of a retriever: its one dense ranking."""

    def dense_rank(self, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class Restriction:
    """What one filtered call may use of one retriever: the matching ``doc_ids``, the allowed
    ``passage_rows`` (increasing store rows; ``blocked_rows`` the others), the allowed ``fact_ids``
    and their search (store rows), the allowed entity nodes and their search."""

    doc_ids: frozenset[str]
    passage_rows: np.ndarray
    blocked_rows: np.ndarray
    fact_ids: frozenset[str]
    fact_search: SubsetSearch
    entity_nodes: np.ndarray
    entity_search: MatrixSearch

    @property
    def empty(self) -> bool:
        """Whether no passage is allowed."""
        return len(self.passage_rows) == 0

    def link_graph(self, g: LinkGraph) -> LinkGraph:
        """``g`` searching allowed entities only, without seed sources."""
        return dataclasses.replace(g, entity_search=self.entity_search, seed_sources=[])

    def seed_dense(self, dense: np.ndarray) -> np.ndarray:
        """Dense scores (rows, queries) for passage seeds: blocked rows take each column's allowed
        minimum, so a column's min-max equals that of its allowed rows (their seeds are then
        removed by :meth:`block_seeds`)."""
        out = np.array(dense, copy=True)
        if len(self.passage_rows) and len(self.blocked_rows):
            out[self.blocked_rows] = dense[self.passage_rows].min(axis=0)
        return out

    def block_seeds(self, resets: np.ndarray, passage_nodes: np.ndarray) -> None:
        """No reset weight on a blocked passage's node."""
        resets[passage_nodes[self.blocked_rows]] = 0.0

    def dense_rank(self, r: DenseRanking, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``Retriever.dense_rank`` among allowed passages: (store rows, scores)."""
        if self.empty:
            return np.zeros(0, np.int64), np.zeros(0)
        order, normalised = r.dense_rank(scores[self.passage_rows], k)
        return self.passage_rows[order], normalised

    def graph_rank(self, probs: np.ndarray, dense: np.ndarray, head: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` allowed passages with the best PPR scores, after the ``head`` best allowed by
        dense score (``dense_first``): (store rows, scores)."""
        rows = self.passage_rows
        if self.empty:
            return np.zeros(0, np.int64), np.zeros(0)
        sub = probs[rows]
        order = top_k(sub, k)
        order, scores = dense_first(order, sub[order], dense[rows], head, k)
        return rows[order], scores

    def masked(self, scores: np.ndarray) -> np.ndarray:
        """``scores`` by passage row with -inf on blocked rows (what explanations rank among)."""
        out = np.full(len(scores), -np.inf)
        out[self.passage_rows] = scores[self.passage_rows]
        return out


__all__ = ["DenseRanking", "Restriction"]
