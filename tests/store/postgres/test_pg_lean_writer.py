"""The lean writer of a PostgreSQL index searched in the database (issue 26, point 2): its stores
hold no ids, it never reads every fact or synonymy list (those reads are made to fail here), and
through additions, replacements and deletions (triples and hyperedges, synonymy lists full enough
that a removal makes them recompute) the index equals the SQLite one built by the in-memory path:
stores, graph, synonymy lists, documents and rankings. Fake models (n-gram encoder, rule-based
OpenIE) on the session's embedded server."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from helpers import assert_same, make_rag, snapshot, toy_entities

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import chunk_id

FIRST = ["Ada", "Bram", "Cora", "Dov", "Elin", "Fenn", "Gale", "Hild"]
LAST = ["Marrow", "Pike", "Olt", "Venn", "Skarn", "Tull"]
PLACES = ["Velor", "Velora", "Brask", "Braska", "Orsk", "Kaldavia", "Tamsin", "Amberly"]
#: small lists and a low threshold: many lists are full, so removing an entity makes them recompute
SETTINGS = {"use_filter": False, "synonymy_max_neighbors": 2, "synonymy_threshold": 0.5}


def corpus(n: int = 48, seed: int = 0) -> list[str]:
    """``n`` short biographies over shared, similar-looking names and places."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        who = f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
        a, b, c = (PLACES[j] for j in rng.choice(len(PLACES), 3, replace=False))
        docs.append(f"{who}\n{who} was born in {a}. {who} studied in {b} with {c} Guild. {who} moved to {c}.")
    return docs


def _pg(path, dsn, schema, **kw):
    return make_rag(path, storage_backend="postgres", postgres_dsn=dsn, postgres_schema=schema,
                    postgres_search="exact", **{**SETTINGS, **kw})


def _forbid_full_reads(monkeypatch) -> None:
    """Make every read of all facts, all synonymy lists or all ids of a store fail."""
    from hippo_engine.store.postgres.db import PostgresIndexStore
    from hippo_engine.store.postgres.writer import PostgresWriteStore

    def boom(*_a, **_k):
        raise AssertionError("a lean writer read every fact, synonymy list or id")
    for name in ("load_passage_triples", "load_passage_hyperedges", "load_synonymy", "passage_ids"):
        monkeypatch.setattr(PostgresIndexStore, name, boom)
    monkeypatch.setattr(PostgresWriteStore, "ids", property(boom))
    monkeypatch.setattr(PostgresWriteStore, "iter_texts", boom)


def _count_recomputed(monkeypatch) -> list[int]:
    """How many lists each synonymy update of a lean writer recomputes (recorded, not changed)."""
    import hippo_engine.index.synonymystate as keeper
    counts: list[int] = []
    original = keeper._after_removal

    def spy(lists, removed, max_neighbors):
        changed, recompute = original(lists, removed, max_neighbors)
        counts.append(len(recompute))
        return changed, recompute
    monkeypatch.setattr(keeper, "_after_removal", spy)
    return counts


def _rankings(rag, qs):
    return [(s.doc_ids, np.asarray(s.doc_scores).tobytes()) for s in rag.retrieve(qs, 10)]


def test_additions_replacements_and_deletions_equal_sqlite_without_reading_everything(tmp_path, pg_dsn, pg_schema,
                                                                                     monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="hippo_engine")
    docs = corpus()
    ids = [f"d{i}" for i in range(len(docs))]
    lite = make_rag(tmp_path / "lite", **SETTINGS)
    pg = _pg(tmp_path / "pg", pg_dsn, pg_schema)
    for rag in (lite, pg):
        rag.index(docs[:24], ids=ids[:24])            # the first graph is built from what is stored
    pg.close()
    pg = _pg(tmp_path / "pg", pg_dsn, pg_schema)        # a writer that has read nothing yet
    replaced = [d.replace("moved to", "retired to") for d in docs[6:10]]
    steps = [lambda r: r.index(docs[20:], ids=ids[20:]),               # adds, some unchanged
             lambda r: r.index(replaced, ids=ids[6:10]),               # adds and removes in one change
             lambda r: r.delete(ids=ids[:5] + ids[30:34]),             # removes entities, facts, lists
             lambda r: r.delete(docs=[docs[40]])]
    recomputed = _count_recomputed(monkeypatch)
    for step in steps:
        with monkeypatch.context() as m:
            _forbid_full_reads(m)
            report = step(pg)
        expected = step(lite)
        assert {k: v for k, v in report.items() if k != "timings"} == {k: v for k, v in expected.items()
                                                                        if k != "timings"}
        assert not pg.index_state.content_loaded and pg.index_state.graph_keeper._graph is None   # no graph held
        assert all(s.nbytes()["ram"] == 0 and not s._known for s in pg.index_state.stores.values())
    assert recomputed and max(recomputed) > 0          # removals emptied full lists: they were recomputed
    assert_same(snapshot(pg), snapshot(lite))
    qs = [f"Where was {f} {LAST[i % len(LAST)]} born?" for i, f in enumerate(FIRST)]
    assert _rankings(pg, qs) == _rankings(lite, qs)
    pg.close()
    # the first change found no graph file of the (empty) index before it: said, not warned; every later
    # change updated the file
    updates = [r for r in caplog.records if "could not update" in r.getMessage()]
    assert len(updates) == 1 and updates[0].levelno == logging.INFO, [r.getMessage() for r in updates]


