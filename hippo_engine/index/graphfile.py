"""``graph.npz``: the graph on disk, verified rather than trusted.

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
from pathlib import Path

import numpy as np

from hippo_engine.index.graph import EdgeParts, GraphData
from hippo_engine.system import atomic_write

logger = logging.getLogger(__name__)


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
