"""The metadata filter language (``hippo_engine.store.metadata``): checks and their messages,
the Python evaluator, and the SQL it compiles to agreeing with it on SQLite (random metadata and
filters; PostgreSQL agrees in ``test_document_metadata.py``)."""
from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippo_engine.store.metadata import (
    Condition,
    Junction,
    check_metadata,
    encode_metadata,
    matches,
    parse_where,
    sql_where,
)


def test_parse_shapes():
    assert parse_where({"user": "alice"}) == Condition("user", "$eq", "alice")
    f = parse_where({"user": "alice", "t": {"$gte": 1, "$lt": 2.5}})
    assert f == Junction("$and", (Condition("user", "$eq", "alice"), Condition("t", "$gte", 1),
                                  Condition("t", "$lt", 2.5)))
    f = parse_where({"$or": [{"user": {"$in": ["a", "b"]}}, {"session": {"$ne": 3}}]})
    assert f == Junction("$or", (Condition("user", "$in", ("a", "b")), Condition("session", "$ne", 3)))


@pytest.mark.parametrize(("where", "message"), [
    ({"user": {"$regex": "a.*"}}, "unknown operator '$regex'"),
    ({"$not": {"user": "a"}}, "unknown operator '$not'"),
    ({}, "empty filter object"),
    ({"user": {}}, "empty condition object"),
    ({"us'er": "a"}, "metadata key \"us'er\""),
    ({"a.b": 1}, "top-level keys"),
    ({"user": None}, "a string, number or boolean expected"),
    ({"user": ["a"]}, "a string, number or boolean expected"),
    ({"user": {"$in": []}}, "non-empty list"),
    ({"user": {"$in": "abc"}}, "non-empty list"),
    ({"t": {"$gt": True}}, "not booleans"),
    ({"t": float("nan")}, "finite"),
    ({"t": 2 ** 70}, "64 bits"),
    ({"user": "a\x00b"}, "NUL"),
    ({"$and": []}, "non-empty list of filter objects"),
    ({"$and": ["x"]}, "a filter object expected"),
])
def test_bad_filters_name_the_problem(where, message):
    with pytest.raises(ValueError, match="where") as err:
        parse_where(where)
    assert message in str(err.value)


def test_a_filter_must_be_an_object_and_stay_small():
    with pytest.raises(TypeError, match="must be an object"):
        parse_where("user = 'alice'")
    with pytest.raises(ValueError, match="conditions"):
        parse_where({"$or": [{"k": i} for i in range(100)]})
    deep: dict = {"k": 1}
    for _ in range(10):
        deep = {"$and": [deep]}
    with pytest.raises(ValueError, match="nest"):
        parse_where(deep)


def test_matches_types_never_mix_and_every_test_needs_the_key():
    m = {"user": "alice", "n": 1, "f": 1.0, "b": True, "s": "10"}
    assert matches({"user": "alice"}, m) and not matches({"user": "bob"}, m)
    assert matches({"n": 1.0}, m) and matches({"f": 1}, m)       # numbers by value
    assert not matches({"b": 1}, m) and matches({"b": True}, m)  # booleans are not numbers
    assert not matches({"n": True}, m)
    assert not matches({"s": 10}, m) and not matches({"s": {"$gt": 9}}, m)   # a string is no number
    assert matches({"s": {"$gt": "1"}}, m)                       # strings by code point
    assert not matches({"missing": {"$ne": "x"}}, m)             # $ne needs the key
    assert not matches({"missing": {"$nin": ["x"]}}, m)
    assert matches({"user": {"$nin": ["bob"]}}, m)
    assert matches({"$or": [{"user": "bob"}, {"n": {"$lte": 1}}]}, m)
    assert not matches({"user": "alice"}, None)


