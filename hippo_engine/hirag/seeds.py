"""Community summary nodes in the PPR graph (``use_community_nodes=True``).

Every community becomes a node of the PPR graph, after the entity and passage nodes, linked to
its member entities (``community_entity_weight``) and to its parent community
(``community_parent_weight``): :func:`augment_graph`. At query time :class:`CommunitySeeds`, a
seed source of the ``Retriever``, also seeds the ``community_seed_top_k`` communities whose
report vectors are nearest the query's passage vector, with ``community_seed_weight x
min-max(similarity)``. With ``community_seed_weight=0`` and both edge weights 0 the community
nodes are isolated and unseeded. Switched off (the default), retrieval is exactly HippoRAG 2.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.hirag.clustering import Community
from hippo_engine.index.graph import GraphData
from hippo_engine.retrieve.scoring import Rows, min_max, top_k

KIND_COMMUNITY = 8  # edge kind bit of community edges (the graph module uses 1, 2, 4)


def augment_graph(graph: GraphData, communities: Sequence[Community], entity_weight: float,
                  parent_weight: float) -> GraphData:
    """``graph`` plus one node per community (after all existing nodes) linked to its member
    entities and to its parent community. Members no longer in ``graph`` are skipped; weights of
    0 add no edges. Edges carry kind ``KIND_COMMUNITY``."""
    base = graph.num_nodes
    idx = graph.index_of
    cpos = {c.id: base + i for i, c in enumerate(communities)}
    src, dst, w = [], [], []
    for i, c in enumerate(communities):
        node = base + i
        if entity_weight > 0:
            for e in c.entities:
                j = idx.get(e)
                if j is not None and j < graph.num_entities:
                    src.append(j)
                    dst.append(node)
                    w.append(float(entity_weight))
        if parent_weight > 0 and c.parent in cpos:
            p = cpos[c.parent]
            src.append(min(p, node))
            dst.append(max(p, node))
            w.append(float(parent_weight))
    n_new = len(src)
    node_ids = np.concatenate([graph.node_ids, np.array([c.id for c in communities], dtype=object)])
    extra = dict(graph.extra)
    extra.update({"num_base_nodes": base, "community_levels": np.array([c.level for c in communities], np.int64)})
    return GraphData(node_ids=node_ids, num_entities=graph.num_entities,
                     src=np.concatenate([graph.src, np.asarray(src, np.int64)]),
                     dst=np.concatenate([graph.dst, np.asarray(dst, np.int64)]),
                     weight=np.concatenate([graph.weight, np.asarray(w, np.float64)]),
                     kinds=np.concatenate([graph.kinds, np.full(n_new, KIND_COMMUNITY, np.uint8)]),
                     extra=extra)


def community_seeds(scores: np.ndarray, weight: float, keep: int) -> np.ndarray:
    """Reset weights of community nodes: ``weight x min-max(scores)`` for the ``keep`` best
    communities (ties: lower index), 0 elsewhere."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.zeros(len(scores))
    if weight <= 0 or len(scores) == 0 or keep <= 0:
        return out
    best = top_k(scores, keep)
    out[best] = weight * min_max(scores)[best]
    return out


class CommunitySeeds:
    """A ``Retriever`` seed source: community nodes seeded by report-vector similarity.

    ``nodes``: the graph nodes of the communities (rows of ``report_mat``, in order);
    ``report_mat``: (n_communities, dim) report vectors; ``weight``/``keep``:
    ``community_seed_weight`` and ``community_seed_top_k``.
    """

    def __init__(self, nodes: np.ndarray, report_mat: np.ndarray, weight: float, keep: int):
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.report_mat = np.asarray(report_mat, dtype=np.float32).reshape(len(self.nodes), -1)
        self.weight, self.keep = weight, keep

    def score(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_communities, n_queries) cosine of report vectors and query vectors (float32)."""
        if len(self.report_mat) == 0:
            return np.zeros((0, np.atleast_2d(q_pass).shape[0]))
        return self.report_mat @ q_pass.T

    def add_seeds(self, resets: np.ndarray, scores: np.ndarray, cols: Rows) -> None:
        """Add each query's community seeds to its reset column."""
        if len(self.nodes) == 0:
            return
        for c, j in enumerate(cols):
            resets[self.nodes, c] += community_seeds(scores[:, j], self.weight, self.keep)
