"""The lazy PostgreSQL reader (``postgres_search="exact"`` / ``"hnsw"``): rankings equal to SQLite
with exact search, no fact or entity vector and no fact dict in the query process, HNSW mode close
to exact, a new version picked up, and version-1 schemas upgraded.

The corpus is generated (a few hundred facts, more than HNSW's candidate list of 100), so the
HNSW path really is approximate here; fake models (n-gram encoder, rule-based OpenIE)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_rag

FIRST = ["Ada", "Bram", "Cora", "Dov", "Elin", "Fenn", "Gale", "Hild", "Ivo", "Juna", "Kai", "Lise"]
LAST = ["Marrow", "Pike", "Olt", "Venn", "Skarn", "Tull", "Rook", "Quist", "Ash", "Brindle"]
PLACES = ["Velor", "Brask", "Orsk", "Kaldavia", "Tamsin", "Amberly", "Corvale", "Dunmere", "Eskil", "Farrow"]
ORGS = ["College", "Guild", "Museum", "Press", "Observatory", "Library"]


def corpus(n: int = 120, seed: int = 0) -> list[str]:
    """``n`` short biographies: people, places and institutions reused across passages."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        who = f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
        a, b, c = (PLACES[j] for j in rng.choice(len(PLACES), 3, replace=False))
        org = f"{a} {ORGS[int(rng.integers(len(ORGS)))]}"
        year = 1800 + int(rng.integers(150))
        docs.append(f"{who}\n{who} was born in {b} in {year}. {who} studied at {org}. "
                    f"{org} stands in {a}. {who} moved to {c}.")
    return docs


def questions(n: int = 24) -> list[str]:
    return [f"Where did {FIRST[i % len(FIRST)]} {LAST[(i // 3) % len(LAST)]} study?" for i in range(n)]


def _pg(save, dsn, schema, search, **kw):
    return make_rag(save, storage_backend="postgres", postgres_dsn=dsn, postgres_schema=schema,
                    postgres_search=search, use_filter=False, **kw)


def _rank(rag, qs):
    return [(s.doc_ids, np.asarray(s.doc_scores).tobytes()) for s in rag.retrieve(qs, 10)]


@pytest.fixture
def built(tmp_path, pg_dsn, pg_schema):
    """The same corpus in SQLite and in PostgreSQL (written with HNSW on)."""
    docs = corpus()
    lite = make_rag(tmp_path / "lite", use_filter=False)
    lite.index(docs)
    writer = _pg(tmp_path / "pg", pg_dsn, pg_schema, "hnsw")
    writer.index(docs[:80])
    writer.index(docs[80:])           # HNSW built after the first batch, the second goes into it
    yield lite, writer
    writer.close()


def test_exact_reader_equals_sqlite_and_holds_no_fact_or_entity_vectors(built, tmp_path, pg_dsn, pg_schema):
    lite, _ = built
    reader = _pg(tmp_path / "pg", pg_dsn, pg_schema, "exact")        # a fresh query process
    qs = questions()
    assert _rank(reader, qs) == _rank(lite, qs)                      # ids and float scores, bit for bit
    a, b = reader.retrieve(qs, 10), lite.retrieve(qs, 10)
    for x, y in zip(a, b, strict=True):
        assert x.docs == y.docs
    raw_pg, _ = reader.retriever.search(qs, *reader.encode_queries(qs), 10)
    raw_lite, _ = lite.retriever.search(qs, *lite.encode_queries(qs), 10)
    assert [r.candidate_facts for r in raw_pg] == [r.candidate_facts for r in raw_lite]
    assert [r.seed_entities for r in raw_pg] == [r.seed_entities for r in raw_lite]
    state = reader.index_state
    views = state.reader_stores
    assert views["fact"].nbytes()["ram"] == views["fact"].ids.nbytes            # ids only, as bytes
    assert views["fact"].ids.dtype.kind == "S" and views["fact"].matrix.size == 0
    assert views["entity"].matrix.size == 0 and len(views["entity"]) == len(lite.index_state.stores["entity"])
    assert views["passage"].matrix.shape == lite.index_state.stores["passage"].matrix.shape
    assert state._stores is None and not state.content_loaded    # no mirror, no fact dict was read
    assert reader.retriever.fact_mat is None and reader.retriever.entity_mat is None
    reader.close()