def test_check_metadata_errors_name_the_position():
    assert check_metadata([{"a": 1}, {}], 2, "index") == [{"a": 1}, {}]
    assert check_metadata([None, {"a": 1}], 2, "index") == [None, {"a": 1}]     # None: none given for it
    with pytest.raises(TypeError, match="list of dicts"):
        check_metadata({"a": 1}, 1, "index")
    with pytest.raises(ValueError, match="2 item"):
        check_metadata([{}, {}], 3, "index")
    with pytest.raises(ValueError, match="metadata item 1 must be a dict"):
        check_metadata([{}, "x"], 2, "index")
    with pytest.raises(ValueError, match="metadata item 0.*set is not JSON"):
        check_metadata([{"tags": {1, 2}}], 1, "index")
    with pytest.raises(ValueError, match="metadata item 0.*keys must be non-empty strings"):
        check_metadata([{1: "x"}], 1, "index")
    with pytest.raises(ValueError, match="metadata item 0.*finite"):
        check_metadata([{"x": [1.0, float("inf")]}], 1, "index")
    with pytest.raises(ValueError, match="metadata item 0.*bytes of JSON"):
        check_metadata([{"x": "y" * 70000}], 1, "index")
    given_ = [{"nested": {"list": [1, "two", None]}}]
    out = check_metadata(given_, 1, "index")
    out[0]["nested"]["list"].append(3)
    assert given_[0]["nested"]["list"] == [1, "two", None]     # a detached copy


# ---------------------------------------------------------------------------------------- SQL = Python
KEYS = ["user", "n", "flag", "extra"]
scalars = st.one_of(st.sampled_from(["alice", "bob", "", "Ärger", "b", "10"]), st.integers(-3, 3),
                    st.sampled_from([0.5, -1.25, 2.0, 1e300]), st.booleans())
values = st.one_of(scalars, st.none(), st.lists(scalars, max_size=2), st.dictionaries(st.sampled_from(KEYS), scalars,
                                                                                        max_size=1))
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)


def conditions():
    ordered = st.one_of(st.sampled_from(["alice", "b", "10"]), st.integers(-3, 3), st.sampled_from([0.5, 2.0]))
    single = st.one_of(
        st.builds(lambda k, o, v: {k: {o: v}}, st.sampled_from(KEYS), st.sampled_from(["$eq", "$ne"]), scalars),
        st.builds(lambda k, o, v: {k: {o: v}}, st.sampled_from(KEYS), st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
                  ordered))
    member = st.builds(lambda k, o, vs: {k: {o: vs}}, st.sampled_from(KEYS), st.sampled_from(["$in", "$nin"]),
                       st.lists(scalars, min_size=1, max_size=3))
    plain = st.builds(lambda k, v: {k: v}, st.sampled_from(KEYS), scalars)
    leaf = st.one_of(single, member, plain)
    return st.recursive(leaf, lambda inner: st.builds(lambda o, xs: {o: xs}, st.sampled_from(["$and", "$or"]),
                                                      st.lists(inner, min_size=1, max_size=3)), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(documents, min_size=1, max_size=6), where=conditions())
def test_sqlite_sql_agrees_with_python(docs, where):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE m (id INTEGER, metadata TEXT)")
    conn.executemany("INSERT INTO m VALUES (?, ?)", [(i, encode_metadata(d)) for i, d in enumerate(docs)])
    sql, params = sql_where(where, "sqlite")
    got = {r[0] for r in conn.execute(f"SELECT id FROM m WHERE {sql}", params)}
    want = {i for i, d in enumerate(docs) if matches(where, json.loads(encode_metadata(d)))}
    assert got == want


def test_sql_passes_keys_and_values_as_parameters():
    sql, params = sql_where({"user": "x'); DROP TABLE m; --", "n": {"$in": [1, "a"]}}, "postgres")
    assert "DROP" not in sql and "x');" in params[2]
    assert sql.count("%s") == len(params)
    sql, params = sql_where({"user": "alice"}, "sqlite")
    assert "alice" not in sql and sql.count("?") == len(params)
