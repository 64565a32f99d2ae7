"""The documents of a FalkorDB index (:class:`DocumentNodes`, a part of
:class:`~.store.FalkorIndexStore`): ``(:Document {id, chunk_ids})`` with ``[:HAS_PASSAGE {pos}]`` to its
passages and ``[:MENTIONS]`` to the entities of their facts, the document registry
(``(:RegistryEntry {doc_id, seq, added, updated})``, see :mod:`hippo_engine.store.document_registry`) and
the documents' metadata (``(:DocumentMetadata {doc_id, metadata})``, one JSON object per document id).

``MENTIONS`` edges are derived: each commit recomputes those of the documents it touched (directly or
through the facts of their passages), so they always match the stored facts.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hippo_engine.store import document_registry as registry
from hippo_engine.store.base import StoreError
from hippo_engine.store.metadata import Filter, encode_metadata, matches


class DocumentNodes:
    """Documents, their registry and metadata on the graph of a store (mixed into the store: uses its
    ``transaction``, ``q`` and ``w``)."""

    location: str
    transaction: Any     # the store's (IndexStore.transaction)
    q: Any               # the store's reading and writing queries
    w: Any

    def __init__(self) -> None:
        super().__init__()
        self._touched: set[str] = set()     # passages whose facts or documents the open transaction changed
        self._touched_docs: set[str] = set()

    # ------------------------------------------------------------------ documents
    def put_documents(self, docs: Mapping[str, Sequence[str]]) -> None:
        rows = [{"id": d, "pids": list(pids), "pos": list(range(len(pids)))} for d, pids in docs.items()]
        with self.transaction():
            self._drop_documents(list(docs))
            if rows:
                self.w("write documents", "UNWIND $rows AS r CREATE (d:Document {id: r.id, chunk_ids: r.pids}) "
                       "WITH d, r UNWIND r.pos AS i MERGE (p:Passage {id: r.pids[i]}) CREATE (d)-[:HAS_PASSAGE "
                       "{pos: i}]->(p)", rows=rows)
            self._touched_docs.update(docs)
            self.register_documents(docs)

    def _drop_documents(self, keys: list[str]) -> None:
        """Remove the ``Document`` nodes of ``keys`` (and passage nodes left holding nothing)."""
        self.w("delete documents", "MATCH (d:Document) WHERE d.id IN $ids DETACH DELETE d", ids=keys)
        self.w("delete bare passages", "MATCH (p:Passage) WHERE p.embedding IS NULL AND NOT (p)--() DELETE p")

    def document_passages(self, doc_ids: Iterable[str]) -> dict[str, list[str]]:
        keys = list(dict.fromkeys(doc_ids))
        rows = self.q("read documents", "MATCH (d:Document) WHERE d.id IN $ids RETURN d.id, d.chunk_ids", ids=keys)
        return {d: list(pids) for d, pids in sorted(rows) if pids}

    def passage_documents(self, pids: Iterable[str]) -> dict[str, list[str]]:
        keys = list(dict.fromkeys(pids))
        out: dict[str, list[str]] = {}
        for p, d in self.q("read the documents of passages", "MATCH (d:Document)-[:HAS_PASSAGE]->(p:Passage) WHERE "
                           "p.id IN $ids RETURN DISTINCT p.id, d.id ORDER BY p.id, d.id", ids=keys):
            out.setdefault(p, []).append(d)
        return out

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        keys = list(dict.fromkeys(doc_ids))
        with self.transaction():
            self._drop_documents(keys)
            self.w("delete document metadata", "MATCH (m:DocumentMetadata) WHERE m.doc_id IN $ids DELETE m", ids=keys)
            self.unregister_documents(keys)

    def refresh_mentions(self) -> None:
        """Recompute the ``MENTIONS`` edges of the documents the open transaction touched."""
        pids, docs = sorted(self._touched), sorted(self._touched_docs)
        self._touched.clear()
        self._touched_docs.clear()
        if not (pids or docs):
            return
        if pids:
            docs += [r[0] for r in self.q("find documents of passages", "MATCH (d:Document)-[:HAS_PASSAGE]->"
                                          "(p:Passage) WHERE p.id IN $ids RETURN DISTINCT d.id", ids=pids)]
        docs = sorted(set(docs))
        self.w("clear mentions", "MATCH (d:Document)-[m:MENTIONS]->() WHERE d.id IN $ids DELETE m", ids=docs)
        self.w("write mentions", "MATCH (d:Document)-[:HAS_PASSAGE]->(p:Passage) WHERE d.id IN $ids MATCH "
               "(a:Entity)-[r:RELATED_TO]->(b:Entity) WHERE r.passage_id = p.id WITH DISTINCT d, a, b MERGE "
               "(d)-[:MENTIONS]->(a) MERGE (d)-[:MENTIONS]->(b)", ids=docs)
        self.w("write mentions", "MATCH (d:Document)-[:HAS_PASSAGE]->(p:Passage) WHERE d.id IN $ids MATCH "
               "(f:Fact)-[:INVOLVES]->(e:Entity) WHERE f.passage_id = p.id WITH DISTINCT d, e MERGE "
               "(d)-[:MENTIONS]->(e)", ids=docs)

    # ------------------------------------------------------------------ document registry
    def register_documents(self, doc_ids: Iterable[str]) -> None:
        got = registry.rows(doc_ids)
        if not got:
            return
        t = got[0][1]
        with self.transaction():
            self.w("register documents", "MATCH (e:RegistryEntry) WHERE e.doc_id IN $ids SET e.updated = $t, "
                   "e.updated_text = $tt", ids=[r[0] for r in got], t=t, tt=repr(t))
            top = self.q("register documents", "MATCH (e:RegistryEntry) RETURN coalesce(max(e.seq), 0)")[0][0]
            self.w("register documents", "UNWIND range(0, size($ids) - 1) AS i WITH i, $ids[i] AS id "
                   "OPTIONAL MATCH (e:RegistryEntry {doc_id: id}) WITH i, id, e WHERE e IS NULL "
                   "CREATE (:RegistryEntry {doc_id: id, seq: $top + 1 + i, added: $t, updated: $t, added_text: $tt, "
                   "updated_text: $tt})", ids=[r[0] for r in got], top=int(top), t=t, tt=repr(t))

    def unregister_documents(self, doc_ids: Iterable[str]) -> None:
        with self.transaction():
            self.w("unregister documents", "MATCH (e:RegistryEntry) WHERE e.doc_id IN $ids DELETE e",
                   ids=list(dict.fromkeys(doc_ids)))

    def document_count(self) -> int:
        return int(self.q("count documents", "MATCH (e:RegistryEntry) RETURN count(e)")[0][0])

    def document_page(self, offset: int = 0, limit: int = 50) -> list[tuple[str, float, float]]:
        return [(d, float(a), float(u)) for d, a, u in self.q(
            "list documents", "MATCH (e:RegistryEntry) RETURN e.doc_id, e.added_text, e.updated_text ORDER BY e.seq "
            "SKIP $offset LIMIT $limit", offset=int(offset), limit=int(limit))]

    def registry_rows(self) -> list[tuple[int, str, float, float]]:
        """Every registry row ``(seq, doc id, added, updated)`` (for the service's job tables)."""
        return [(int(s), d, float(a), float(u)) for s, d, a, u in self.q(
            "read the document registry", "MATCH (e:RegistryEntry) RETURN e.seq, e.doc_id, e.added_text, "
            "e.updated_text ORDER BY e.seq")]

    # ------------------------------------------------------------------ document metadata
    def put_document_metadata(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        rows = [{"id": d, "m": encode_metadata(m)} for d, m in metadata.items() if m]
        with self.transaction():
            self.w("delete document metadata", "MATCH (m:DocumentMetadata) WHERE m.doc_id IN $ids DELETE m",
                   ids=list(metadata))
            if rows:
                self.w("write document metadata", "UNWIND $rows AS r CREATE (:DocumentMetadata {doc_id: r.id, "
                       "metadata: r.m})", rows=rows)

    def document_metadata(self, doc_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        keys = list(dict.fromkeys(doc_ids))
        return {d: self._decode(d, m) for d, m in self.q(
            "read document metadata", "MATCH (m:DocumentMetadata) WHERE m.doc_id IN $ids RETURN m.doc_id, m.metadata",
            ids=keys)}

    def all_document_metadata(self) -> list[tuple[str, str]]:
        """Every ``(doc id, metadata JSON)`` (for the service's job tables)."""
        return [(d, m) for d, m in self.q("read document metadata", "MATCH (m:DocumentMetadata) RETURN m.doc_id, "
                                          "m.metadata")]

    def matching_documents(self, where: Filter) -> dict[str, list[str]]:
        """The documents whose metadata passes ``where``: the metadata is read from the graph and the
        filter applied here (the same predicate as the SQL backends', :func:`~hippo_engine.store.metadata.matches`)."""
        keep = [d for d, m in self.all_document_metadata() if matches(where, self._decode(d, m))]
        return self.document_passages(keep)

    def _decode(self, doc_id: str, text: str) -> dict[str, Any]:
        try:
            return json.loads(text)
        except ValueError as e:
            raise StoreError(f"{self.location}: unreadable metadata of document {doc_id}: {e}") from e


__all__ = ["DocumentNodes"]
