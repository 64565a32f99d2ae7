"""The engine on PostgreSQL (``storage="postgres"``): the same index, rankings and equalities as
on SQLite, an embedded server started and stopped by the facade, and the command line."""
from __future__ import annotations

import json

import numpy as np
from helpers import CORPUS, assert_same, make_rag, snapshot

from hippo_engine import HippoRAG
from hippo_engine.cli import main

QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]


def _rankings(rag):
    return [(s.docs, np.asarray(s.doc_scores).tolist(), s.doc_ids) for s in rag.retrieve(QUERIES)]


def test_postgres_index_equals_sqlite_through_insert_reindex_and_delete(tmp_path, pg_dsn, pg_schema):
    pg = make_rag(tmp_path / "pg", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                  use_filter=False)
    lite = make_rag(tmp_path / "lite", use_filter=False)
    assert pg.index_state.db.location.endswith(f"schema {pg_schema}")
    for rag in (pg, lite):
        rag.index(CORPUS[:5], ids=[f"d{i}" for i in range(5)])
        rag.index(CORPUS[3:], ids=[f"d{i}" for i in range(3, len(CORPUS))])     # incremental, overlapping
    assert_same(snapshot(pg), snapshot(lite))
    assert _rankings(pg) == _rankings(lite)                  # same passages, ids and float scores
    version = pg.index_state.version
    assert pg.index(CORPUS, ids=[f"d{i}" for i in range(len(CORPUS))])["added"] == 0   # idempotent
    assert pg.index_state.version == version
    for rag in (pg, lite):
        rag.delete(ids=["d1", "d6"])
    assert_same(snapshot(pg), snapshot(lite))
    fresh = make_rag(tmp_path / "fresh", use_filter=False)          # as if never added
    keep = [i for i in range(len(CORPUS)) if i not in (1, 6)]
    fresh.index([CORPUS[i] for i in keep], ids=[f"d{i}" for i in keep])
    assert_same(snapshot(pg), snapshot(fresh))
    pg.close()
    again = make_rag(tmp_path / "pg", storage_backend="postgres", postgres_dsn=pg_dsn, postgres_schema=pg_schema,
                     use_filter=False)                        # another process opening it sees the same
    assert _rankings(again) == _rankings(lite)
    again.close()


def test_embedded_server_is_started_in_save_dir_and_stopped_by_close(pg_dirs):
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    save = pg_dirs() / "memory"
    rag = make_rag(save, storage="postgres", use_filter=False)
    rag.index(CORPUS[:3])
    server = EmbeddedPostgres(save / "postgres")
    assert server.running()
    rag.close()
    assert not server.running()                              # close() stopped the server it started
    rag = make_rag(save, storage="postgres", use_filter=False)
    assert rag.graph_stats()["passage_nodes"] == 3             # the data stayed
    rag.close()


def test_cli_index_stats_and_delete_by_id_on_postgres(pg_dirs, capsys, monkeypatch):
    """The CLI with --storage postgres (fake models: the facade's model factories are patched)."""
    from fakes import NgramEncoder, ScriptedLLM
    from helpers import toy_respond
    enc, llm = NgramEncoder(), ScriptedLLM(toy_respond)
    monkeypatch.setattr(HippoRAG, "encoder", property(lambda self: enc))
    monkeypatch.setattr(HippoRAG, "llm", property(lambda self: llm))
    base = pg_dirs()
    corpus = base / "c.json"
    corpus.write_text(json.dumps([{"id": f"n{i}", "text": d} for i, d in enumerate(CORPUS[:4])]))
    save = str(base / "idx")
    assert main(["index", str(corpus), "--save-dir", save, "--storage", "postgres", "--quiet", "--extractor",
                 "openie"]) == 0
    assert main(["stats", "--save-dir", save, "--storage", "postgres"]) == 0
    assert '"passage_nodes": 4' in capsys.readouterr().out
    assert main(["delete", "--ids", "n0", "n1", "--save-dir", save, "--storage", "postgres"]) == 0
    capsys.readouterr()
    assert main(["stats", "--save-dir", save, "--storage", "postgres"]) == 0
    assert json.loads(capsys.readouterr().out)["passage_nodes"] == 2
    queries, out = base / "q.json", base / "out.json"
    queries.write_text(json.dumps(["Who founded Tamsin College?"]))
    for search in ("exact", "hnsw"):
        assert main(["retrieve", "--save-dir", save, "--storage", "postgres", "--postgres-search", search,
                     "--queries", str(queries), "--top-k", "2", "--quiet", "--no-filter", "--output", str(out)]) == 0
        sol = json.loads(out.read_text())["solutions"][0]
        assert sol["doc_ids"][0] == ["n3"] and not sol["used_fallback"]
    assert main(["stats", "--save-dir", str(base / "typo"), "--storage", "postgres"]) == 2   # no index there
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    assert not EmbeddedPostgres(base / "idx" / "postgres").running()       # every command stopped it


def test_nul_characters_are_refused_at_the_door_and_dropped_from_model_output(tmp_path, pg_dsn, pg_schema):
    """PostgreSQL text cannot hold NUL: a document with one is refused naming it (nothing written);
    NUL inside model output (entities, triples) never reaches the database."""
    import json as _json

    import pytest
    from fakes import ScriptedLLM

    from hippo_engine.datatypes import Hyperedge
    from hippo_engine.index.facts import normalize_hyperedges

    def respond(messages):
        if "Named entities:" in messages[-1]["content"]:
            return _json.dumps({"triples": [["Ilse\x00 Marrow", "born\x00in", "Velor\x00"]]})
        return _json.dumps({"named_entities": ["Ilse\x00 Marrow", "Velor"]})

    rag = make_rag(tmp_path / "pg", llm=ScriptedLLM(respond), storage_backend="postgres", postgres_dsn=pg_dsn,
                   postgres_schema=pg_schema, use_filter=False)
    with pytest.raises(ValueError, match=r"documents \[1\] contain NUL"):
        rag.index([CORPUS[0], "Broken\nA text with a \x00 inside."])
    assert len(rag.index_state) == 0
    rag.index(CORPUS[1:2])                                   # model output with NULs is stored cleanly
    assert rag.graph_stats()["passage_nodes"] == 1 and rag.graph_stats()["entity_nodes"] >= 2
    assert normalize_hyperedges([Hyperedge("a\x00b", ("X",))], "unicode")[0].text == "a b"
    rag.close()
