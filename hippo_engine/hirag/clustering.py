"""Hierarchical Leiden clustering of the entity graph (HiRAG communities, steps 1-2).

1. **Clustering** (:func:`hierarchical_leiden`). The entity graph is the entity nodes of the
   index graph with their entity-entity edges (fact and synonymy, with their weights). Level 0
   is igraph's Leiden (modularity objective) on the whole entity graph; every community larger
   than ``max_cluster_size`` is clustered again, one level down, on its induced subgraph, until
   it is small enough or cannot be split. igraph's Leiden draws from a process-wide random
   generator; each call here gets a private ``random.Random`` seeded from the configured seed
   and (below level 0) the parent's member set, and the default generator is put back after
   the call, so results are deterministic per seed and no global random state is touched.
   A sub-clustering depends only on its parent's member set, so an unchanged community keeps
   the same children after an insert elsewhere.
2. **Annotation**. Every :class:`Community` records its level, member entities, member edges
   (entity pairs inside it), source passages (passages whose triples mention a member, the
   ones mentioning most members first), parent and children. Its id is
   ``COMMUNITY_PREFIX + md5(sorted member ids)`` (:func:`hippo_engine.ids.community_id`): the
   member set identifies it.
"""
from __future__ import annotations

import contextlib
import random
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hippo_engine.ids import COMMUNITY_PREFIX, community_id, member_key  # noqa: F401 (re-exported)
from hippo_engine.index.graph import KIND_CONTEXT, GraphData


# ============================================================================ data
@dataclass
class Community:
    """One community of the hierarchy. Ids are graph node ids (entity and passage ids, :mod:`hippo_engine.ids`)."""

    id: str
    level: int
    entities: list[str]                          # member entity ids, sorted
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)   # (a, b), a < b, sorted
    passages: list[str] = field(default_factory=list)            # most members mentioned first

    @property
    def key(self) -> str:
        """The member-set hash (report reuse key)."""
        return self.id[len(COMMUNITY_PREFIX):]

    @property
    def size(self) -> int:
        """Number of member entities."""
        return len(self.entities)

    def to_json(self) -> dict:
        """A JSON-serialisable dict."""
        d = asdict(self)
        d["edges"] = [list(e) for e in self.edges]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Community:
        """The community stored by ``to_json``."""
        return cls(id=d["id"], level=int(d["level"]), entities=list(d["entities"]), parent=d.get("parent"),
                   children=list(d.get("children") or []), edges=[tuple(e) for e in d.get("edges") or []],
                   passages=list(d.get("passages") or []))


# ============================================================================ clustering
_RNG_LOCK = threading.Lock()
#: Leiden iterations per call. A negative value ("until stable") can cycle forever on some
#: subgraphs (seen on MuSiQue), so a fixed count is used (igraph and graspologic use 2).
LEIDEN_ITERATIONS = 10


@contextlib.contextmanager
def seeded_igraph_rng(seed: int | str) -> Iterator[None]:
    """Run igraph's random algorithms on a private ``random.Random(seed)``.

    igraph draws from one process-wide generator (by default the ``random`` module). This
    installs a private generator for the duration of the block and puts the module back
    afterwards, so the global ``random`` state is neither used nor changed. A lock keeps
    concurrent callers from interleaving.
    """
    import igraph as ig

    with _RNG_LOCK:
        ig.set_random_number_generator(random.Random(seed))
        try:
            yield
        finally:
            ig.set_random_number_generator(random)