def _hyperedges(docs: list[str]) -> tuple[dict[str, str], dict[str, list[Hyperedge]]]:
    passages = {chunk_id(d): d for d in docs}
    edges = {chunk_id(d): [Hyperedge(s, tuple(toy_entities("x\n" + s))) for s in d.split("\n", 1)[1].split(". ")]
             for d in docs}
    return passages, edges


def test_hyperedge_passages_are_added_and_removed_as_on_sqlite(tmp_path, pg_dsn, pg_schema, monkeypatch):
    docs = corpus(40, seed=3)
    lite = make_rag(tmp_path / "lite", **SETTINGS)
    pg = _pg(tmp_path / "pg", pg_dsn, pg_schema)
    first, second = _hyperedges(docs[:20]), _hyperedges(docs[20:])
    gone = list(first[0])[:7] + list(second[0])[:3]
    for rag in (lite, pg):
        rag.index_state.add(first[0], hyperedges=first[1], extractor="ner")
    pg.close()
    pg = _pg(tmp_path / "pg", pg_dsn, pg_schema)
    with monkeypatch.context() as m:
        _forbid_full_reads(m)
        reports = [pg.index_state.add(second[0], hyperedges=second[1], extractor="ner"), pg.index_state.remove(gone)]
    assert reports == [lite.index_state.add(second[0], hyperedges=second[1], extractor="ner"),
                       lite.index_state.remove(gone)]
    assert reports[1]["removed_entities"] > 0 and reports[1]["removed_facts"] > 0
    assert not pg.index_state.content_loaded
    assert_same(snapshot(pg), snapshot(lite))
    pg.close()


def test_the_write_store_holds_no_ids_and_asks_the_table(pg_dsn, pg_schema):
    from hippo_engine.store.postgres.db import PostgresIndexStore
    db = PostgresIndexStore(pg_dsn, pg_schema)
    db.search = "exact"
    st = db.vector_writer("entity", 4)
    keys = ["entity-b", "entity-a", "entity-c", "entity-é"]
    vecs = np.eye(4, dtype=np.float32)
    st.upsert(keys, ["b", "a", "c", "é"], vecs)
    assert st.existing(["entity-a", "entity-x", "entity-a"]) == {"entity-a"}
    assert "entity-c" in st and "entity-y" not in st and len(st) == 4
    assert list(st.ids) == sorted(keys) and st.ids_at([0, 3, 9]) == {0: "entity-a", 3: "entity-é"}
    blocks = list(st.blocks())
    assert [s for s, _ in blocks] == [0] and np.array_equal(blocks[0][1], vecs[[1, 0, 2, 3]])
    assert np.array_equal(st.vectors_of(["entity-c", "entity-c"]), vecs[[2, 2]])
    with pytest.raises(KeyError, match="entity-x"):
        st.vectors_of(["entity-a", "entity-x"])
    assert "entity-d" not in st
    st.upsert(["entity-d"], ["d"], vecs[:1])                         # an answer given is kept up to date
    assert "entity-d" in st and len(st) == 5
    st.delete(["entity-b", "entity-nope", "entity-d"])
    assert "entity-b" not in st and "entity-d" not in st and len(st) == 3
    st.forget()
    assert st._known == {} and st.existing(keys) == {"entity-a", "entity-c", "entity-é"}
    assert st.texts(["entity-é", "entity-a"]) == ["é", "a"] and st.nbytes() == {"ram": 0, "mapped": 0}
    db.close()


def test_an_index_made_before_the_removal_indexes_gets_them(pg_dsn, pg_schema):
    from hippo_engine.store.postgres.db import PostgresIndexStore
    new = ("passage_triples_subj", "passage_triples_obj", "passage_hyperedges_entities")
    db = PostgresIndexStore(pg_dsn, pg_schema)
    for name in new:
        db.conn.execute(f'DROP INDEX "{pg_schema}".{name}')
    db.close()
    db = PostgresIndexStore(pg_dsn, pg_schema)
    assert all(db.table_exists(name) for name in new)
    db.close()
