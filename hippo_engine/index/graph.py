"""The passage-entity graph: nodes, edges with the spec's effective weights, statistics,
and conversion to igraph / a PPR transition matrix.

The graph is derived from the index's current content (passage triples and synonymy lists),
with exactly one edge per node pair; its weight is the sum of what each kind contributes:
fact 2 per triple occurrence linking the pair, context 1 per passage-entity pair, synonymy the
cosine once per direction found. Hyperedges (sentences, n-ary facts) reach this module as
weighted pseudo-triples (see :func:`.facts.hyperedge_graph_triples`): ``(e, "", e)`` per mention (a
context edge only) and ``(a, "", b)`` per co-occurring pair with its fact weight. Nodes are
ordered entities-then-passages, each sorted by id, so equal content gives an identical graph
whatever the insertion history.

Each edge keeps its parts (``EdgeParts``): ``base`` (fact + context, a multiple of 2**-20, so exact
in any order), and the cosine listed by its lower and by its higher endpoint. The weight is
always ``(base + syn_lo) + syn_hi``, so ``insert_passages`` can update a graph in place of a
rebuild (new nodes merged into the sorted order by a vectorised re-numbering, new and changed
edges merged into the sorted edge list) and still give bit-for-bit the graph ``build_graph``
would give for the same content. Python only touches the new passages' triples and the
changed synonymy lists; the rest is a few linear NumPy passes over the edge arrays.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from hippo_engine.ids import entity_id
from hippo_engine.index.graphdata import KIND_CONTEXT, KIND_FACT, KIND_SYNONYMY, EdgeParts, GraphData

logger = logging.getLogger(__name__)

FACT_WEIGHT = 2.0  # both directions of the reference's parallel edges, 1 each
CONTEXT_WEIGHT = 1.0


def _weights_and_kinds(parts: EdgeParts, dst: np.ndarray, num_entities: int) -> tuple[np.ndarray, np.ndarray]:
    weight = (parts.base + parts.syn_lo) + parts.syn_hi
    kinds = np.where(parts.base > 0, np.where(dst >= num_entities, KIND_CONTEXT, KIND_FACT), 0).astype(np.uint8)
    kinds |= np.where(parts.syn_dirs > 0, KIND_SYNONYMY, 0).astype(np.uint8)
    return weight, kinds


# ------------------------------------------------------------------ building blocks
def _triple_nodes(pids: Sequence[str], passage_triples: Mapping[str, Sequence[tuple[str, str, str]]],
                  node_of_entity, triple_weights: Mapping[str, Sequence[float]] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(subject node, object node, passage node, fact weight) per triple of ``pids``;
    ``node_of_entity`` maps a dict {phrase: entity id} to {phrase: node}; passage nodes are
    filled by the caller as positions in ``pids``. ``triple_weights[pid]`` gives the fact-edge
    weight of each of that passage's triples (default ``FACT_WEIGHT``)."""
    phrase_id: dict[str, str] = {}
    for pid in pids:
        for s, _, o in passage_triples.get(pid, ()):
            if s not in phrase_id:
                phrase_id[s] = entity_id(s)
            if o not in phrase_id:
                phrase_id[o] = entity_id(o)
    phrase_node = node_of_entity(phrase_id)
    subj: list[int] = []
    obj: list[int] = []
    owner: list[int] = []
    fw: list[float] = []
    for i, pid in enumerate(pids):
        ts = passage_triples.get(pid, ())
        if ts:
            subj.extend(phrase_node[t[0]] for t in ts)
            obj.extend(phrase_node[t[2]] for t in ts)
            owner.extend([i] * len(ts))
            ws = (triple_weights or {}).get(pid)
            fw.extend(ws if ws is not None else [FACT_WEIGHT] * len(ts))
    return (np.array(subj, dtype=np.int64), np.array(obj, dtype=np.int64), np.array(owner, dtype=np.int64),
            np.array(fw, dtype=np.float64))


