"""The IndexStore contract, run against every registered backend (``hippo_engine.store.registry``:
SQLite and PostgreSQL built in), each opened as an index folder is (``open_index_store``); a new
backend is accepted by registering it and passing these tests.

Every method of ``IndexStore`` and the embedding store API: round trips, order, replace
semantics, transactions (rollback, nesting, after-commit hooks), snapshot isolation against a
second connection, and equal matrices from both backends for the same writes.
"""
from __future__ import annotations

import numpy as np
import pytest

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import hyperedge_id, triple_id
from hippo_engine.store import IndexDB, StoreError
from hippo_engine.store.base import IndexStore
from hippo_engine.store.opening import open_index_store
from hippo_engine.store.registry import backend_names

DIM = 8
BACKENDS = backend_names()


@pytest.fixture(params=BACKENDS)
def opener(request, tmp_path, storage_settings):
    """A function opening (another connection to) one index of the parametrized backend."""
    opened: list[IndexStore] = []
    config = HippoConfig(storage_backend=request.param, show_progress=False, **storage_settings(request.param))

    def open_store() -> IndexStore:
        db = open_index_store(tmp_path, config)
        opened.append(db)
        return db

    yield open_store
    for db in opened:
        db.close()


@pytest.fixture
def db(opener) -> IndexStore:
    return opener()


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ids whose bytewise order differs from a locale's (case, accents, punctuation)
KEYS = ["entity-b", "entity-B", "entity-a", "entity-é", "entity-Z", "entity-_", "entity-10", "entity-9", "entity-ä"]


# ---------------------------------------------------------------------------------------- metadata
def test_meta_round_trip_and_overwrite(db):
    assert db.get_meta("version") is None
    assert db.get_meta("schema_version") == ("2" if type(db).__name__ == "PostgresIndexStore" else "1")
    db.set_meta("version", "1")
    with db.transaction():
        db.set_meta("version", "2")
        db.set_meta("model", "ünïcode ✓")
    assert db.get_meta("version") == "2" and db.get_meta("model") == "ünïcode ✓"
    assert isinstance(db.location, str) and db.location


# ---------------------------------------------------------------------------------------- passages and facts
def test_passages_through_the_passage_store(db):
    assert db.passage_ids() == [] and db.passage_count() == 0 and not db.has_passage("p1")
    st = db.embedding_store("passage", DIM)
    with db.transaction():
        st.upsert(["p2", "p1"], ["two", "one"], unit_rows(2))
    assert sorted(db.passage_ids()) == ["p1", "p2"] and db.passage_count() == 2
    assert db.has_passage("p1") and not db.has_passage("p3")


def test_triples_round_trip_in_order_replace_and_delete(db):
    t1 = [("b", "r", "c"), ("a", "r", "c"), ("a", "r", "c")]      # stored order, duplicates kept
    with db.transaction():
        db.put_passage_triples("p1", t1)
        db.put_passage_triples("p2", [("x", "y", "z")])
        db.put_passage_triples("p3", [])
    assert db.load_passage_triples() == {"p1": t1, "p2": [("x", "y", "z")]}
    db.put_passage_triples("p1", [("n", "e", "w")])                # replaces, not appends
    assert db.load_passage_triples()["p1"] == [("n", "e", "w")]
    db.delete_passage_triples(["p1", "unknown"])
    assert db.load_passage_triples() == {"p2": [("x", "y", "z")]}


def test_hyperedges_round_trip_replace_and_delete(db):
    h = [Hyperedge("Ann met Bob in Paris.", ("ann", "bob", "paris")), Hyperedge("Ann: ✓", ("ann",))]
    db.put_passage_hyperedges("p1", h)
    db.put_passage_hyperedges("p2", [Hyperedge("x", ())])
    assert db.load_passage_hyperedges() == {"p1": h, "p2": [Hyperedge("x", ())]}
    db.put_passage_hyperedges("p1", h[:1])
    assert db.load_passage_hyperedges()["p1"] == h[:1]
    db.delete_passage_hyperedges(["p2"])
    assert set(db.load_passage_hyperedges()) == {"p1"}


