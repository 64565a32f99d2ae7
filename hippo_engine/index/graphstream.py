"""Updating ``graph.npz`` without holding the graph: a change's passages merged in, or removed, by
streaming the old file into the new one a chunk at a time (:func:`update_graph_file`).

The result is the graph :func:`.graph.insert_passages` / :func:`.graphremove.remove_passages` give
(so bit for bit ``build_graph``'s for the new content): nodes renumbered by the same merge of sorted
ids, the same contributions (:func:`.graph._base_contributions`, the synonymy entries of the changed
lists, last one winning) applied key by key with :func:`.graph._apply_contributions`, chunk by chunk
in key order (an edge's update only reads that edge, so a chunk sees exactly what the whole array
would). Memory: one chunk of edges and node ids, the change's own contributions, and two bytes a
node (which nodes go, which kept an edge); nothing else that grows with the index.

The old file is read member by member in order (each member's CRC is checked when it has been read
to its end, as ``numpy.load`` would); it must carry the labels of the version the change was made
to, and the ids the change names must be where the change says (added passages absent, removed
ones and their entities present, the entities a removal frees left without an edge and no other).
Any disagreement raises :class:`GraphFileError` and nothing is written: the caller rebuilds.
"""
from __future__ import annotations

import math
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import IO

import numpy as np

from hippo_engine.ids import entity_id
from hippo_engine.index.graph import (
    EdgeParts,
    _apply_contributions,
    _base_contributions,
    _directed_synonymy,
    _triple_nodes,
    _weights_and_kinds,
)
from hippo_engine.index.graphchunks import EDGE_IN, EDGE_OUT, GraphFileError, NewGraph, OldGraph

#: edges (and node ids) read, updated and written per step
CHUNK_EDGES = 1 << 18
CHUNK_NODES = 1 << 16


# ------------------------------------------------------------------ finding ids in the sorted node ranges
def _as_ids(ids: Sequence[str], dtype: np.dtype) -> np.ndarray:
    """``ids`` comparable with node ids of ``dtype`` (bytes: UTF-8, which sorts as the str do)."""
    if dtype.kind == "S":
        return np.array([i.encode("utf-8") for i in ids], dtype="S") if ids else np.zeros(0, "S1")
    return np.array(list(ids), dtype=str) if ids else np.zeros(0, "U1")


def _locate(old: OldGraph, ents: Sequence[str], pas: Sequence[str]) -> tuple[np.ndarray, ...]:
    """For sorted ``ents`` and ``pas``: how many old entity (passage) ids sort below each, and whether
    it is there (one pass over the node ids)."""
    eq, pq = _as_ids(ents, old.id_dtype), _as_ids(pas, old.id_dtype)
    e_cnt, e_hit = np.zeros(len(eq), np.int64), np.zeros(len(eq), bool)
    p_cnt, p_hit = np.zeros(len(pq), np.int64), np.zeros(len(pq), bool)
    start = 0
    for chunk in old.chunks("node_ids", CHUNK_NODES):
        cut = min(max(old.ne - start, 0), len(chunk))
        for part, q, cnt, hit in ((chunk[:cut], eq, e_cnt, e_hit), (chunk[cut:], pq, p_cnt, p_hit)):
            if len(part) and len(q):
                pos = np.searchsorted(part, q)
                inside = pos < len(part)
                hit[inside] |= part[pos[inside]] == q[inside]
                cnt += pos
        start += len(chunk)
    return e_cnt, e_hit, p_cnt, p_hit


class _Renumber:
    """Old node number -> new one, for old nodes kept, given the sorted old positions of the nodes
    inserted before (``*_ins``: how many old ids sort below each) and of those deleted."""

    def __init__(self, ne: int, ne_new: int, e_ins, e_del, p_ins, p_del):
        self.ne, self.ne_new = ne, ne_new
        self.e_ins, self.e_del = np.sort(np.asarray(e_ins, np.int64)), np.sort(np.asarray(e_del, np.int64))
        self.p_ins, self.p_del = np.sort(np.asarray(p_ins, np.int64)), np.sort(np.asarray(p_del, np.int64))

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        out = np.empty_like(idx)
        e = idx < self.ne
        i = idx[e]
        out[e] = i + np.searchsorted(self.e_ins, i, "right") - np.searchsorted(self.e_del, i, "left")
        j = idx[~e] - self.ne
        out[~e] = self.ne_new + j + np.searchsorted(self.p_ins, j, "right") - np.searchsorted(self.p_del, j, "left")
        return out


