"""The kb_* modes' questions asked of the graph in the database: :class:`FalkorGraphQueries`.

The traversal mirrors the entity graph the engine builds in process (:func:`hippo_engine.index.graph.build_graph`)
edge for edge, so that a search that traverses here finds what it finds there:

* a triple of a passage (``(:Entity)-[:RELATED_TO {passage_id}]->(:Entity)``) links its subject and object,
  unless the passage has hyperedges (``(:Fact {passage_id})``), whose graph they replace;
* a hyperedge links every two of its entities (``(:Entity)<-[:INVOLVES]-(:Fact)-[:INVOLVES]->(:Entity)``);
* synonymy (``(:Entity)-[:SYNONYM]-(:Entity)``, either direction) links its two entities;
* a fact counts only where its passage is one of the index's (``passages``: the passage ids the engine's
  graph holds).

A passage mentions an entity when one of its graph triples (as above) or hyperedges names it. Community
candidates come from the vector index on the ``CommunitySummary`` nodes' ``embedding``.
"""
from __future__ import annotations

from collections.abc import Container, Iterable, Sequence

import numpy as np

from hippo_engine.store.falkordb.vector_index import vector_indexes
from hippo_engine.store.falkordb.vectors import NumberList

#: one hop from the entities ``$ids``: (neighbour id, the passage of the fact linking them, or null)
_HOPS = (
    ("traverse relations", "UNWIND $ids AS id MATCH (:Entity {id: id})-[r:RELATED_TO]-(n:Entity) "
     "OPTIONAL MATCH (f:Fact {passage_id: r.passage_id}) WITH n, r, f WHERE f IS NULL "
     "RETURN DISTINCT n.id, r.passage_id"),
    ("traverse hyperedges", "UNWIND $ids AS id MATCH (e:Entity {id: id})<-[:INVOLVES]-(f:Fact)-[:INVOLVES]->"
     "(n:Entity) WHERE n <> e RETURN DISTINCT n.id, f.passage_id"),
    ("traverse synonymy", "UNWIND $ids AS id MATCH (:Entity {id: id})-[:SYNONYM]-(n:Entity) "
     "RETURN DISTINCT n.id, null"),
)
#: (entity id, passage id) of the passages mentioning the entities ``$ids``
_MENTIONS = (
    ("find the passages of entities", "UNWIND $ids AS id MATCH (e:Entity {id: id})-[r:RELATED_TO]-() "
     "OPTIONAL MATCH (f:Fact {passage_id: r.passage_id}) WITH e, r, f WHERE f IS NULL "
     "RETURN DISTINCT e.id, r.passage_id"),
    ("find the passages of entities", "UNWIND $ids AS id MATCH (e:Entity {id: id})<-[:INVOLVES]-(f:Fact) "
     "RETURN DISTINCT e.id, f.passage_id"),
)


class FalkorGraphQueries:
    """The graph questions of the kb_* modes, asked of ``db`` (a :class:`~.store.FalkorIndexStore`) where it
    reads (its snapshot, its transaction's copy or the current graph)."""

    def __init__(self, db):
        self.db = db

    def reach(self, seeds: Sequence[str], hops: int, passages: Container[str]) -> dict[str, int]:
        """Entity id -> hops from the nearest seed, for every entity within ``hops`` of ``seeds``: a
        breadth-first traversal in the database, one query per kind of edge and hop."""
        dist = {s: 0 for s in seeds}
        frontier = list(dict.fromkeys(seeds))
        for h in range(1, hops + 1):
            if not frontier:
                break
            nxt = []
            for op, cypher in _HOPS:
                for n, pid in self.db.q(op, cypher, ids=frontier):
                    if n not in dist and (pid is None or pid in passages):
                        dist[n] = h
                        nxt.append(n)
            frontier = nxt
        return dist

    def entity_passages(self, entity_ids: Iterable[str]) -> dict[str, set[str]]:
        """Entity id -> the ids of the passages that mention it (as the engine's graph links them)."""
        ids = list(dict.fromkeys(entity_ids))
        out: dict[str, set[str]] = {}
        if not ids:
            return out
        for op, cypher in _MENTIONS:
            for e, pid in self.db.q(op, cypher, ids=ids):
                out.setdefault(e, set()).add(pid)
        return out

    def nearest_communities(self, vector: np.ndarray, k: int) -> list[str]:
        """The ids of (at most) the ``k`` communities whose report vectors the database's vector index finds
        nearest ``vector``, nearest first (approximate: the caller scores them exactly)."""
        if k <= 0 or not any(label == "CommunitySummary" for label, _ in vector_indexes(self.db)):
            return []
        rows = self.db.q("search community summaries", "CALL db.idx.vector.queryNodes('CommunitySummary', "
                         "'embedding', $k, vecf32($q)) YIELD node, score RETURN node.id ORDER BY score",
                         k=int(k), q=NumberList(np.asarray(vector, dtype=np.float32)))
        return [r[0] for r in rows]


__all__ = ["FalkorGraphQueries"]
