"""The graph's arrays (:class:`GraphData`, its edges' weight parts :class:`EdgeParts`, the edge
kinds) and ``graph.npz``, the graph on disk, verified rather than trusted. Building and updating a
graph is :mod:`.graph`'s job; this module is what it builds and how that is saved and loaded.

The file is derived data (the index database holds everything it is built from), written with
``numpy.savez`` (no pickle, never loaded with pickle) through ``system.atomic_write`` (temp file,
fsync, rename, folder fsync). It is labelled with the index version and the checksum of the
content it was built from (:mod:`.digest`). Loading returns None, with a log line naming the file
and why, when the file is missing, unreadable (truncated zip, bad CRC, missing or pickled
arrays), of another version or content (a copy from another index), or malformed (edge ends out
of range, NaN or non-positive weights, sizes or edge parts that disagree); the caller rebuilds.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from hippo_engine.system import atomic_write

logger = logging.getLogger(__name__)

KIND_FACT, KIND_CONTEXT, KIND_SYNONYMY = 1, 2, 4


@dataclass
class EdgeParts:
    """What each edge's weight is made of (arrays aligned with the edges)."""

    base: np.ndarray      # float64, whole numbers: 2 per fact occurrence + 1 per context pair
    syn_lo: np.ndarray    # float64: cosine in the lower-numbered endpoint's synonymy list (0 if absent)
    syn_hi: np.ndarray    # float64: cosine in the higher-numbered endpoint's list (0 if absent)
    syn_dirs: np.ndarray  # uint8: bit 1 = listed by the lower endpoint, bit 2 = by the higher one

    def take(self, sel) -> EdgeParts:
        return EdgeParts(self.base[sel], self.syn_lo[sel], self.syn_hi[sel], self.syn_dirs[sel])


@dataclass
class GraphData:
    """An undirected weighted graph given once per node pair (``src < dst``), edges sorted by
    ``(src, dst)``. ``parts`` is present on graphs built by this module (None on derived ones)."""

    node_ids: np.ndarray          # object array of ids: entity ids then passage ids (hippo_engine.ids)
    num_entities: int
    src: np.ndarray               # int64
    dst: np.ndarray               # int64
    weight: np.ndarray            # float64
    kinds: np.ndarray             # uint8 bit mask of KIND_*
    extra: dict = field(default_factory=dict)
    parts: EdgeParts | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @cached_property
    def index_of(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.node_ids)}

    @property
    def passage_slice(self) -> slice:
        return slice(self.num_entities, self.num_nodes)

    def node_index(self, ids: Sequence[str], entities: bool) -> np.ndarray:
        """Node numbers of ``ids`` (all entities or all passages), -1 for ids not in the graph;
        binary search in the sorted id ranges, so no dict over all nodes is needed."""
        rng = self.node_ids[: self.num_entities] if entities else self.node_ids[self.num_entities:]
        off = 0 if entities else self.num_entities
        q = np.empty(len(ids), dtype=object)
        q[:] = list(ids)
        if len(rng) == 0 or len(q) == 0:
            return np.full(len(q), -1, np.int64)
        pos = np.searchsorted(rng, q)
        ok = pos < len(rng)
        ok[ok] = rng[pos[ok]] == q[ok]
        return np.where(ok, pos + off, -1).astype(np.int64)

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
        for s, d, w in zip(self.src, self.dst, self.weight, strict=False):
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

    # --- persistence (no pickle; the functions below) ---------------------------------------
    def save(self, path: Path, version: str, digest: str | None = None) -> None:
        """Write the graph atomically, labelled with the index ``version`` and the ``digest`` of
        the content it was built from (:func:`save_graph`)."""
        save_graph(self, path, version, digest)

    @classmethod
    def load(cls, path: Path, version: str, digest: str | None = None, parts: bool = True) -> GraphData | None:
        """The saved graph if it is sound and matches ``version`` (and ``digest``); else None,
        logged (:func:`load_graph`; ``parts=False``: without the edges' weight parts)."""
        return load_graph(path, version, digest, parts)

    def problem(self) -> str | None:
        """What is wrong with the arrays, or None (:func:`graph_problem`)."""
        return graph_problem(self)