# ---------------------------------------------------------------------------------------- synonymy
def test_facts_by_id(db):
    t1, t2 = ("ann", "met", "bob"), ("bob", "lives in", "paris ✓")
    h = Hyperedge("Ann met Bob in Paris.", ("ann", "bob", "paris"))
    db.put_passage_triples("p1", [t1, t2])
    db.put_passage_triples("p2", [t2])                    # the same fact in two passages: once
    db.put_passage_hyperedges("p3", [h])
    ids = [triple_id(t1), triple_id(t2), hyperedge_id(h)]
    got = db.facts_of(ids + ["fact-unknown"])
    assert got == {ids[0]: t1, ids[1]: t2, ids[2]: h}
    db.delete_passage_triples(["p1"])
    assert db.facts_of(ids[:2]) == {ids[1]: t2}
    assert db.facts_of([]) == {}


def test_synonymy_replace_semantics(db):
    db.replace_synonymy_lists({"a": {"b": 0.91, "c": 0.875}, "b": {"a": 0.91}, "c": {"a": 0.875}})
    assert db.load_synonymy() == {"a": {"b": 0.91, "c": 0.875}, "b": {"a": 0.91}, "c": {"a": 0.875}}
    score = float(np.float32(0.8123456))                           # a float32 score survives exactly
    db.replace_synonymy_lists({"a": {"d": score}, "b": {}})         # a replaced, b cleared, c untouched
    assert db.load_synonymy() == {"a": {"d": score}, "c": {"a": 0.875}}
    db.replace_synonymy_lists({})
    assert db.load_synonymy() == {"a": {"d": score}, "c": {"a": 0.875}}


# ---------------------------------------------------------------------------------------- documents
def test_documents(db):
    db.put_documents({"doc-1": ["p3", "p1", "p2"], "doc-2": ["p1"]})
    assert db.document_passages(["doc-1", "doc-2", "nope"]) == {"doc-1": ["p3", "p1", "p2"], "doc-2": ["p1"]}
    assert db.passage_documents(["p1", "p3", "p9"]) == {"p1": ["doc-1", "doc-2"], "p3": ["doc-1"]}
    db.put_documents({"doc-1": ["p4"]})                            # replaces that document's list
    assert db.document_passages(["doc-1"]) == {"doc-1": ["p4"]}
    assert db.passage_documents(["p3"]) == {}
    db.delete_documents(["doc-2", "nope"])
    assert db.document_passages(["doc-1", "doc-2"]) == {"doc-1": ["p4"]}
    assert db.document_passages([]) == {} and db.passage_documents([]) == {}


def test_document_registry_lists_every_document_in_the_order_first_indexed(db):
    """Issue 39: one document list per index, written with the document rows (both backends)."""
    assert db.document_count() == 0 and db.document_page() == []
    db.put_documents({"b": ["p1"], "a": ["p2"]})
    first = db.document_page()
    assert [r[0] for r in first] == ["b", "a"] and all(r[1] == r[2] for r in first)
    db.put_documents({"c": ["p3"], "b": ["p4"]})                   # b indexed again: keeps its place, touched
    page = db.document_page()
    assert [r[0] for r in page] == ["b", "a", "c"] and page[0][1] == first[0][1] and page[0][2] >= first[0][2]
    assert [r[0] for r in db.document_page(offset=1, limit=1)] == ["a"]
    db.delete_documents(["a", "nope"])
    db.register_documents(["doc-legacy"])                           # a passage kept without document rows
    assert [r[0] for r in db.document_page()] == ["b", "c", "doc-legacy"] and db.document_count() == 3
    db.unregister_documents(["doc-legacy", "nope"])
    assert db.document_count() == 2


# ---------------------------------------------------------------------------------------- communities
def test_communities_replace_all_and_keep_exactly_the_given_reports(db):
    rows = [("c-b", 1, "c-a", '{"id": "c-b"}'), ("c-a", 0, None, '{"id": "c-a"}'), ("c-B", 1, "c-a", '{"id": "c-B"}')]
    with db.transaction():
        db.replace_communities(rows, [("k1", '{"r": 1}', "llm"), ("k2", '{"r": 2}', "fallback")])
    assert db.load_community_rows() == ['{"id": "c-a"}', '{"id": "c-B"}', '{"id": "c-b"}']   # by (level, id)
    assert sorted(db.load_report_rows()) == [("k1", '{"r": 1}'), ("k2", '{"r": 2}')]
    with db.transaction():
        db.replace_communities(rows[:1], [("k2", '{"r": 3}', "llm")])
    assert db.load_community_rows() == ['{"id": "c-b"}']
    assert db.load_report_rows() == [("k2", '{"r": 3}')]