def _base_contributions(subj: np.ndarray, obj: np.ndarray, pnode: np.ndarray, n: int, fw: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique pair keys and their fact+context weight (multiples of 2**-20: exact sums
    in any order)."""
    a, b = np.minimum(subj, obj), np.maximum(subj, obj)
    keep = a != b  # fact self-loops are dropped
    fact = a[keep] * n + b[keep]
    ctx = np.unique(np.concatenate([subj * n + pnode, obj * n + pnode]))  # one per (entity, passage)
    keys = np.concatenate([fact, ctx])
    vals = np.concatenate([fw[keep], np.full(len(ctx), CONTEXT_WEIGHT)])
    uk, inv = np.unique(keys, return_inverse=True)
    return uk, np.bincount(inv, weights=vals, minlength=len(uk)) if len(uk) else np.zeros(0)


def _directed_synonymy(s: np.ndarray, t: np.ndarray, sc: np.ndarray, n: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair key, direction bit 1|2, score) per directed synonymy entry (source node ``s``,
    target node ``t``, score)."""
    s, t = np.asarray(s, np.int64), np.asarray(t, np.int64)
    keys = np.minimum(s, t) * n + np.maximum(s, t)
    return keys, np.where(s < t, 1, 2).astype(np.uint8), np.asarray(sc, np.float64)


def _assemble(node_ids: np.ndarray, num_entities: int, keys: np.ndarray, parts: EdgeParts) -> GraphData:
    n = len(node_ids)
    src, dst = keys // max(n, 1), keys % max(n, 1)
    weight, kinds = _weights_and_kinds(parts, dst, num_entities)
    return GraphData(node_ids, int(num_entities), src.astype(np.int64), dst.astype(np.int64), weight, kinds,
                     parts=parts)


def build_graph(passage_ids: Sequence[str], passage_triples: Mapping[str, Sequence[tuple[str, str, str]]],
                synonymy: Mapping[str, Mapping[str, float]],
                triple_weights: Mapping[str, Sequence[float]] | None = None) -> GraphData:
    """Build the graph from the passages, their normalised triples and the synonymy lists.

    Entity nodes are the subjects and objects of the triples; a passage without triples is
    still an (isolated) node. Vectorised: Python touches each triple and each synonymy entry
    once to map it to node numbers; pairs are merged with ``np.unique`` on int64 pair keys.
    """
    passage_ids = sorted(passage_ids)
    ents: set[str] = set()

    def node_of_entity(phrase_id: dict[str, str]) -> dict[str, int]:
        ents.update(phrase_id.values())
        order = {e: i for i, e in enumerate(sorted(ents))}
        return {ph: order[e] for ph, e in phrase_id.items()}

    subj, obj, owner, fw = _triple_nodes(passage_ids, passage_triples, node_of_entity, triple_weights)
    ent_sorted = sorted(ents)
    ne = len(ent_sorted)
    node_ids = np.array(ent_sorted + passage_ids, dtype=object)
    n = len(node_ids)
    bkeys, bvals = _base_contributions(subj, obj, owner + ne, n, fw)
    ent_pos = {e: i for i, e in enumerate(ent_sorted)}
    m = sum(len(nb) for nb in synonymy.values())
    skeys, sdir, sval = _directed_synonymy(
        np.fromiter((ent_pos[s] for s, nb in synonymy.items() for _ in range(len(nb))), np.int64, m),
        np.fromiter((ent_pos[t] for nb in synonymy.values() for t in nb), np.int64, m),
        np.fromiter((w for nb in synonymy.values() for w in nb.values()), np.float64, m), n)
    keys = np.unique(np.concatenate([bkeys, skeys]))
    parts = EdgeParts(np.zeros(len(keys)), np.zeros(len(keys)), np.zeros(len(keys)), np.zeros(len(keys), np.uint8))
    parts.base[np.searchsorted(keys, bkeys)] = bvals
    _set_synonymy(parts, np.searchsorted(keys, skeys), sdir, sval)
    return _assemble(node_ids, ne, keys, parts)


def _set_synonymy(parts: EdgeParts, pos: np.ndarray, dirs: np.ndarray, vals: np.ndarray) -> None:
    """Set directed synonymy entries (``vals`` NaN: clear the entry). Later entries win."""
    for bit, arr in ((1, parts.syn_lo), (2, parts.syn_hi)):
        m = dirs == bit
        p, v = pos[m], vals[m]
        if not len(p):
            continue
        # keep the last assignment per position
        last = len(p) - 1 - np.unique(p[::-1], return_index=True)[1]
        p, v = p[last], v[last]
        clear = np.isnan(v)
        arr[p] = np.where(clear, 0.0, v)
        parts.syn_dirs[p[clear]] &= np.uint8(~bit & 3)
        parts.syn_dirs[p[~clear]] |= np.uint8(bit)


def _merge_sorted(old: np.ndarray, new: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge sorted ``new`` ids (none in ``old``) into sorted ``old``: (merged, old positions,
    new positions)."""
    new_arr = np.empty(len(new), dtype=object)
    new_arr[:] = list(new)
    ins = np.searchsorted(old, new_arr) if len(old) else np.zeros(len(new_arr), np.int64)
    new_pos = ins + np.arange(len(new_arr))
    merged = np.empty(len(old) + len(new_arr), dtype=object)
    is_new = np.zeros(len(merged), bool)
    is_new[new_pos] = True
    old_pos = np.flatnonzero(~is_new)
    merged[old_pos] = old
    merged[new_pos] = new_arr
    return merged, old_pos, new_pos


def insert_passages(graph: GraphData, new_passage_ids: Sequence[str],
                    passage_triples: Mapping[str, Sequence[tuple[str, str, str]]],
                    synonymy_changes: Mapping[str, tuple[Mapping[str, float] | None, Mapping[str, float] | None]],
                    triple_weights: Mapping[str, Sequence[float]] | None = None) -> GraphData:
    """The graph after adding passages (not yet in ``graph``) and changing synonymy lists.

    ``synonymy_changes``: source entity id -> (old list or None, new list or None). The result
    is identical, bit for bit, to ``build_graph`` over the new content. Cost: Python over the
    new triples and changed list entries, plus linear NumPy passes over the edge arrays.
    """
    if graph.parts is None:
        raise ValueError("insert_passages needs a graph with edge parts (built by build_graph)")
    ne_old = graph.num_entities
    old_ents, old_pas = graph.node_ids[:ne_old], graph.node_ids[ne_old:]
    new_pids = sorted(set(new_passage_ids))
    if len(old_pas) and len(new_pids):
        dup = graph.node_index(new_pids, entities=False) >= 0
        if dup.any():
            raise ValueError("insert_passages: some passages are already in the graph")
    phrases, new_ents = _new_entities(graph, new_pids, passage_triples)
    ents, ent_old_pos, _ = _merge_sorted(old_ents, new_ents)
    pas, pas_old_pos, pas_new_pos = _merge_sorted(old_pas, new_pids)
    ne = len(ents)
    node_ids = np.concatenate([ents, pas])
    n = len(node_ids)
    remap = np.concatenate([ent_old_pos, pas_old_pos + ne]).astype(np.int64)
    # old edges, renumbered: the map is increasing, so the order is kept
    keys = remap[graph.src] * n + remap[graph.dst] if len(graph.src) else np.zeros(0, np.int64)
    # fact and context contributions of the new passages
    ph_list = list(phrases)
    ph_node = dict(zip(ph_list, _sorted_positions(ents, [phrases[p] for p in ph_list]), strict=False)) \
        if ph_list else {}
    subj, obj, owner, fw = _triple_nodes(new_pids, passage_triples, lambda pid_map: ph_node, triple_weights)
    pnode = ne + pas_new_pos[owner] if len(owner) else np.zeros(0, np.int64)
    bkeys, bvals = _base_contributions(subj, obj, pnode, n, fw)
    skeys, sdir, sval = _synonymy_entries(synonymy_changes, ents, n)
    keys, parts = _apply_contributions(keys, graph.parts, bkeys, bvals, (skeys, sdir, sval))
    return _assemble(node_ids, ne, keys, parts)


def _sorted_positions(ents: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """Positions of ``ids`` in the sorted id array ``ents``."""
    q = np.empty(len(ids), dtype=object)
    q[:] = list(ids)
    return np.searchsorted(ents, q).astype(np.int64)


def _new_entities(graph: GraphData, new_pids: Sequence[str],
                  passage_triples: Mapping[str, Sequence[tuple[str, str, str]]]
                  ) -> tuple[dict[str, str], list[str]]:
    """(phrase -> entity id for every phrase of the new passages' triples, the sorted entity ids
    not yet in ``graph``)."""
    phrases: dict[str, str] = {}
    for pid in new_pids:
        for s, _, o in passage_triples.get(pid, ()):
            for ph in (s, o):
                if ph not in phrases:
                    phrases[ph] = entity_id(ph)
    cand = sorted(set(phrases.values()))
    known = graph.node_index(cand, entities=True) >= 0 if cand else np.zeros(0, bool)
    return phrases, [e for e, k in zip(cand, known, strict=False) if not k]


def _synonymy_entries(synonymy_changes: Mapping[str, tuple[Mapping[str, float] | None, Mapping[str, float] | None]],
                      ents: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Directed synonymy entries (keys, directions, values): every old entry of a changed source
    cleared (NaN), then the new ones set."""
    e_src: list[str] = []
    e_dst: list[str] = []
    e_val: list[float] = []
    for s in sorted(synonymy_changes):
        old, new = synonymy_changes[s]
        for t in (old or {}):
            e_src.append(s)
            e_dst.append(t)
            e_val.append(float("nan"))
        for t, w in (new or {}).items():
            e_src.append(s)
            e_dst.append(t)
            e_val.append(float(w))
    if not e_src:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0)
    uniq = sorted(set(e_src) | set(e_dst))
    pos = dict(zip(uniq, _sorted_positions(ents, uniq).tolist(), strict=False))
    return _directed_synonymy(np.fromiter((pos[x] for x in e_src), np.int64, len(e_src)),
                              np.fromiter((pos[x] for x in e_dst), np.int64, len(e_dst)),
                              np.array(e_val), n)


def _apply_contributions(keys: np.ndarray, parts: EdgeParts, bkeys: np.ndarray, bvals: np.ndarray,
                         syn: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, EdgeParts]:
    """Edge keys and parts after adding the base contributions and setting the synonymy
    entries ``syn`` (keys, directions, values); edges left with nothing disappear."""
    skeys, sdir, sval = syn
    # add keys that do not exist yet, with empty parts
    touched = np.unique(np.concatenate([bkeys, skeys]))
    pos = np.searchsorted(keys, touched)
    exists = pos < len(keys)
    exists[exists] = keys[pos[exists]] == touched[exists]
    add_pos = pos[~exists]
    n_add = int((~exists).sum())
    if n_add:
        keys = np.insert(keys, add_pos, touched[~exists])
        parts = EdgeParts(np.insert(parts.base, add_pos, 0.0), np.insert(parts.syn_lo, add_pos, 0.0),
                          np.insert(parts.syn_hi, add_pos, 0.0), np.insert(parts.syn_dirs, add_pos, 0))
    else:
        parts = EdgeParts(parts.base.copy(), parts.syn_lo.copy(), parts.syn_hi.copy(), parts.syn_dirs.copy())
    if len(bkeys):
        parts.base[np.searchsorted(keys, bkeys)] += bvals
    if len(skeys):
        _set_synonymy(parts, np.searchsorted(keys, skeys), sdir, sval)
    # edges left with nothing (a synonymy entry dropped from a list) disappear
    tpos = np.searchsorted(keys, touched)
    empty = (parts.base[tpos] == 0) & (parts.syn_dirs[tpos] == 0)
    if empty.any():
        keep = np.ones(len(keys), bool)
        keep[tpos[empty]] = False
        keys, parts = keys[keep], parts.take(keep)
    return keys, parts


__all__ = ["CONTEXT_WEIGHT", "FACT_WEIGHT", "KIND_CONTEXT", "KIND_FACT", "KIND_SYNONYMY", "EdgeParts", "GraphData",
           "build_graph", "insert_passages"]
