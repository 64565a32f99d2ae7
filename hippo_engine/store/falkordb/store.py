"""The index in one named graph of a FalkorDB server: :class:`FalkorIndexStore`.

The data model is the knowledge-base design's, so that a user's own Cypher finds the memory:

* ``(:Document {id, chunk_ids})-[:HAS_PASSAGE {pos}]->(:Passage {id, text, embedding})`` and
  ``(:Document)-[:MENTIONS]->(:Entity)`` (every entity of a fact of its passages);
* ``(:Entity {id, name, embedding})``; a triple of a passage is
  ``(:Entity)-[:RELATED_TO {fact, fact_id, predicate, subject, object, passage_id, pos}]->(:Entity)``; a
  hyperedge (an n-ary fact or sentence) is ``(:Fact {fact_id, text, entities, passage_id, pos})`` with
  ``[:INVOLVES]`` to its member entities; synonymy is ``(:Entity)-[:SYNONYM {score}]->(:Entity)``;
* ``(:Community {id, level, parent, title, summary, rating, data})`` with ``(:Community)-[:PARENT_OF]->
  (:Community)`` and ``(:Entity)-[:BELONGS_TO]->(:Community)``; ``(:Report {member_key, report, source})``;
* the embedding stores' texts and vectors (``embedding``: a ``vecf32`` property under a vector index;
  ``vector``: the stored bytes the engine reads back) on ``Passage``, ``Entity``, ``FactText`` and
  ``CommunitySummary`` nodes (:mod:`.vectors`);
* ``(:Meta {key, value})`` (the schema version, the index identity and version), the document registry
  (``(:RegistryEntry {doc_id, seq, added, updated})``) and document metadata
  (``(:DocumentMetadata {doc_id, metadata})``) (:mod:`.documents`).

The server returns floating-point properties with 15 significant digits, so numbers that must come back
exactly (synonymy scores, registry times) also keep their ``repr`` in a ``*_text`` property. Writes go
through :class:`~.graph.VersionedGraph` (a copy of the graph swapped in at commit); a public write method
outside a transaction is one transaction of its own. Range indexes (node ids, facts' passages and ids)
missing at open are made then.
The graph file is not kept in the database: the index folder holds it, as with SQLite (every host
reading the graph opens that folder; on a running server shared by hosts, each rebuilds it from the
database, which holds everything it is derived from).
"""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id, fact_text, hyperedge_id, member_key, triple_id
from hippo_engine.store.base import IndexStore, StoreError, Triple, encode_entities, hyperedges_by_passage
from hippo_engine.store.falkordb.documents import DocumentNodes
from hippo_engine.store.falkordb.graph import VersionedGraph
from hippo_engine.store.falkordb.vector_index import rebuild_vector_indexes

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
#: (label, property) range indexes made with the graph
RANGE_INDEXES = (("Meta", "key"), ("Passage", "id"), ("Entity", "id"), ("FactText", "id"), ("CommunitySummary", "id"),
                 ("Document", "id"), ("Fact", "passage_id"), ("Community", "id"), ("Report", "member_key"),
                 ("RegistryEntry", "doc_id"), ("DocumentMetadata", "doc_id"))
#: (relationship type, property) indexes made with the graph
EDGE_INDEXES = (("RELATED_TO", "passage_id"), ("RELATED_TO", "fact_id"))


