"""Document metadata in every backend (SQLite; PostgreSQL in the integration tier): round trip,
replace and clear, removal with the documents, filters evaluated in the database agreeing with
the Python reference, and the table added to an index made before it existed."""
from __future__ import annotations

import sqlite3

import pytest
from store.test_index_store_contract import BACKENDS

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import hyperedge_id, triple_id
from hippo_engine.store.base import IndexStore
from hippo_engine.store.metadata import matches, parse_where
from hippo_engine.store.opening import open_index_store

DOCS = {
    "a1": {"user": "alice", "session": 1, "time": 10.5, "tags": ["x"]},
    "a2": {"user": "alice", "session": 2, "time": 20, "private": True},
    "b1": {"user": "bob", "session": 1, "time": 15},
    "b2": {"user": "bob", "time": "2024-05-01T10:00"},
    "n1": {"note": "no user", "time": None},
}


@pytest.fixture(params=BACKENDS)
def db(request, tmp_path, storage_settings):
    config = HippoConfig(storage_backend=request.param, show_progress=False, **storage_settings(request.param))
    store = open_index_store(tmp_path, config)
    yield store
    store.close()


def _fill(db: IndexStore) -> None:
    with db.transaction():
        db.put_documents({d: [f"p-{d}", "p-shared"] if d in ("a2", "b1") else [f"p-{d}"] for d in DOCS})
        db.put_document_metadata(DOCS)


def test_round_trip_replace_clear_and_delete(db):
    _fill(db)
    assert db.document_metadata(["a1", "b2", "unknown"]) == {"a1": DOCS["a1"], "b2": DOCS["b2"]}
    db.put_document_metadata({"a1": {"user": "carol", "ünï": "✓"}, "b2": {}})
    assert db.document_metadata(["a1", "b2"]) == {"a1": {"user": "carol", "ünï": "✓"}}
    with db.transaction():
        db.delete_documents(["a1"])
    assert db.document_metadata(["a1"]) == {} and db.document_passages(["a1"]) == {}
    with pytest.raises(RuntimeError), db.transaction():
        db.put_document_metadata({"b1": {"user": "mallory"}})
        raise RuntimeError("rolled back")
    assert db.document_metadata(["b1"]) == {"b1": DOCS["b1"]}


@pytest.mark.parametrize("where", [
    {"user": "alice"}, {"user": {"$ne": "alice"}}, {"user": {"$in": ["alice", "carol"]}},
    {"user": {"$nin": ["alice"]}}, {"session": 1}, {"session": 1.0}, {"session": True},
    {"time": {"$gte": 10.5, "$lt": 20}}, {"time": {"$gt": "2024"}}, {"time": {"$lte": 20}},
    {"private": True}, {"private": {"$ne": False}}, {"note": {"$in": ["no user", 3, False]}},
    {"$or": [{"user": "bob", "session": 1}, {"private": True}]},
    {"$and": [{"user": "alice"}, {"$or": [{"session": 2}, {"time": {"$lt": 11}}]}]},
    {"tags": "x"}, {"nobody": "x"},
])
def test_filters_in_the_database_agree_with_python(db, where):
    _fill(db)
    got = db.matching_documents(parse_where(where))
    assert sorted(got) == sorted(d for d, m in DOCS.items() if matches(where, m))
    for d, pids in got.items():
        assert pids == db.document_passages([d])[d]


def test_passage_fact_ids(db):
    h = Hyperedge("Alice met Bob.", ("alice", "bob"))
    with db.transaction():
        db.put_passage_triples("p1", [("alice", "knows", "bob"), ("bob", "lives in", "oslo")])
        db.put_passage_hyperedges("p2", [h])
        db.put_passage_triples("p3", [("carol", "likes", "tea")])
    assert db.passage_fact_ids(["p1", "p2", "none"]) == {triple_id(("alice", "knows", "bob")),
                                                         triple_id(("bob", "lives in", "oslo")), hyperedge_id(h)}
    assert db.passage_fact_ids([]) == set()


def test_sqlite_index_made_before_metadata_gets_the_table(tmp_path):
    """An index file without ``document_metadata`` (an older hippo-engine) is opened, the table is
    added and nothing else changes."""
    config = HippoConfig(show_progress=False)
    db = open_index_store(tmp_path, config)
    with db.transaction():
        db.put_documents({"d": ["p"]})
    path = db.path
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE document_metadata")
    conn.commit()
    conn.close()
    db = open_index_store(tmp_path, config)
    assert db.document_passages(["d"]) == {"d": ["p"]} and db.document_metadata(["d"]) == {}
    db.put_document_metadata({"d": {"user": "alice"}})
    assert db.matching_documents(parse_where({"user": "alice"})) == {"d": ["p"]}
    db.close()
