"""The lazy PostgreSQL reader (``postgres_search="exact"`` / ``"hnsw"``): rankings equal to SQLite
with exact search, no fact or entity vector and no fact dict in the query process, HNSW mode close
to exact, a new version picked up, and version-1 schemas upgraded.

The corpus is generated (a few hundred facts, more than HNSW's candidate list of 100), so the
HNSW path really is approximate here; fake models (n-gram encoder, rule-based OpenIE)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import make_rag

from hippo_engine.store import StoreError

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
    for store in writer.index_state.stores.values():   # the writer holds ids only: vectors stay in the database
        assert store.nbytes()["ram"] == 0 and len(store.ids) == len(lite.index_state.stores[store.namespace])
        with pytest.raises(StoreError, match="holds no vectors"):
            _ = store.matrix
    assert writer.index_state.synonymy == lite.index_state.synonymy     # streamed kNN == in-memory kNN
    st = writer.index_state            # facts read inside the write (for synonymy) hold each passage once
    pids = st.content.pids
    assert not st.content_loaded or sorted(pids) == sorted(set(pids)) == sorted(st.stores["passage"].ids)
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
    assert hnsw.retriever.fact_search.floor_ef == 20            # postgres_floor_ef_search's default reaches the search
    hnsw.close()
    wide = _pg(tmp_path / "pg", pg_dsn, pg_schema, "hnsw", postgres_floor_ef_search=1000)
    assert wide.retriever.fact_search.floor_ef == 1000
    top5 = sum(a.doc_ids[:5] == b.doc_ids[:5] for a, b in zip(wide.retrieve(qs, 10), want, strict=True))
    assert top5 >= 0.9 * len(qs), top5
    wide.close()


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
    assert writer.index_state.graph_keeper._graph is None   # the writer streamed graph.npz: it holds no graph
    g = writer.index_state.graph                          # read back from the file the change wrote
    assert g.edge_dict() == writer.index_state._build_graph().edge_dict()
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

    from hippo_engine.ids import triple_id
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
    assert rows and all(f == triple_id((s, p, o)) for s, p, o, f in rows)
    reader.close()


def test_a_query_is_ranked_alike_alone_or_batched_while_writers_change_the_tables(built, tmp_path, pg_dsn,
                                                                                 pg_schema):
    """A reader's view is one version; rows a writer adds (not in the view) or deletes (gone from
    the tables) are skipped for the query they touch, never for the others of its batch, and a
    passage deleted after ranking is left out of the solution instead of failing it."""
    lite, writer = built
    reader = _pg(tmp_path / "pg", pg_dsn, pg_schema, "exact")
    r = reader.retriever                                      # the view of this version
    qs = ["Who moved to Zembla?", questions(2)[1]]
    q_fact, q_pass = reader.encode_queries(qs)
    alone, _ = r.search(qs[1:], q_fact[1:], q_pass[1:], 10)
    new = "Zora Quill\nZora Quill moved to Zembla in 1901. Zora Quill founded the Zembla Press."
    writer.index([new])                                       # facts the view does not know
    both, _ = r.search(qs, q_fact, q_pass, 10)
    assert both[1].candidate_facts == alone[0].candidate_facts and both[0].candidate_facts
    assert np.array_equal(both[1].order, alone[0].order) and np.array_equal(both[1].scores, alone[0].scores)
    gone = reader.retrieve(qs[1:], 10)[0]                     # (the reader moves to the new version)
    r = reader.retriever
    writer.delete([d for d in corpus() if d.split("\n")[0] == gone.docs[0].split("\n")[0]])
    raw, _ = r.search(qs[1:], q_fact[1:], q_pass[1:], 10)     # ranked on the old view ...
    sol = r.views.passages.solution(qs[1], raw[0].order, raw[0].scores, raw[0])
    assert gone.docs[0] not in sol.docs and len(sol.docs) == len(sol.doc_scores) == len(sol.passage_ids) == 9
    reader.close()


def _fact_table(pg_dsn, pg_schema, keys, seed, dtype):
    """A fact store of random unit vectors (dimension 8) under ``keys``, with its HNSW index, and a
    reader's view of it: (db, the unit vectors, the store, the view)."""
    from hippo_engine.store.postgres.db import PostgresIndexStore
    db = PostgresIndexStore(pg_dsn, pg_schema)
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((len(keys), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = db.embedding_store("fact", 8, vector_dtype=dtype)
    store.upsert(keys, keys, vecs)
    store.ensure_hnsw()
    return db, vecs, store, db.reader_store("fact", 8, keep="ids", vector_dtype=dtype)


def test_view_ids_are_exact_whatever_their_characters_and_k_may_exceed_hnsw_limits(pg_dsn, pg_schema):
    odd = ["fact-a\\b", "fact-tab\there", "fact-nl\nx", "fact-é✓", "fact-cr\rz"]
    keys = odd + [f"fact-{i:05d}" for i in range(1200)]
    db, vecs, store, view = _fact_table(pg_dsn, pg_schema, keys, 0, "float16")
    assert [view.key(i) for i in range(len(view))] == sorted(keys, key=lambda k: k.encode())
    assert view.rows_of(odd).tolist() == [view.row(k) for k in odd] and min(view.rows_of(odd)) >= 0
    q = vecs[:2] + 0.1
    ids_x, s_x, low_x = view.extremes(q, 1100, exact=True)
    ids_h, s_h, low_h = view.extremes(q, 1100, exact=False)   # ef_search capped at 1000, iterative scan
    assert [len(x) for x in ids_x] == [1100, 1100] and [len(x) for x in ids_h] == [1100, 1100]
    exact = store.matrix.astype(np.float64) @ q.astype(np.float64).T
    assert np.allclose(low_x, exact.min(axis=0), rtol=0, atol=0)
    assert set(ids_x[0][:10]) == set(ids_h[0][:10])
    db.close()


def test_the_floor_search_has_its_own_ef_search_and_moves_only_the_minimum(pg_dsn, pg_schema):
    """``floor_ef``: the search for ``-q`` runs with that ``ef_search`` and asks that many rows, the
    top search keeps its own (100); the top ids and scores do not change, the minimum is the lowest
    exact score among real rows (never below the table's), and a wide floor search finds the
    table's own minimum here."""
    db, vecs, _, view = _fact_table(pg_dsn, pg_schema, [f"fact-{i:04d}" for i in range(600)], 2, "float32")
    rng = np.random.default_rng(12)     # queries apart from the rows
    asked = []
    real = view._candidates

    def spy(qv, n):
        asked.append((n, db.conn.execute("SHOW hnsw.ef_search").fetchone()[0]))
        return real(qv, n)
    view._candidates = spy
    q = rng.standard_normal((3, 8)).astype(np.float32)
    ids_d, s_d, low_d = view.extremes(q, 5, exact=False)
    ids_f, s_f, low_f = view.extremes(q, 5, exact=False, floor_ef=7)
    assert asked[:6] == [(100, "100")] * 6                     # default: the floor search as the top one
    assert asked[6:] == [(100, "100")] * 3 + [(7, "7")] * 3
    assert ids_f == ids_d and np.array_equal(s_f, s_d)
    table_min = (vecs.astype(np.float64) @ q.astype(np.float64).T).min(axis=0)
    assert np.all(low_f >= table_min - 1e-12) and np.all(low_f >= low_d - 1e-12)
    _, _, low_w = view.extremes(q, 5, exact=False, floor_ef=600)
    assert np.allclose(low_w, table_min, rtol=0, atol=1e-12)
    db.close()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_hnsw_candidates_decode_as_pgvector_does_and_ids_alone_match(pg_dsn, pg_schema, dtype):
    """The candidates' vectors, decoded in bulk, equal pgvector's own decoding of the same rows;
    ``nearest_ids`` (no vectors read) names the same rows as ``extremes``."""
    db, _, _, view = _fact_table(pg_dsn, pg_schema, [f"fact-{i:04d}" for i in range(400)], 1, dtype)
    rng = np.random.default_rng(11)     # a query apart from the rows
    assert db.conn.adapters.types.get(view.kind) is not None      # (so the bulk decoding is what runs)
    q = rng.standard_normal(8).astype(np.float32)
    with db.snapshot():
        ids, got = view._candidates(q, 60)
    assert len(ids) == 60 and got.dtype == np.float64
    rows = dict(db.conn.execute(f"SELECT id, vec FROM {view.table} WHERE id = ANY(%s)", (ids,),
                                binary=True).fetchall())
    assert np.array_equal(got, np.array([rows[i].to_numpy() for i in ids], np.float64))
    best, _, _ = view.extremes(q[None, :], 50, exact=False, lowest=False)
    assert set(view.nearest_ids(q, 50)) == set(best[0])
    db.close()


def test_llm_free_memory_on_postgres_equals_sqlite(tmp_path, pg_dsn, pg_schema):
    """extractor="ner" (real spaCy, no LLM): sentences as hyperedges, linking ner_fact. The lazy
    reader fetches hyperedges by fact id and finds query entities in the database (an entity HNSW
    index is built for it); exact search gives SQLite's rankings."""
    from fakes import NgramEncoder, NoCallLLM

    from hippo_engine import HippoRAG

    def ner(path, **kw):
        return HippoRAG(path, extractor="ner", llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False,
                        synonymy_threshold=0.6, **kw)
    docs, qs = corpus(60), questions(8) + ["Who was born in Velor in 1850?"]
    lite = ner(tmp_path / "lite")
    lite.index(docs)
    pg = ner(tmp_path / "pg", storage="postgres", dsn=pg_dsn, postgres_schema=pg_schema)
    pg.index(docs)
    assert pg.index_state.stores["entity"].has_hnsw() and pg.index_state.stores["fact"].has_hnsw()
    pg.close()
    for search in ("exact", "hnsw"):
        reader = ner(tmp_path / "pg", storage="postgres", dsn=pg_dsn, postgres_schema=pg_schema,
                     postgres_search=search)
        got, want = reader.retrieve(qs, 5), lite.retrieve(qs, 5)
        assert reader.retriever.linking.name == "ner_fact" and not reader.index_state.content_loaded
        if search == "exact":
            assert [(s.doc_ids, s.kept_facts, np.asarray(s.doc_scores).tobytes()) for s in got] == \
                [(s.doc_ids, s.kept_facts, np.asarray(s.doc_scores).tobytes()) for s in want]
        else:
            assert sum(a.doc_ids[:3] == b.doc_ids[:3] for a, b in zip(got, want, strict=True)) >= len(qs) - 1
        reader.close()


def test_a_reader_on_another_host_takes_the_graph_file_from_the_database(built, tmp_path, pg_dsn, pg_schema):
    """A reader whose folder holds no graph.npz (another machine, same server) takes the writer's
    copy from the database instead of reading every fact to build the graph, and again after a
    change; its rankings are SQLite's."""
    from hippo_engine.index.graph import GraphData
    lite, writer = built
    other = tmp_path / "other_host"
    reader = _pg(other, pg_dsn, pg_schema, "exact")
    qs = questions(6)
    assert _rank(reader, qs) == _rank(lite, qs)
    st = reader.index_state
    assert (other / "graph.npz").exists() and not st.content_loaded      # fetched, no fact was read
    new = "Zora Quill\nZora Quill moved to Zembla in 1901. Zora Quill founded the Zembla Press."
    writer.index([new])
    lite.index([new])
    assert _rank(reader, qs) == _rank(lite, qs) and not st.content_loaded
    assert GraphData.load(other / "graph.npz", st.version, st._digest) is not None   # the new version's
    reader.close()