class FalkorIndexStore(DocumentNodes, IndexStore):
    """An index kept in graph ``graph.name`` (a :class:`~.graph.VersionedGraph`). ``owned_server``: the
    embedded server to stop on close (set by the opener)."""

    owned_server: Any = None
    address: Any = None      # the server's FalkorAddress and the index folder (set by the opener)
    folder: Any = None

    def __init__(self, graph: VersionedGraph):
        super().__init__()
        self.graph = graph
        self._stale_vectors: dict[str, int] = {}        # label -> dimension: vector indexes to rebuild at commit
        #: (label, reason) of every vector index this store rebuilt: at open (:func:`~.vector_index.
        #: check_vector_indexes`) or at the commit of a write that removed vectors
        self.vector_rebuilds: list[tuple[str, str]] = []
        self.location = f"FalkorDB graph {graph.name} on {graph.where}"
        self.shown_location = f"graph {graph.name}"
        graph.discard_leftovers()
        if self.get_meta("schema_version") is None or self._missing_indexes():
            with self.transaction():
                self._create()
        have = self.get_meta("schema_version")
        if have != SCHEMA_VERSION:
            raise StoreError(f"{self.location} has schema version {have}, this hippo-engine reads {SCHEMA_VERSION}")

    def _missing_indexes(self) -> list[str]:
        """The ``CREATE INDEX`` statements of the range indexes the graph lacks."""
        have = {(r[0], p) for r in self.graph.query("list indexes", "CALL db.indexes() YIELD label, properties "
                                                    "RETURN label, properties") for p in r[1]}
        return [f"CREATE INDEX FOR (n:{label}) ON (n.{prop})" for label, prop in RANGE_INDEXES
                if (label, prop) not in have] + \
               [f"CREATE INDEX FOR ()-[r:{kind}]-() ON (r.{prop})" for kind, prop in EDGE_INDEXES
                if (kind, prop) not in have]

    def _create(self) -> None:
        """The missing indexes and the schema version (in a transaction)."""
        for statement in self._missing_indexes():
            self.w("create an index", statement)
        if self.get_meta("schema_version") is None:
            self.set_meta("schema_version", SCHEMA_VERSION)

    # ------------------------------------------------------------------ transactions
    def _begin(self) -> None:
        self.graph.begin()

    def _commit(self) -> None:
        self.refresh_mentions()
        self._rebuild_stale_vectors()
        self.graph.commit()

    def _rebuild_stale_vectors(self) -> None:
        """Rebuild the vector indexes the transaction removed vectors from (rolled back if that fails)."""
        stale, self._stale_vectors = self._stale_vectors, {}
        if not stale:
            return
        logger.info("%s: rebuilding the vector indexes of %s (vectors were removed)", self.location,
                    ", ".join(sorted(stale)))
        try:
            rebuild_vector_indexes(self, stale)
        except BaseException:
            self._rollback()
            raise
        self.vector_rebuilds.extend((label, "vectors removed") for label in sorted(stale))

    def _rollback(self) -> None:
        self._touched.clear()
        self._stale_vectors.clear()
        self.graph.rollback()

    def stale_vector_index(self, label: str, dim: int) -> None:
        """Have the open transaction rebuild ``label``'s vector index (``dim`` dimensions) at commit: a
        FalkorDB vector index keeps a dead entry for each vector deleted or set over (:mod:`.vector_index`)."""
        self._stale_vectors[label] = dim

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.graph.snapshot():
            yield

    def q(self, op: str, cypher: str, **params: Any) -> list[list[Any]]:
        """Rows of a reading query (``op`` names it in errors)."""
        return self.graph.query(op, cypher, params or None)

    def w(self, op: str, cypher: str, **params: Any) -> list[list[Any]]:
        """Run a writing query (inside the open transaction)."""
        return self.graph.write(op, cypher, params or None)

    # ------------------------------------------------------------------ metadata
    def get_meta(self, key: str) -> str | None:
        rows = self.q("read metadata", "MATCH (m:Meta {key: $key}) RETURN m.value", key=key)
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self.w("write metadata", "MERGE (m:Meta {key: $key}) SET m.value = $value", key=key, value=value)

    # ------------------------------------------------------------------ passages
    def passage_ids(self) -> list[str]:
        return [r[0] for r in self.q("list passages", "MATCH (p:Passage) WHERE p.embedding IS NOT NULL RETURN p.id")]

    def has_passage(self, pid: str) -> bool:
        return bool(self.q("find a passage", "MATCH (p:Passage {id: $id}) WHERE p.embedding IS NOT NULL RETURN 1",
                           id=pid))

    def passage_count(self) -> int:
        return int(self.q("count passages", "MATCH (p:Passage) WHERE p.embedding IS NOT NULL RETURN count(p)")[0][0])

    # ------------------------------------------------------------------ facts
    def load_passage_triples(self) -> dict[str, list[Triple]]:
        out: dict[str, list[Triple]] = {}
        for pid, s, p, o in self.q("load triples", "MATCH ()-[r:RELATED_TO]->() RETURN r.passage_id, r.subject, "
                                   "r.predicate, r.object ORDER BY r.passage_id, r.pos"):
            out.setdefault(pid, []).append((s, p, o))
        return out

    def put_passage_triples(self, pid: str, triples: Sequence[Triple]) -> None:
        rows = [{"pos": i, "s": s, "p": p, "o": o, "sid": entity_id(s), "oid": entity_id(o),
                 "fact": fact_text((s, p, o)), "fid": triple_id((s, p, o))} for i, (s, p, o) in enumerate(triples)]
        with self.transaction():
            self.delete_passage_triples([pid])
            if rows:
                self.w("write triples", "UNWIND $rows AS r MERGE (s:Entity {id: r.sid}) ON CREATE SET s.name = r.s "
                       "MERGE (o:Entity {id: r.oid}) ON CREATE SET o.name = r.o CREATE (s)-[:RELATED_TO {passage_id: "
                       "$pid, pos: r.pos, subject: r.s, predicate: r.p, object: r.o, fact: r.fact, fact_id: r.fid}]"
                       "->(o)", rows=rows, pid=pid)
            self._touched.add(pid)

    def delete_passage_triples(self, pids: Iterable[str]) -> None:
        self._delete_facts("delete triples", "MATCH ()-[r:RELATED_TO]->() WHERE r.passage_id IN $pids DELETE r", pids)

    def _delete_facts(self, op: str, cypher: str, pids: Iterable[str]) -> None:
        """Run the deletion ``cypher`` of the facts of ``pids`` (their documents' mentions recomputed at commit)."""
        keys = list(dict.fromkeys(pids))
        with self.transaction():
            self.w(op, cypher, pids=keys)
            self._touched.update(keys)

    def load_passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        return hyperedges_by_passage(self.q("load hyperedges", "MATCH (f:Fact) RETURN f.passage_id, f.text, "
                                            "f.entities ORDER BY f.passage_id, f.pos"), self.location)

    def put_passage_hyperedges(self, pid: str, hyperedges: Sequence[Hyperedge]) -> None:
        rows = [{"pos": i, "text": h.text, "entities": encode_entities(h.entities), "fid": hyperedge_id(h),
                 "members": [{"id": entity_id(e), "name": e} for e in dict.fromkeys(h.entities)]}
                for i, h in enumerate(hyperedges)]
        with self.transaction():
            self.delete_passage_hyperedges([pid])
            if rows:
                self.w("write hyperedges", "UNWIND $rows AS r CREATE (f:Fact {passage_id: $pid, pos: r.pos, text: "
                       "r.text, entities: r.entities, fact_id: r.fid}) WITH f, r UNWIND r.members AS m MERGE "
                       "(e:Entity {id: m.id}) ON CREATE SET e.name = m.name CREATE (f)-[:INVOLVES]->(e)",
                       rows=rows, pid=pid)
            self._touched.add(pid)

    def delete_passage_hyperedges(self, pids: Iterable[str]) -> None:
        self._delete_facts("delete hyperedges", "MATCH (f:Fact) WHERE f.passage_id IN $pids DETACH DELETE f", pids)

    def facts_of(self, fact_ids: Iterable[str]) -> dict[str, Triple | Hyperedge]:
        want = list(dict.fromkeys(fact_ids))
        out: dict[str, Triple | Hyperedge] = {}
        for fid, s, p, o in self.q("find facts", "MATCH ()-[r:RELATED_TO]->() WHERE r.fact_id IN $ids RETURN "
                                   "r.fact_id, r.subject, r.predicate, r.object", ids=want):
            out.setdefault(fid, (s, p, o))
        for fid, text, ents in self.q("find facts", "MATCH (f:Fact) WHERE f.fact_id IN $ids RETURN f.fact_id, "
                                      "f.text, f.entities", ids=want):
            out.setdefault(fid, Hyperedge(text, tuple(json.loads(ents))))
        return out

    def passage_fact_ids(self, pids: Iterable[str]) -> set[str]:
        pids = list(dict.fromkeys(pids))
        got = self.q("find facts of passages", "MATCH ()-[r:RELATED_TO]->() WHERE r.passage_id IN $pids RETURN "
                     "r.fact_id", pids=pids)
        got += self.q("find facts of passages", "MATCH (f:Fact) WHERE f.passage_id IN $pids RETURN f.fact_id",
                      pids=pids)
        return {r[0] for r in got}

    # ------------------------------------------------------------------ synonymy
    def load_synonymy(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s, d, w in self.q("load synonymy", "MATCH (a:Entity)-[r:SYNONYM]->(b:Entity) RETURN a.id, b.id, "
                              "r.score_text"):
            out.setdefault(s, {})[d] = float(w)
        return out

    def replace_synonymy_lists(self, lists: Mapping[str, Mapping[str, float]]) -> None:
        if not lists:
            return
        rows = [{"s": s, "d": d, "w": float(w), "t": repr(float(w))} for s, nb in lists.items() for d, w in nb.items()]
        with self.transaction():
            self.w("clear synonymy", "MATCH (a:Entity)-[r:SYNONYM]->() WHERE a.id IN $srcs DELETE r", srcs=list(lists))
            if rows:
                self.w("write synonymy", "UNWIND $rows AS r MERGE (a:Entity {id: r.s}) MERGE (b:Entity {id: r.d}) "
                       "CREATE (a)-[:SYNONYM {score: r.w, score_text: r.t}]->(b)", rows=rows)

    # ------------------------------------------------------------------ communities (HiRAG)
    def load_community_rows(self) -> list[str]:
        return [r[0] for r in self.q("load communities", "MATCH (c:Community) RETURN c.data ORDER BY c.level, c.id")]

    def load_report_rows(self) -> list[tuple[str, str]]:
        return [(k, r) for k, r in self.q("load community reports", "MATCH (r:Report) RETURN r.member_key, r.report "
                                          "ORDER BY r.member_key")]

    def replace_communities(self, rows: Sequence[tuple[str, int, str | None, str]],
                            reports: Sequence[tuple[str, str, str]]) -> None:
        by_key = {k: json.loads(r) for k, r, _ in reports}
        nodes = [_community_node(cid, level, parent, data, by_key) for cid, level, parent, data in rows]
        with self.transaction():
            self.w("clear communities", "MATCH (c:Community) DETACH DELETE c")
            self.w("clear community reports", "MATCH (r:Report) DELETE r")
            if nodes:
                self.w("write communities", "UNWIND $rows AS r CREATE (c:Community {id: r.id, level: r.level, parent: "
                       "r.parent, data: r.data, title: r.title, summary: r.summary, rating: r.rating}) WITH c, r "
                       "UNWIND r.entities AS eid MATCH (e:Entity {id: eid}) CREATE (e)-[:BELONGS_TO]->(c)", rows=nodes)
                self.w("link communities", "MATCH (c:Community) WHERE c.parent IS NOT NULL MATCH (p:Community "
                       "{id: c.parent}) CREATE (p)-[:PARENT_OF]->(c)")
            if reports:
                self.w("write community reports", "UNWIND $rows AS r CREATE (:Report {member_key: r.k, report: r.r, "
                       "source: r.s})", rows=[{"k": k, "r": r, "s": s} for k, r, s in reports])

    def graph_queries(self):
        """The kb_* modes' traversals and community search, asked of this graph (:mod:`.queries`)."""
        from hippo_engine.store.falkordb.queries import FalkorGraphQueries
        return FalkorGraphQueries(self)

    # ------------------------------------------------------------------ vectors and lifetime
    def embedding_store(self, namespace: str, dim: int, **options):
        """The :class:`~.vectors.FalkorEmbeddingStore` of ``namespace``: every vector mirrored in memory."""
        from hippo_engine.store.falkordb.vectors import FalkorEmbeddingStore
        return FalkorEmbeddingStore(self, namespace, dim, **options)

    def close(self) -> None:
        """Roll back what is open, close the connection and leave the embedded server (``owned_server``)."""
        if self._depth:
            self._rollback()
        with contextlib.suppress(Exception):
            self.graph.client.close()
        server, self.owned_server = self.owned_server, None
        if server is not None:
            server.stop()


def _community_node(cid: str, level: int, parent: str | None, data: str, reports: Mapping[str, Any]) -> dict:
    """The properties of a ``Community`` node: its row, and title, summary and rating from its report."""
    parsed = json.loads(data)
    entities = [str(e) for e in parsed.get("entities") or []] if isinstance(parsed, dict) else []
    report = reports.get(member_key(entities), {}) if entities else {}
    report = report if isinstance(report, dict) else {}
    rating = report.get("rating")
    return {"id": cid, "level": int(level), "parent": parent, "data": data, "entities": entities,
            "title": report.get("title"), "summary": report.get("summary"),
            "rating": float(rating) if isinstance(rating, (int, float)) else None}


__all__ = ["SCHEMA_VERSION", "FalkorIndexStore"]
