"""Document metadata in a PostgreSQL index (:class:`MetadataTables`, a mixin of
:class:`~hippo_engine.store.postgres.db.PostgresIndexStore`).

Table ``document_metadata`` keeps each document's metadata as the JSON text it was given
(``metadata``, read back as written) and as ``jsonb`` (``metadata_json``, a stored generated column)
that filters read: :func:`hippo_engine.store.metadata.sql_where` compiles a filter to ``jsonb``
operators with every key and value passed as a parameter.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from hippo_engine.store.base import IndexStore, StoreError
from hippo_engine.store.metadata import Filter, encode_metadata, sql_where


class MetadataTables(IndexStore):
    """Document metadata and the fact ids of passages (needs ``conn``, ``transaction``,
    ``location`` and ``q``, the quoted schema, of the store it is mixed into)."""

    q: str
    conn: Any

    def put_document_metadata(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        with self.transaction():
            self.conn.execute(f"DELETE FROM {self.q}.document_metadata WHERE doc_id = ANY(%s)", (list(metadata),))
            rows = [(d, encode_metadata(m)) for d, m in metadata.items() if m]
            if rows:
                with self.conn.cursor() as cur:
                    cur.executemany(f"INSERT INTO {self.q}.document_metadata (doc_id, metadata) VALUES (%s, %s)",
                                    rows)

    def document_metadata(self, doc_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for d, text in self.conn.execute(f"SELECT doc_id, metadata FROM {self.q}.document_metadata "
                                         "WHERE doc_id = ANY(%s)", (list(dict.fromkeys(doc_ids)),)):
            try:
                out[d] = json.loads(text)
            except ValueError as e:
                raise StoreError(f"{self.location}: unreadable metadata of document {d!r}: {e}") from e
        return out

    def matching_documents(self, where: Filter) -> dict[str, list[str]]:
        cond, params = sql_where(where, "postgres", "m.metadata_json")
        out: dict[str, list[str]] = {}
        for d, p in self.conn.execute(f"SELECT m.doc_id, d.passage_id FROM {self.q}.document_metadata m JOIN "
                                      f"{self.q}.documents d ON d.doc_id = m.doc_id WHERE {cond} "
                                      "ORDER BY m.doc_id, d.pos", params):
            out.setdefault(d, []).append(p)
        return out

    def passage_fact_ids(self, pids: Iterable[str]) -> set[str]:
        keys = list(dict.fromkeys(pids))
        if not keys:
            return set()
        rows = self.conn.execute(f"SELECT fact_id FROM {self.q}.passage_triples WHERE passage_id = ANY(%s) UNION "
                                 f"SELECT fact_id FROM {self.q}.passage_hyperedges WHERE passage_id = ANY(%s)",
                                 (keys, keys)).fetchall()
        return {r[0] for r in rows}


__all__ = ["MetadataTables"]