# ---------------------------------------------------------------------------------------- transactions
def test_error_rolls_back_every_write(db):
    st = db.embedding_store("entity", DIM)
    with db.transaction():
        db.set_meta("version", "1")
        st.upsert(KEYS[:2], ["t0", "t1"], unit_rows(2))
    with pytest.raises(RuntimeError, match="boom"):
        with db.transaction():
            db.set_meta("version", "2")
            db.put_passage_triples("p1", [("a", "b", "c")])
            db.replace_synonymy_lists({"a": {"b": 0.9}})
            db.put_documents({"d": ["p1"]})
            st.upsert(KEYS[2:4], ["t2", "t3"], unit_rows(2, 1))
            st.delete(KEYS[:1])
            raise RuntimeError("boom")
    st.reload()
    assert db.get_meta("version") == "1" and db.load_passage_triples() == {} and db.load_synonymy() == {}
    assert db.document_passages(["d"]) == {}
    assert list(st.ids) == sorted(KEYS[:2])
    assert list(db.embedding_store("entity", DIM).ids) == sorted(KEYS[:2])


def test_nested_transactions_join_the_outer_one(db):
    with pytest.raises(ValueError):
        with db.transaction():
            with db.transaction():
                db.set_meta("inner", "1")
            assert db.get_meta("inner") == "1"                     # visible inside the outer one
            raise ValueError
    assert db.get_meta("inner") is None                            # the inner block rolled back with it
    with pytest.raises(ValueError):
        with db.transaction():
            db.set_meta("outer", "1")
            with db.transaction():
                raise ValueError
    assert db.get_meta("outer") is None
    with db.transaction():
        with db.transaction():
            db.set_meta("both", "1")
        db.set_meta("both", "2")
    assert db.get_meta("both") == "2"


def test_after_commit(db):
    calls = []
    db.after_commit(lambda: calls.append("now"))                   # outside a transaction: at once
    assert calls == ["now"]

    def hook():
        calls.append("hook")
    with db.transaction():
        db.after_commit(hook)
        with db.transaction():
            db.after_commit(hook)                                  # the same function: once
        assert calls == ["now"]
    assert calls == ["now", "hook"]
    with pytest.raises(KeyError):
        with db.transaction():
            db.after_commit(hook)
            raise KeyError
    assert calls == ["now", "hook"]                                # dropped on rollback
    with db.transaction():
        db.after_commit(lambda: 1 / 0)                             # a failing hook is logged; the commit stands
        db.set_meta("kept", "1")
    assert db.get_meta("kept") == "1"


def test_snapshot_isolation_against_a_second_connection(opener):
    reader, writer = opener(), opener()
    writer.set_meta("version", "1")
    writer.put_passage_triples("p1", [("a", "b", "c")])
    with reader.snapshot():
        assert reader.get_meta("version") == "1"
        with writer.transaction():
            writer.set_meta("version", "2")
            writer.put_passage_triples("p2", [("d", "e", "f")])
        assert reader.get_meta("version") == "1"                   # the snapshot's state...
        assert set(reader.load_passage_triples()) == {"p1"}        # ...for every table
        with reader.snapshot():                                    # nested: the same snapshot
            assert reader.get_meta("version") == "1"
    assert reader.get_meta("version") == "2" and set(reader.load_passage_triples()) == {"p1", "p2"}


def test_a_second_connection_sees_committed_writes_only(opener):
    a, b = opener(), opener()
    with a.transaction():
        a.set_meta("version", "5")
        assert b.get_meta("version") is None
    assert b.get_meta("version") == "5"


