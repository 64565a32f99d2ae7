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
    still an (isolated) node. Vectorised: Python touches each triple once to map phrases to
    node numbers; pairs are merged with ``np.unique`` on int64 pair keys.
    """
    passage_ids = sorted(passage_ids)
    phrase_id: dict[str, str] = {}
    for pid in passage_ids:
        for s, _, o in passage_triples.get(pid, ()):
            if s not in phrase_id:
                phrase_id[s] = mdhash_id(s, "entity-")
            if o not in phrase_id:
                phrase_id[o] = mdhash_id(o, "entity-")
    ent_sorted = sorted(set(phrase_id.values()))
    node_ids = np.array(ent_sorted + passage_ids, dtype=object)
    n = len(node_ids)
    idx = {k: i for i, k in enumerate(node_ids)}
    phrase_node = {ph: idx[e] for ph, e in phrase_id.items()}

    subj, obj, owner = [], [], []
    for pid in passage_ids:
        ts = passage_triples.get(pid, ())
        if ts:
            pi = idx[pid]
            subj.extend(phrase_node[t[0]] for t in ts)
            obj.extend(phrase_node[t[2]] for t in ts)
            owner.extend([pi] * len(ts))
    subj, obj, owner = (np.array(x, dtype=np.int64) for x in (subj, obj, owner))

    keys, weights, kinds = [], [], []
    # fact edges: 2 per triple occurrence, self-loops dropped
    a, b = np.minimum(subj, obj), np.maximum(subj, obj)
    keep = a != b
    keys.append(a[keep] * n + b[keep]); weights.append(np.full(int(keep.sum()), FACT_WEIGHT))
    kinds.append(np.full(int(keep.sum()), KIND_FACT, np.uint8))
    # context edges: one per distinct (entity, passage) pair (entity index < passage index)
    ctx = np.unique(np.concatenate([subj * n + owner, obj * n + owner]))
    keys.append(ctx); weights.append(np.full(len(ctx), CONTEXT_WEIGHT)); kinds.append(np.full(len(ctx), KIND_CONTEXT, np.uint8))
    # synonymy: the cosine once per direction found
    ss, dd, ww = [], [], []
    for src_id in sorted(synonymy):  # fixed order, so float sums do not depend on history
        si = idx[src_id]
        nb = synonymy[src_id]
        for dst_id in sorted(nb):
            w = nb[dst_id]
            ss.append(si); dd.append(idx[dst_id]); ww.append(float(w))
    if ss:
        ss, dd = np.array(ss, dtype=np.int64), np.array(dd, dtype=np.int64)
        sa, sb = np.minimum(ss, dd), np.maximum(ss, dd)
        keys.append(sa * n + sb); weights.append(np.array(ww)); kinds.append(np.full(len(ww), KIND_SYNONYMY, np.uint8))

    allk = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    allw = np.concatenate(weights) if weights else np.zeros(0)
    allkind = np.concatenate(kinds) if kinds else np.zeros(0, np.uint8)
    order = np.argsort(allk, kind="stable")
    allk, allw, allkind = allk[order], allw[order], allkind[order]
    uk, start = np.unique(allk, return_index=True)
    # sum weights in a fixed order (sorted by key, then by the kind order above)
    weight = np.add.reduceat(allw, start) if len(allk) else np.zeros(0)
    kind = np.bitwise_or.reduceat(allkind, start) if len(allk) else np.zeros(0, np.uint8)
    return GraphData(node_ids, len(ent_sorted), uk // n, uk % n, weight.astype(np.float64), kind.astype(np.uint8))