def entity_edges(graph: GraphData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, weight) of the edges between two entity nodes (indices < num_entities)."""
    m = (graph.src < graph.num_entities) & (graph.dst < graph.num_entities)
    return graph.src[m], graph.dst[m], graph.weight[m]


def entity_igraph(graph: GraphData):
    """The entity graph as an ``igraph.Graph`` (vertex ``name``, edge ``weight``), built from the
    stored ``GraphData`` arrays, so it works for any graph backend that can give them."""
    import igraph as ig

    src, dst, w = entity_edges(graph)
    g = ig.Graph(n=int(graph.num_entities), edges=np.column_stack([src, dst]).tolist(), directed=False)
    g.vs["name"] = list(graph.node_ids[: graph.num_entities])
    g.es["weight"] = w.tolist()
    return g


def _leiden_groups(g, seed: int | str) -> list[np.ndarray]:
    """Leiden (modularity, weighted, ``LEIDEN_ITERATIONS`` iterations) on ``g``; groups of vertex indices,
    each sorted, ordered by their smallest vertex."""
    if g.vcount() == 0:
        return []
    weights = "weight" if g.ecount() and "weight" in g.es.attributes() else None
    with seeded_igraph_rng(seed):
        cl = g.community_leiden(objective_function="modularity", weights=weights, n_iterations=LEIDEN_ITERATIONS)
    memb = np.asarray(cl.membership)
    groups = [np.flatnonzero(memb == c) for c in np.unique(memb)]
    groups.sort(key=lambda a: int(a[0]))
    return groups


def hierarchical_leiden(g, max_cluster_size: int = 10, seed: int = 0, min_size: int = 2,
                        max_levels: int = 8) -> list[tuple[int, np.ndarray, int]]:
    """Hierarchical Leiden clustering of ``g`` (an ``igraph.Graph`` with vertex ``name``).

    Returns ``[(level, member vertex indices (sorted), parent position or -1)]`` in the order
    the communities were found (level 0 first, children right after their parent is split).
    Communities smaller than ``min_size`` are not returned (their vertices stay without a
    community at that level). A community larger than ``max_cluster_size`` is clustered again
    on its induced subgraph, with a seed derived from ``seed`` and its member names; if that
    yields one group it stays a leaf.
    """
    names = g.vs["name"] if g.vcount() else []
    out: list[tuple[int, np.ndarray, int]] = []
    stack: list[tuple[np.ndarray, int, int, int | str]] = [(np.arange(g.vcount()), 0, -1, f"{seed}:root")]
    while stack:
        members, level, parent, rng_seed = stack.pop(0)
        sub = g if level == 0 else g.induced_subgraph(members.tolist())
        groups = [members[grp] for grp in _leiden_groups(sub, rng_seed)]
        if level > 0 and len(groups) <= 1:
            continue  # cannot split: the parent stays a leaf
        for grp in groups:
            if len(grp) < min_size:
                continue
            pos = len(out)
            out.append((level, grp, parent))
            if len(grp) > max_cluster_size and level + 1 < max_levels:
                stack.append((grp, level + 1, pos, f"{seed}:{member_key(names[i] for i in grp)}"))
    return out


def cluster_entities(graph: GraphData, max_cluster_size: int = 10, seed: int = 0, min_size: int = 2,
                     max_levels: int = 8) -> list[Community]:
    """Cluster the entity graph of ``graph`` hierarchically and annotate every community with its
    member edges and source passages. Sorted by (level, id); deterministic for a seed."""
    g = entity_igraph(graph)
    raw = hierarchical_leiden(g, max_cluster_size, seed, min_size, max_levels)
    ids = graph.node_ids
    comms: list[Community] = []
    for level, members, _parent in raw:
        ents = sorted(str(ids[i]) for i in members)
        comms.append(Community(id=community_id(ents), level=level, entities=ents))
    for c, (_, _, parent) in zip(comms, raw, strict=False):
        if parent >= 0:
            c.parent = comms[parent].id
            comms[parent].children.append(c.id)
    for c in comms:
        c.children.sort()
    _annotate(comms, raw, graph)
    comms.sort(key=lambda c: (c.level, c.id))
    return comms


def _annotate(comms: list[Community], raw: list[tuple[int, np.ndarray, int]], graph: GraphData) -> None:
    """Fill ``edges`` (entity pairs inside each community) and ``passages`` (by members mentioned)."""
    ids = graph.node_ids
    n_ent = graph.num_entities
    src, dst, _ = entity_edges(graph)
    # passages of each entity: context edges entity-passage
    ctx = (graph.kinds & KIND_CONTEXT) > 0
    a, b = graph.src[ctx], graph.dst[ctx]
    ent = np.where(a < n_ent, a, b)
    psg = np.where(a < n_ent, b, a)
    by_ent: dict[int, list[int]] = {}
    for e, p in zip(ent.tolist(), psg.tolist(), strict=False):
        by_ent.setdefault(e, []).append(p)
    levels = sorted({lvl for lvl, _, _ in raw})
    for lvl in levels:
        lab = np.full(n_ent, -1, dtype=np.int64)
        for pos, (l2, members, _) in enumerate(raw):
            if l2 == lvl:
                lab[members] = pos
        same = (lab[src] == lab[dst]) & (lab[src] >= 0)
        for s, d, pos in zip(src[same].tolist(), dst[same].tolist(), lab[src[same]].tolist(), strict=False):
            x, y = str(ids[s]), str(ids[d])
            comms[pos].edges.append((x, y) if x < y else (y, x))
    for c, (_, members, _) in zip(comms, raw, strict=False):
        c.edges.sort()
        cnt = Counter(p for m in members.tolist() for p in by_ent.get(m, ()))
        c.passages = [str(ids[p]) for p, _ in sorted(cnt.items(), key=lambda t: (-t[1], str(ids[t[0]])))]


def communities_by_level(comms: Sequence[Community]) -> dict[int, int]:
    """{level: number of communities}."""
    return dict(sorted(Counter(c.level for c in comms).items()))
