"""Document metadata on PostgreSQL: an index schema made before the ``document_metadata`` table
existed gets it when opened (an additive change: the schema version stays 2, nothing else moves),
and the stored JSON text comes back as written while filters read its ``jsonb`` copy."""
from __future__ import annotations

import psycopg

from hippo_engine.config import HippoConfig
from hippo_engine.store.metadata import parse_where
from hippo_engine.store.opening import open_index_store


def test_schema_without_the_table_gets_it_on_open(tmp_path, pg_dsn, pg_schema):
    config = HippoConfig(storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                         show_progress=False)
    db = open_index_store(tmp_path, config)
    with db.transaction():
        db.put_documents({"d": ["p"]})
    db.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{pg_schema}".document_metadata')
    db = open_index_store(tmp_path, config)
    assert db.get_meta("schema_version") == "2"
    assert db.document_passages(["d"]) == {"d": ["p"]} and db.document_metadata(["d"]) == {}
    meta = {"user": "alice", "big": 1e300, "exact": 0.1, "z": [1, {"y": None}]}
    db.put_document_metadata({"d": meta})
    assert db.document_metadata(["d"]) == {"d": meta}          # the text as written (not jsonb's spelling)
    assert db.matching_documents(parse_where({"big": {"$gt": 1e299}, "exact": 0.1})) == {"d": ["p"]}
    db.close()
