"""Exporting between SQLite and PostgreSQL (``hippo-engine export --to postgres...``): the copy on the
other backend is the same index (snapshot, rankings with their float scores, documents in order), and
back into a folder again."""
from __future__ import annotations

import numpy as np
from helpers import CORPUS, assert_same, make_rag, snapshot

from hippo_engine.cli import main
from hippo_engine.config import HippoConfig
from hippo_engine.export import export_index

QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]
IDS = [f"d{i}" for i in range(len(CORPUS))]


def _rankings(rag):
    return [(s.docs, np.asarray(s.doc_scores).tolist(), s.doc_ids) for s in rag.retrieve(QUERIES)]


def _view(rag):
    return snapshot(rag), _rankings(rag), [d["id"] for d in rag.documents(limit=100)["documents"]]


def test_sqlite_to_a_postgres_server_and_back_is_the_same_index(tmp_path, pg_dsn, pg_schema):
    src = make_rag(tmp_path / "src", use_filter=False)
    src.index(CORPUS, ids=IDS, metadata=[{"n": i} for i in range(len(CORPUS))])
    src.delete(ids=["d2"])
    want = _view(src)
    src.close()
    to_pg = HippoConfig(show_progress=False, storage_backend="postgres", postgres_dsn=pg_dsn,
                        postgres_schema=pg_schema)
    report = export_index(tmp_path / "src", tmp_path / "pg", to_pg)
    assert report.backend == "postgres" and pg_schema in report.destination
    pg = make_rag(tmp_path / "pg", storage_backend="postgres", postgres_dsn=pg_dsn, use_filter=False)
    got = _view(pg)
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    pg.close()
    export_index(tmp_path / "pg", tmp_path / "back", HippoConfig(show_progress=False),
                 source_config=HippoConfig(show_progress=False, postgres_dsn=pg_dsn))
    back = make_rag(tmp_path / "back", use_filter=False)
    got = _view(back)
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    back.close()


def test_the_command_line_exports_into_an_embedded_postgres(pg_dirs, capsys):
    base = pg_dirs()
    src = make_rag(base / "src", use_filter=False)
    src.index(CORPUS[:4], ids=IDS[:4])
    want = _view(src)
    src.close()
    assert main(["export", "--save-dir", str(base / "src"), str(base / "pg"), "--to", "postgres", "--quiet"]) == 0
    assert "exported 4 passages" in capsys.readouterr().out
    pg = make_rag(base / "pg", use_filter=False)          # found on its recorded backend
    got = _view(pg)
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    pg.close()


def test_a_schema_that_holds_an_index_is_refused_and_left_as_it_was(tmp_path, pg_dsn, pg_schema):
    import pytest

    from hippo_engine.store.base import StoreError
    src = make_rag(tmp_path / "src", use_filter=False)
    src.index(CORPUS[:3], ids=IDS[:3])
    src.close()
    to_pg = HippoConfig(show_progress=False, storage_backend="postgres", postgres_dsn=pg_dsn,
                        postgres_schema=pg_schema)
    export_index(tmp_path / "src", tmp_path / "first", to_pg)
    with pytest.raises((FileExistsError, StoreError)):
        export_index(tmp_path / "src", tmp_path / "second", to_pg)     # the same schema, another folder
    assert not (tmp_path / "second").exists()
    first = make_rag(tmp_path / "first", storage_backend="postgres", postgres_dsn=pg_dsn, use_filter=False)
    assert first.graph_stats()["passage_nodes"] == 3                   # untouched
    first.close()


def test_a_real_memory_exported_to_postgres_and_back_ranks_and_explains_alike(pg_dirs):
    """The default engine (real MiniLM and spaCy, extractor ner) on the bundled sample: the copies on an
    embedded PostgreSQL and back in a folder give the same rankings, scores and explanations."""
    import json
    from importlib import resources

    from hippo_engine import HippoRAG
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    questions = [q["question"] for q in data["questions"]]
    base = pg_dirs()

    def ranked(folder):
        rag = HippoRAG(folder, show_progress=False)
        try:
            sols = rag.retrieve(questions, 10, explain=True)
            return [(s.doc_ids, np.asarray(s.doc_scores).tolist(),
                     [(e.score, e.placed_by) for e in s.explanations]) for s in sols]
        finally:
            rag.close()

    rag = HippoRAG(base / "src", extractor="ner", show_progress=False)
    rag.index(docs, ids=[f"s{i}" for i in range(len(docs))])
    rag.close()
    want = ranked(base / "src")
    assert all(len(w[2]) == len(w[0]) > 0 for w in want)        # every passage explained
    export_index(base / "src", base / "pg", HippoConfig(show_progress=False, storage_backend="postgres"))
    assert ranked(base / "pg") == want
    export_index(base / "pg", base / "back", HippoConfig(show_progress=False))
    assert ranked(base / "back") == want
