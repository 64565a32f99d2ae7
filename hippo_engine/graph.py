"""The passage-entity graph: nodes, edges with the spec's effective weights, statistics,
and conversion to igraph / a PPR transition matrix.

The graph is derived from the index's current content (passage triples and synonymy lists),
with exactly one edge per node pair; its weight is the sum of what each kind contributes:
fact 2 per triple occurrence linking the pair, context 1 per passage-entity pair, synonymy the
cosine once per direction found. Nodes are ordered entities-then-passages, each sorted by id,
so equal content gives an identical graph whatever the insertion history.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from .text import mdhash_id

KIND_FACT, KIND_CONTEXT, KIND_SYNONYMY = 1, 2, 4
FACT_WEIGHT = 2.0  # both directions of the reference's parallel edges, 1 each
CONTEXT_WEIGHT = 1.0


@dataclass
class GraphData:
    """An undirected weighted graph given once per node pair (``src < dst``)."""

    node_ids: np.ndarray          # object array of ids: "entity-..." then "chunk-..."
    num_entities: int
    src: np.ndarray               # int64
    dst: np.ndarray               # int64
    weight: np.ndarray            # float64
    kinds: np.ndarray             # uint8 bit mask of KIND_*
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @cached_property
    def index_of(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.node_ids)}

    @property
    def passage_slice(self) -> slice:
        return slice(self.num_entities, self.num_nodes)

    def stats(self) -> dict:
        return {
            "entity_nodes": int(self.num_entities),
            "passage_nodes": int(self.num_nodes - self.num_entities),
            "fact_edges": int(np.count_nonzero(self.kinds & KIND_FACT)),
            "context_edges": int(np.count_nonzero(self.kinds & KIND_CONTEXT)),
            "synonymy_edges": int(np.count_nonzero(self.kinds & KIND_SYNONYMY)),
            "distinct_edges": int(len(self.src)),
            "total_edge_weight": float(self.weight.sum()),
        }

    def edge_dict(self) -> dict[tuple[str, str], float]:
        """{(id_a, id_b): weight} with id_a < id_b: for comparing graphs."""
        ids = self.node_ids
        out = {}
        for s, d, w in zip(self.src, self.dst, self.weight):
            a, b = ids[s], ids[d]
            out[(a, b) if a < b else (b, a)] = float(w)
        return out

    def to_igraph(self):
        """An ``igraph.Graph`` with vertex attributes ``name`` and ``kind`` and edge ``weight``."""
        import igraph as ig

        g = ig.Graph(n=self.num_nodes, edges=np.column_stack([self.src, self.dst]).tolist(), directed=False)
        g.vs["name"] = list(self.node_ids)
        g.vs["kind"] = ["entity"] * self.num_entities + ["passage"] * (self.num_nodes - self.num_entities)
        g.es["weight"] = self.weight.tolist()
        return g

    # --- persistence (no pickle) -----------------------------------------------------------
    def save(self, path: Path, version: str) -> None:
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        os.close(fd)
        try:
            with open(tmp, "wb") as f:
                np.savez(f, node_ids=np.array(self.node_ids, dtype=str), num_entities=self.num_entities,
                         src=self.src, dst=self.dst, weight=self.weight, kinds=self.kinds,
                         version=np.array(version))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def load(cls, path: Path, version: str) -> Optional["GraphData"]:
        """The saved graph if it exists and matches ``version``; else None."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["version"]) != version:
                    return None
                return cls(z["node_ids"].astype(object), int(z["num_entities"]), z["src"], z["dst"],
                           z["weight"], z["kinds"])
        except (OSError, KeyError, ValueError):
            return None


def build_graph(passage_ids: Sequence[str], passage_triples: Mapping[str, Sequence[tuple[str, str, str]]],
                synonymy: Mapping[str, Mapping[str, float]]) -> GraphData:
    """Build the graph from the passages, their normalised triples and the synonymy lists.

    Entity nodes are the subjects and objects of the triples; a passage without triples is
    still a (isolated) node.
    """
    ent_ids: set[str] = set()
    pair_w: dict[tuple[str, str], float] = {}
    pair_k: dict[tuple[str, str], int] = {}

    def add(a: str, b: str, w: float, kind: int) -> None:
        if a == b:
            return
        key = (a, b) if a < b else (b, a)
        pair_w[key] = pair_w.get(key, 0.0) + w
        pair_k[key] = pair_k.get(key, 0) | kind

    for pid in sorted(passage_ids):
        ents_here: set[str] = set()
        for s, _, o in passage_triples.get(pid, ()):
            si, oi = mdhash_id(s, "entity-"), mdhash_id(o, "entity-")
            ents_here.update((si, oi))
            add(si, oi, FACT_WEIGHT, KIND_FACT)
        for e in sorted(ents_here):
            add(pid, e, CONTEXT_WEIGHT, KIND_CONTEXT)
        ent_ids |= ents_here
    for s in sorted(synonymy):
        for d, w in synonymy[s].items():
            add(s, d, float(w), KIND_SYNONYMY)

    node_ids = np.array(sorted(ent_ids) + sorted(passage_ids), dtype=object)
    idx = {k: i for i, k in enumerate(node_ids)}
    keys = sorted(pair_w, key=lambda ab: (idx[ab[0]], idx[ab[1]]))
    src = np.fromiter((idx[a] for a, _ in keys), np.int64, len(keys))
    dst = np.fromiter((idx[b] for _, b in keys), np.int64, len(keys))
    swap = src > dst
    src[swap], dst[swap] = dst[swap], src[swap]
    weight = np.fromiter((pair_w[k] for k in keys), np.float64, len(keys))
    kinds = np.fromiter((pair_k[k] for k in keys), np.uint8, len(keys))
    return GraphData(node_ids, len(ent_ids), src, dst, weight, kinds)