# ------------------------------------------------------------------ the two kinds of change
class _Change:
    """What one pass does: nodes inserted (positions, ids) and deleted (old positions) per range,
    the contributions (``bkeys``/``bvals`` and synonymy entries, in the numbering ``numbering``:
    ``"new"`` after the renumbering, ``"old"`` before), the new node count."""

    def __init__(self) -> None:
        self.e_ins: list[tuple[int, str]] = []
        self.p_ins: list[tuple[int, str]] = []
        self.e_del: np.ndarray = np.zeros(0, np.int64)
        self.p_del: np.ndarray = np.zeros(0, np.int64)
        self.numbering = "new"
        self.bkeys = self.bvals = np.zeros(0)
        self.syn: tuple = (np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0))


def _syn_entries(changes: Mapping[str, tuple], node: Mapping[str, int], n: int) -> tuple:
    """Directed synonymy entries of the changed lists (:func:`.graph._synonymy_entries`' order:
    sources sorted; per source its old entries cleared, NaN, then its new ones set)."""
    src: list[int] = []
    dst: list[int] = []
    val: list[float] = []
    for s in sorted(changes):
        old, new = changes[s]
        for t in old or {}:
            src.append(node[s])
            dst.append(node[t])
            val.append(float("nan"))
        for t, w in (new or {}).items():
            src.append(node[s])
            dst.append(node[t])
            val.append(float(w))
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0)
    return _directed_synonymy(np.array(src, np.int64), np.array(dst, np.int64), np.array(val), n)


def _phrases(pids: Sequence[str], triples: Mapping[str, Sequence[tuple]]) -> dict[str, str]:
    return {ph: entity_id(ph) for p in pids for s, _, o in triples.get(p, ()) for ph in (s, o)}


def _syn_ids(changes: Mapping[str, tuple]) -> set[str]:
    return {x for s, (old, new) in changes.items() for x in (s, *(old or {}), *(new or {}))}


def _plan_insert(old: OldGraph, new_ids: Sequence[str], triples: Mapping[str, Sequence[tuple]],
                 changes: Mapping[str, tuple], weights: Mapping[str, Sequence[float]] | None) -> _Change:
    """:func:`.graph.insert_passages` as a pass (contributions in the new numbering)."""
    pids = sorted(set(new_ids))
    phrases = _phrases(pids, triples)
    cand = sorted(set(phrases.values()) | _syn_ids(changes))
    e_cnt, e_hit, p_cnt, p_hit = _locate(old, cand, pids)
    if p_hit.any():
        raise GraphFileError("some passages are already in the graph")
    ch = _Change()
    new_ents = [(int(c), e) for c, e, h in zip(e_cnt.tolist(), cand, e_hit.tolist(), strict=True) if not h]
    ch.e_ins, ch.p_ins = new_ents, list(zip(p_cnt.tolist(), pids, strict=True))
    ne_new, n_new = old.ne + len(new_ents), old.n + len(new_ents) + len(pids)
    ren = _Renumber(old.ne, ne_new, [c for c, _ in new_ents], (), p_cnt, ())
    node = {e: int(r) for e, r in zip(cand, ren(e_cnt).tolist(), strict=True)}     # old ones
    node.update({e: c + k for k, (c, e) in enumerate(new_ents)})                     # merged in
    pnode = np.array([ne_new + c + k for k, c in enumerate(p_cnt.tolist())], np.int64)
    ph_node = {ph: node[e] for ph, e in phrases.items()}
    subj, obj, owner, fw = _triple_nodes(pids, triples, lambda _: ph_node, weights)
    ch.bkeys, ch.bvals = _base_contributions(subj, obj, pnode[owner] if len(owner) else owner, n_new, fw)
    missing = _syn_ids(changes) - set(node)
    if missing:
        raise GraphFileError("a synonymy list names an entity the graph does not hold")
    ch.syn = _syn_entries(changes, node, n_new)
    return ch


def _plan_remove(old: OldGraph, gone: Sequence[str], triples: Mapping[str, Sequence[tuple]],
                 changes: Mapping[str, tuple], weights: Mapping[str, Sequence[float]] | None,
                 dead: Sequence[str]) -> _Change:
    """:func:`.graphremove.remove_passages` as a pass (contributions in the old numbering)."""
    pids = sorted(set(gone))
    phrases = _phrases(pids, triples)
    dead = sorted(set(dead))
    cand = sorted(set(phrases.values()) | _syn_ids(changes) | set(dead))
    e_cnt, e_hit, p_cnt, p_hit = _locate(old, cand, pids)
    if not (e_hit.all() and p_hit.all()):
        raise GraphFileError("the graph does not hold every passage or entity the removal names")
    node = dict(zip(cand, e_cnt.tolist(), strict=True))
    ch = _Change()
    ch.numbering = "old"
    ch.e_del = np.array([node[e] for e in dead], np.int64)
    ch.p_del = np.asarray(p_cnt, np.int64)
    pnode = old.ne + ch.p_del
    ph_node = {ph: node[e] for ph, e in phrases.items()}
    subj, obj, owner, fw = _triple_nodes(pids, triples, lambda _: ph_node, weights)
    ch.bkeys, bvals = _base_contributions(subj, obj, pnode[owner] if len(owner) else owner, old.n, fw)
    ch.bvals = -bvals
    ch.syn = _syn_entries(changes, node, old.n)
    return ch