def save_graph(g: GraphData, path: Path, version: str, digest: str | None = None) -> None:
    """Write the graph atomically (``system.atomic_write``: temp file, fsync, rename), labelled
    with the index ``version`` and the ``digest`` of the content it was built from."""
    arrays = dict(node_ids=_id_array(g.node_ids), num_entities=g.num_entities,
                  src=g.src, dst=g.dst, weight=g.weight, kinds=g.kinds, version=np.array(version))
    if digest is not None:
        arrays["content_digest"] = np.array(digest)
    if g.parts is not None:
        arrays.update(base=g.parts.base, syn_lo=g.parts.syn_lo, syn_hi=g.parts.syn_hi,
                      syn_dirs=g.parts.syn_dirs)
    atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]  # every value is an array


def _id_array(ids) -> np.ndarray:
    """Node ids as stored: bytes (one byte a character; the engine's ids are ASCII), else str."""
    try:
        return np.array(list(ids), dtype="S")
    except UnicodeEncodeError:
        return np.array(list(ids), dtype=str)


def _ids_from(raw: np.ndarray) -> np.ndarray:
    """Stored node ids as an object array of str, converted a block at a time (no full-size
    str copy beside the result)."""
    out = np.empty(len(raw), dtype=object)
    step = 1 << 16
    for s in range(0, len(raw), step):
        block = raw[s:s + step]
        out[s:s + step] = [x.decode("ascii") for x in block.tolist()] if raw.dtype.kind == "S" else block.tolist()
    return out


def load_graph(path: Path, version: str, digest: str | None = None, parts: bool = True) -> GraphData | None:
    """The saved graph if it exists, is labelled with ``version`` (and ``digest``, when given:
    the checksum of the content it must have been built from) and is well formed; else None,
    with a log line naming the file and why (the caller rebuilds it: the file is derived data).
    ``parts=False`` leaves out the edges' weight parts (needed only to insert into the graph)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            found = str(z["version"])
            if found != version:
                logger.info("graph file %s is of index version %s, not %s: rebuilding it", path, found, version)
                return None
            if digest is not None:
                stored = str(z["content_digest"]) if "content_digest" in z.files else None
                if stored is None:
                    logger.info("graph file %s carries no content checksum (older format): rebuilding it", path)
                    return None
                if stored != digest:
                    logger.warning("graph file %s was built from other content than the index holds (checksum "
                                   "%s, index %s; copied from another index?): rebuilding it", path, stored, digest)
                    return None
            edge_parts = None
            if parts and "base" in z.files:
                edge_parts = EdgeParts(z["base"], z["syn_lo"], z["syn_hi"], z["syn_dirs"])
            g = GraphData(_ids_from(z["node_ids"]), int(z["num_entities"]), z["src"], z["dst"],
                          z["weight"], z["kinds"], parts=edge_parts)
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - any damage: the file is derived data, rebuilt from the index
        logger.warning("graph file %s is unreadable (%s: %s): rebuilding it from the index", path,
                       type(e).__name__, e)
        return None
    problem = graph_problem(g)
    if problem:
        logger.warning("graph file %s is inconsistent (%s): rebuilding it from the index", path, problem)
        return None
    return g


def graph_problem(g: GraphData) -> str | None:
    """What is wrong with the arrays, or None (one-dimensional, edge ends in range and
    ordered, weights finite and positive, aligned lengths, edge parts matching the weights)."""
    n, m = g.num_nodes, len(g.src)
    arrays = (g.node_ids, g.src, g.dst, g.weight, g.kinds)
    if any(a.ndim != 1 for a in arrays) or not (0 <= g.num_entities <= n):
        return "malformed arrays"
    if any(len(a) != m for a in (g.dst, g.weight, g.kinds)):
        return "array sizes disagree"
    if any(a.dtype.kind not in "iu" for a in (g.src, g.dst)) or g.weight.dtype.kind != "f":
        return "wrong array types"
    if m and (g.src.min() < 0 or g.dst.max() >= n or not np.all(g.src < g.dst)):
        return "edge ends out of range"
    if m and not (np.all(np.isfinite(g.weight)) and np.all(g.weight > 0)):
        return "non-finite or non-positive weights"
    p = g.parts
    if p is not None:
        if any(a.ndim != 1 or len(a) != m for a in (p.base, p.syn_lo, p.syn_hi, p.syn_dirs)):
            return "edge parts disagree with the edges"
        if m and not np.array_equal((p.base + p.syn_lo) + p.syn_hi, g.weight):
            return "edge parts disagree with the weights"
    return None


__all__ = ["KIND_CONTEXT", "KIND_FACT", "KIND_SYNONYMY", "EdgeParts", "GraphData", "graph_problem", "load_graph",
           "save_graph"]