def test_hnsw_reader_is_close_to_exact(built, tmp_path, pg_dsn, pg_schema):
    lite, writer = built
    assert writer.index_state.stores["fact"].has_hnsw()
    hnsw = _pg(tmp_path / "pg", pg_dsn, pg_schema, "hnsw")
    qs = questions()
    got, want = hnsw.retrieve(qs, 10), lite.retrieve(qs, 10)
    top5 = sum(a.doc_ids[:5] == b.doc_ids[:5] for a, b in zip(got, want, strict=True))
    assert top5 >= 0.9 * len(qs), top5
    assert not hnsw.index_state.content_loaded
    hnsw.close()


def test_lazy_reader_picks_up_a_version_another_writer_committed(built, tmp_path, pg_dsn, pg_schema):
    _, writer = built
    reader = _pg(tmp_path / "pg", pg_dsn, pg_schema, "hnsw")
    before = reader.retrieve(["Who moved to Zembla?"], 5)[0]
    writer.close()
    writer = _pg(tmp_path / "pg", pg_dsn, pg_schema, "hnsw")    # a writer that has read first:
    writer.retrieve(["Who moved to Zembla?"], 5)                # its graph lacks the weight parts
    assert writer.index_state.graph.parts is None
    writer.index(["Zora Quill\nZora Quill moved to Zembla in 1901. Zora Quill founded the Zembla Press."])
    after = reader.retrieve(["Who moved to Zembla?"], 5)[0]
    assert len(reader.index_state.reader_stores["passage"]) == 121
    g = writer.index_state.graph                          # parts read back from graph.npz, inserted into
    assert g.parts is not None and g.edge_dict() == writer.index_state._build_graph().edge_dict()
    assert not any(d.startswith("Zora Quill") for d in before.docs)
    assert any(d.startswith("Zora Quill") for d in after.docs)
    writer.delete(["Zora Quill\nZora Quill moved to Zembla in 1901. Zora Quill founded the Zembla Press."])
    gone = reader.retrieve(["Who moved to Zembla?"], 5)[0]
    assert not any(d.startswith("Zora Quill") for d in gone.docs)
    reader.close()
    writer.close()


def test_memory_mode_mirrors_every_vector(built, tmp_path, pg_dsn, pg_schema):
    lite, _ = built
    mem = _pg(tmp_path / "pg", pg_dsn, pg_schema, "memory")
    qs = questions(6)
    assert _rank(mem, qs) == _rank(lite, qs)
    assert mem.retriever.fact_mat is not None and mem.index_state.reader_stores is mem.index_state.stores
    mem.close()


def test_a_version_1_schema_is_upgraded_with_its_fact_ids(built, tmp_path, pg_dsn, pg_schema):
    import psycopg

    from hippo_engine.text import fact_text, mdhash_id
    lite, writer = built
    writer.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:      # what version 1 looked like
        for t in ("passage_triples", "passage_hyperedges"):
            conn.execute(f'ALTER TABLE "{pg_schema}".{t} DROP COLUMN fact_id')
        conn.execute(f"UPDATE \"{pg_schema}\".meta SET value = '1' WHERE key = 'schema_version'")
    reader = _pg(tmp_path / "pg", pg_dsn, pg_schema, "exact")
    qs = questions(6)
    assert _rank(reader, qs) == _rank(lite, qs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT subj, pred, obj, fact_id FROM "{pg_schema}".passage_triples').fetchall()
        assert conn.execute(f"SELECT value FROM \"{pg_schema}\".meta WHERE key='schema_version'").fetchone()[0] == "2"
    assert rows and all(f == mdhash_id(fact_text((s, p, o)), "fact-") for s, p, o, f in rows)
    reader.close()