# ------------------------------------------------------------------ the pass
def _node_ids(old: OldGraph, ch: _Change, sink: NewGraph) -> np.dtype:
    """The new node ids: the old ones less those deleted, with the inserted ones merged in."""
    new = [i for _, i in ch.e_ins + ch.p_ins]
    dtype = old.id_dtype
    if dtype.kind == "S":
        if any(len(i.encode("utf-8")) != len(i) for i in new):
            raise GraphFileError("a new node id is not ASCII (the file keeps them as bytes)")
        dtype = np.dtype(f"S{max([dtype.itemsize, *map(len, new)])}")
    else:
        dtype = np.dtype(f"U{max([dtype.itemsize // 4, *map(len, new)])}")
    stream = old.chunks("node_ids", CHUNK_NODES)
    buf: np.ndarray | None = np.zeros(0, old.id_dtype)
    for lo, hi, ins, dele in ((0, old.ne, ch.e_ins, ch.e_del), (old.ne, old.n, ch.p_ins, ch.p_del)):
        at = np.array([c for c, _ in ins], np.int64)
        ids = np.array([i for _, i in ins], dtype=dtype) if ins else np.zeros(0, dtype)
        k = lo
        while k < hi:
            if buf is None or not len(buf):
                buf = next(stream, None)
                if buf is None:
                    raise GraphFileError("the graph file holds fewer node ids than it says")
                continue
            take, buf = buf[:hi - k], buf[hi - k:]
            off = k - lo
            keep = np.ones(len(take), bool)
            rel = dele - off
            keep[rel[(rel >= 0) & (rel < len(take))]] = False
            sel = (at >= off) & (at < off + len(take))
            sink.put("node_ids", _merge(take.astype(dtype), keep, at[sel] - off, ids[sel]))
            k += len(take)
        if (at == hi - lo).any():
            sink.put("node_ids", ids[at == hi - lo])
    if (buf is not None and len(buf)) or any(len(rest) for rest in stream):   # read through: the CRC check
        raise GraphFileError("the graph file holds more node ids than it says")
    return dtype


