"""Removing passages from a graph in place of a rebuild (:func:`remove_passages`), the inverse of
:func:`.graph.insert_passages`.

A passage's fact and context contributions to the edges' ``base`` weights are multiples of
2**-20 (see :mod:`.graph`), so subtracting them gives exactly the sums a rebuild without the
passage adds up. The synonymy entries of the changed lists are cleared and set as on an insert.
An edge left with nothing disappears; an entity node left without an edge (no remaining passage
names it: every mention gives a context edge) and the removed passages' nodes go, and the rest
are renumbered in their sorted order. The result is bit for bit what ``build_graph`` gives for the
remaining content; the cost is Python over the removed passages' facts and the changed lists, plus
linear NumPy passes over the edge arrays.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hippo_engine.ids import entity_id
from hippo_engine.index.graph import (
    GraphData,
    _apply_contributions,
    _assemble,
    _base_contributions,
    _synonymy_entries,
    _triple_nodes,
)


def remove_passages(graph: GraphData, gone_passage_ids: Sequence[str],
                    passage_triples: Mapping[str, Sequence[tuple[str, str, str]]],
                    synonymy_changes: Mapping[str, tuple[Mapping[str, float] | None, Mapping[str, float] | None]],
                    triple_weights: Mapping[str, Sequence[float]] | None = None,
                    dead_entities: Sequence[str] | None = None) -> GraphData:
    """The graph after removing passages (all in ``graph``; ``passage_triples``: their
    (pseudo-)triples as the graph was given them, ``triple_weights`` their fact weights) and
    changing synonymy lists (source entity id -> (old list or None, new list or None)).
    ``dead_entities``, when given: the entities no remaining passage names, checked against the
    entity nodes left without an edge. ValueError if the graph does not hold what is removed or
    the nodes left without an edge are not those."""
    if graph.parts is None:
        raise ValueError("remove_passages needs a graph with edge parts (built by build_graph)")
    gone = sorted(set(gone_passage_ids))
    n, ne = graph.num_nodes, graph.num_entities
    pnodes = graph.node_index(gone, entities=False)
    if (pnodes < 0).any():
        raise ValueError("remove_passages: some passages are not in the graph")
    phrases = {ph: entity_id(ph) for p in gone for s, _, o in passage_triples.get(p, ()) for ph in (s, o)}
    ph_list = list(phrases)
    ph_nodes = graph.node_index([phrases[ph] for ph in ph_list], entities=True)
    if (ph_nodes < 0).any():
        raise ValueError("remove_passages: some entities of the removed passages are not in the graph")
    node_of = dict(zip(ph_list, ph_nodes.tolist(), strict=True))
    subj, obj, owner, fw = _triple_nodes(gone, passage_triples, lambda _: node_of, triple_weights)
    bkeys, bvals = _base_contributions(subj, obj, pnodes[owner] if len(owner) else owner, n, fw)
    keys = graph.src * n + graph.dst
    syn = _synonymy_entries(synonymy_changes, graph.node_ids[:ne], n)
    keys, parts = _apply_contributions(keys, graph.parts, bkeys, -bvals, syn)
    if (parts.base < 0).any():
        raise ValueError("remove_passages: the graph holds less weight than the removed passages gave")
    src, dst = keys // n, keys % n
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    keep = np.ones(n, bool)
    keep[:ne] = degree[:ne] > 0
    keep[pnodes] = False
    if degree[pnodes].any():
        raise ValueError("remove_passages: edges of the removed passages are left")
    if dead_entities is not None and sorted(graph.node_ids[:ne][~keep[:ne]].tolist()) != sorted(set(dead_entities)):
        raise ValueError("remove_passages: the entities left without an edge are not the entities removed")
    remap = np.cumsum(keep) - 1
    m = int(keep.sum())
    new_keys = remap[src] * m + remap[dst]
    return _assemble(graph.node_ids[keep], int(keep[:ne].sum()), new_keys.astype(np.int64), parts)


__all__ = ["remove_passages"]
