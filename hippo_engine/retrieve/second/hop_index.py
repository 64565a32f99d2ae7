"""What a second hop reads of a hyperedge index (``extractor="ner"``): which passages state each fact
(sentence), which entity nodes each fact mentions, and each passage's topic entity.

All three are sparse matrices or arrays over the retriever's rows (fact store rows, passage store
rows, graph nodes), built once per index version from the passages' hyperedges
(:meth:`HopIndex.build`). A fact stated by several passages belongs to all of them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id, hyperedge_id
from hippo_engine.index.salience import topic_entities


@dataclass
class HopIndex:
    """``fact_passages`` (n_facts x n_passages, 1 where a passage states the fact), ``fact_nodes``
    (n_facts x n_nodes, 1 where the fact mentions the entity node), ``topic`` (per passage row, the
    entity node of its topic entity, -1 for none; see :func:`.salience.topic_entities`) and
    ``passage_nodes`` (graph node of each passage row)."""

    fact_passages: sp.csr_matrix
    fact_nodes: sp.csr_matrix
    topic: np.ndarray
    passage_nodes: np.ndarray

    @property
    def node_facts(self) -> sp.csr_matrix:
        """(n_nodes, n_facts): the facts that mention each entity node."""
        if not hasattr(self, "_node_facts"):
            self._node_facts = self.fact_nodes.T.tocsr()
        return self._node_facts

    @property
    def passage_facts(self) -> sp.csr_matrix:
        """(n_passages, n_facts): the facts of each passage."""
        if not hasattr(self, "_passage_facts"):
            self._passage_facts = self.fact_passages.T.tocsr()
        return self._passage_facts

    @classmethod
    def build(cls, passage_hyperedges: Mapping[str, Sequence[Hyperedge]], fact_ids: Sequence | np.ndarray,
              passage_ids: Sequence | np.ndarray, graph, passage_nodes: np.ndarray, rule: str = "central") -> HopIndex:
        """From the index's ``passage_hyperedges`` (passage id -> its hyperedges), the fact and
        passage store ids (row order), the ``graph`` and the passage rows' nodes. ``rule``: how the
        topic entity is chosen (:func:`.salience.topic_entities`)."""
        frow = {(f.decode() if isinstance(f, bytes) else str(f)): i for i, f in enumerate(fact_ids)}
        prow = {str(p): i for i, p in enumerate(passage_ids)}
        fp_r, fp_c, fn_r, fn_ents = [], [], [], []
        seen: set[int] = set()
        for pid, hs in passage_hyperedges.items():
            p = prow.get(pid)
            if p is None:
                continue
            for h in hs:
                f = frow.get(hyperedge_id(h))
                if f is None:
                    continue
                fp_r.append(f)
                fp_c.append(p)
                if f not in seen:          # a shared fact's entities: those the store links (first seen)
                    seen.add(f)
                    fn_r += [f] * len(h.entities)
                    fn_ents += [entity_id(e) for e in h.entities]
        nf, npas, nn = len(frow), len(prow), graph.num_nodes
        fact_passages = sp.csr_matrix((np.ones(len(fp_r)), (fp_r, fp_c)), shape=(nf, npas))
        fact_passages.data[:] = 1.0
        nodes = graph.node_index(fn_ents, entities=True) if fn_ents else np.zeros(0, np.int64)
        ok = nodes >= 0
        fact_nodes = sp.csr_matrix((np.ones(int(ok.sum())), (np.asarray(fn_r, np.int64)[ok], nodes[ok])),
                                   shape=(nf, nn))
        fact_nodes.data[:] = 1.0
        topic = np.full(npas, -1, np.int64)
        chosen = topic_entities(passage_hyperedges, rule)
        rows = [(prow[p], entity_id(e)) for p, e in chosen.items() if p in prow]
        if rows:
            tn = graph.node_index([e for _, e in rows], entities=True)
            topic[np.array([r for r, _ in rows], np.int64)] = tn
        return cls(fact_passages, fact_nodes, topic, np.asarray(passage_nodes, np.int64))

    @property
    def node_pages(self) -> sp.csr_matrix:
        """(n_nodes, n_passages): the passages whose topic entity each node is (its "pages")."""
        if not hasattr(self, "_node_pages"):
            rows = np.flatnonzero(self.topic >= 0)
            n = self.fact_nodes.shape[1]
            self._node_pages = sp.csr_matrix((np.ones(len(rows)), (self.topic[rows], rows)),
                                             shape=(n, len(self.topic)))
        return self._node_pages

    def topic_of_facts(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fact index into ``rows``, topic node) for every passage that states each fact row (one pair
        per passage with a topic entity)."""
        sub = self.fact_passages[np.asarray(rows, np.int64)].tocoo()
        t = self.topic[sub.col]
        ok = t >= 0
        return sub.row[ok].astype(np.int64), t[ok]


__all__ = ["HopIndex"]