# ---------------------------------------------------------------------------------------- embedding stores
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_embedding_store_round_trip(db, dtype):
    st = db.embedding_store("entity", DIM, vector_dtype=dtype)
    assert len(st) == 0 and st.ids.shape == (0,) and st.matrix.shape == (0, DIM)
    vecs = unit_rows(len(KEYS))
    rng = np.random.default_rng(3)
    for part in np.array_split(rng.permutation(len(KEYS)), 3):
        with db.transaction():
            st.upsert([KEYS[i] for i in part], [f"text {KEYS[i]}" for i in part], vecs[part])
    assert list(st.ids) == sorted(KEYS)                            # bytewise, like Python's sort
    expect = vecs if dtype == "float32" else vecs.astype(np.float16).astype(np.float32)
    order = [KEYS.index(k) for k in sorted(KEYS)]
    np.testing.assert_array_equal(st.matrix, expect[order])
    assert st.matrix.dtype == np.float32
    again = db.embedding_store("entity", DIM, vector_dtype=dtype)  # what a fresh load reads
    np.testing.assert_array_equal(again.matrix, st.matrix)
    assert list(again.ids) == list(st.ids)
    k = "entity-é"
    assert k in again and "nope" not in again and len(again) == len(KEYS)
    assert again.text(k) == f"text {k}" and again.row(k) == sorted(KEYS).index(k)
    assert again.texts([k, "entity-a"]) == [f"text {k}", "text entity-a"]
    assert again.nbytes()["ram"] + again.nbytes()["mapped"] == len(KEYS) * DIM * 4
    assert again.namespace == "entity" and again.dim == DIM


def test_embedding_upsert_replaces_repeated_key_wins_and_delete(db):
    st = db.embedding_store("fact", DIM)
    v = unit_rows(4)
    st.upsert(["f1", "f2"], ["one", "two"], v[:2])
    st.upsert(["f2", "f3", "f3"], ["TWO", "three?", "three"], v[1:4][[1, 0, 2]])
    assert list(st.ids) == ["f1", "f2", "f3"] and st.texts(["f2", "f3"]) == ["TWO", "three"]
    np.testing.assert_array_equal(st.matrix, np.stack([v[0], v[2], v[3]]))
    st.delete(["f1", "nope", "f1"])
    assert list(st.ids) == ["f2", "f3"] and "f1" not in st
    for fresh in (st, db.embedding_store("fact", DIM)):
        fresh.reload()
        assert list(fresh.ids) == ["f2", "f3"] and fresh.text("f2") == "TWO"
        np.testing.assert_array_equal(fresh.matrix, np.stack([v[2], v[3]]))
    st.upsert([], [], np.zeros((0, DIM), np.float32))
    st.delete([])
    with pytest.raises(ValueError):
        st.upsert(["x"], ["x", "y"], v[:1])
    with pytest.raises(ValueError):
        st.upsert(["x"], ["x"], np.zeros((1, DIM + 1), np.float32))


def test_embedding_store_stores_are_separate_and_checked(db):
    a, b = db.embedding_store("passage", DIM), db.embedding_store("community", DIM)
    a.upsert(["k"], ["passage"], unit_rows(1))
    b.reload()
    assert "k" not in b and len(a) == 1
    with pytest.raises(ValueError):
        db.embedding_store("nope", DIM)
    with pytest.raises(ValueError):
        db.embedding_store("entity", DIM, vector_dtype="int8")
    with pytest.raises(StoreError, match="dim"):
        db.embedding_store("passage", DIM + 3)


# ---------------------------------------------------------------------------------------- both backends agree
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_both_backends_hold_bit_identical_matrices(tmp_path, pg_dsn, pg_schema, dtype):
    from hippo_engine.store.postgres import PostgresIndexStore
    sq, pg = IndexDB(tmp_path / "index.sqlite"), PostgresIndexStore(pg_dsn, pg_schema)
    try:
        rng = np.random.default_rng(7)
        keys = [f"entity-{h}" for h in rng.integers(0, 1 << 40, 300).astype(str)] + KEYS
        vecs = rng.standard_normal((len(keys), DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        stores = [d.embedding_store("entity", DIM, vector_dtype=dtype) for d in (sq, pg)]
        for st in stores:
            with st.db.transaction():
                st.upsert(keys, keys, vecs)
                st.delete(keys[::7])
        fresh = [d.embedding_store("entity", DIM, vector_dtype=dtype) for d in (sq, pg)]
        assert list(fresh[0].ids) == list(fresh[1].ids)
        np.testing.assert_array_equal(fresh[0].matrix, fresh[1].matrix)
        q = vecs[:5]
        np.testing.assert_array_equal(fresh[0].matrix @ q.T, fresh[1].matrix @ q.T)
    finally:
        sq.close()
        pg.close()