def _merge(old: np.ndarray, keep: np.ndarray, at: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Old ids (those ``keep`` marks) with ``ids`` put before the old id at each position ``at``."""
    out = np.insert(old, at, ids) if len(ids) else old
    if keep.all():
        return out
    mask = np.insert(keep, at, True) if len(ids) else keep
    return out[mask]


def _edges(old: OldGraph, ch: _Change, ren: _Renumber, n_new: int, ne_new: int, sink: NewGraph) -> np.ndarray | None:
    """Stream the edges through the change; returns, for a removal, whether each old node kept an edge."""
    streams = [old.chunks(f, CHUNK_EDGES) for f in EDGE_IN]
    n = old.n
    deleted = np.zeros(n, bool)
    deleted[ch.e_del] = True
    deleted[old.ne + ch.p_del] = True
    has_edge = np.zeros(n if ch.numbering == "old" else 0, bool)
    lo_key: float = -1
    done = False
    while not done:
        got = [next(s, None) for s in streams]
        if got[0] is None:
            if any(g is not None for g in got):
                raise GraphFileError("the graph file's edge arrays disagree")
            src = dst = np.zeros(0, np.int64)
            parts = EdgeParts(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, np.uint8))
            done = True
        else:
            arr = [g for g in got if g is not None]
            if len(arr) != len(got) or any(len(a) != len(arr[0]) for a in arr):
                raise GraphFileError("the graph file's edge arrays disagree")
            src, dst = arr[0].astype(np.int64), arr[1].astype(np.int64)
            parts = EdgeParts(arr[2], arr[3], arr[4], arr[5])
        if ch.numbering == "new":
            keys = ren(src) * n_new + ren(dst)
        else:
            keys = src * n + dst
        hi_key = int(keys[-1]) if len(keys) and not done else math.inf
        sel_b = (ch.bkeys > lo_key) & (ch.bkeys <= hi_key)
        sel_s = (ch.syn[0] > lo_key) & (ch.syn[0] <= hi_key)
        if sel_b.any() or sel_s.any():
            keys, parts = _apply_contributions(keys, parts, ch.bkeys[sel_b], ch.bvals[sel_b],
                                               (ch.syn[0][sel_s], ch.syn[1][sel_s], ch.syn[2][sel_s]))
        lo_key = hi_key
        if (parts.base < 0).any():
            raise GraphFileError("the graph holds less weight than the removed passages gave")
        if ch.numbering == "old":
            s, d = keys // n, keys % n
            if (deleted[s] | deleted[d]).any():
                raise GraphFileError("edges of the removed passages or entities are left")
            has_edge[s] = True
            has_edge[d] = True
            s, d = ren(s), ren(d)
        else:
            s, d = keys // n_new, keys % n_new
        weight, kinds = _weights_and_kinds(parts, d, ne_new)
        for name, out in (("src", s), ("dst", d), ("weight", weight), ("kinds", kinds), ("base", parts.base),
                          ("syn_lo", parts.syn_lo), ("syn_hi", parts.syn_hi), ("syn_dirs", parts.syn_dirs)):
            sink.put(name, out.astype(EDGE_OUT[name], copy=False))
    return has_edge if ch.numbering == "old" else None


def _one_pass(src: str | IO[bytes], out: IO[bytes], labels: tuple[str, str] | None, new_labels: tuple[str, str],
              plan, folder: str | None) -> None:
    try:
        _stream(src, out, labels, new_labels, plan, folder)
    except zipfile.BadZipFile as e:
        raise GraphFileError(f"damaged graph file: {e}") from e


def _stream(src: str | IO[bytes], out: IO[bytes], labels: tuple[str, str] | None, new_labels: tuple[str, str],
            plan, folder: str | None) -> None:
    old = OldGraph(src)
    sink = NewGraph(folder)
    try:
        if labels is not None:
            found = str(old.small("version"))
            digest = str(old.small("content_digest")) if old.has_digest else None
            if (found, digest) != labels:
                raise GraphFileError(f"the graph file is of version {found} ({digest}), not {labels[0]} ({labels[1]})")
        ch = plan(old)
        ne_new = old.ne + len(ch.e_ins) - len(ch.e_del)
        n_new = old.n + len(ch.e_ins) + len(ch.p_ins) - len(ch.e_del) - len(ch.p_del)
        ren = _Renumber(old.ne, ne_new, [c for c, _ in ch.e_ins], ch.e_del, [c for c, _ in ch.p_ins], ch.p_del)
        id_dtype = _node_ids(old, ch, sink)
        has_edge = _edges(old, ch, ren, n_new, ne_new, sink)
        if has_edge is not None:
            kept = np.ones(old.ne, bool)
            kept[ch.e_del] = False
            if not has_edge[:old.ne][kept].all():
                raise GraphFileError("an entity the removal keeps is left without an edge")
        old.check_rest()
        if sink.count["node_ids"] != n_new:
            raise GraphFileError("the node ids do not add up")
        sink.write_zip(out, id_dtype, {"num_entities": ne_new, "version": np.array(new_labels[0]),
                                       "content_digest": np.array(new_labels[1])})
    finally:
        sink.close()
        old.close()


def update_graph_file(path, labels: tuple[str, str], new_labels: tuple[str, str], *,
                      added: tuple | None = None, removed: tuple | None = None, write=None) -> None:
    """Rewrite the graph file ``path`` (labelled ``labels``: version, content digest) for a change:
    ``added`` (new passage ids, their graph triples, synonymy changes, fact weights), then
    ``removed`` (passage ids, their graph triples, synonymy changes, fact weights, the entities no
    passage names any more); labelled ``new_labels``. ``write(path, fill)`` writes the file
    (default: :func:`hippo_engine.system.atomic_write`). :class:`GraphFileError` if the file cannot
    take the change (nothing is written then)."""
    from pathlib import Path

    from hippo_engine.system import atomic_write
    write = write or atomic_write
    folder = str(Path(path).parent)
    passes = []
    if added is not None:
        ids, triples, changes, weights = added
        passes.append(lambda old: _plan_insert(old, ids, triples, changes, weights))
    if removed is not None:
        gone, r_triples, r_changes, r_weights, dead = removed
        passes.append(lambda old: _plan_remove(old, gone, r_triples, r_changes, r_weights, dead))
    if not passes:
        return
    if not Path(path).is_file():
        raise GraphFileError(f"{path} does not exist")
    with tempfile.TemporaryFile(dir=folder) as middle:
        src: str | IO[bytes] = str(path)
        check: tuple[str, str] | None = labels
        for i, plan in enumerate(passes):
            if i == len(passes) - 1:
                def fill(f, src=src, check=check, plan=plan) -> None:
                    _one_pass(src, f, check, new_labels, plan, folder)
                write(path, fill)
            else:
                _one_pass(src, middle, check, new_labels, plan, folder)
                middle.seek(0)
                src, check = middle, None


__all__ = ["CHUNK_EDGES", "CHUNK_NODES", "GraphFileError", "update_graph_file"]
