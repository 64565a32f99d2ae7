"""Exporting between SQLite and PostgreSQL (``hippo-engine export --to postgres...``): the copy on the
other backend is the same index (snapshot, rankings with their float scores, documents in order), and
back into a folder again."""
from __future__ import annotations

from helpers import CORPUS, assert_copy_alike, index_view, make_rag, real_sample_index, real_sample_rankings

from hippo_engine.cli import main
from hippo_engine.config import HippoConfig
from hippo_engine.export import export_index

IDS = [f"d{i}" for i in range(len(CORPUS))]


def test_sqlite_to_a_postgres_server_and_back_is_the_same_index(tmp_path, pg_dsn, pg_schema):
    src = make_rag(tmp_path / "src", use_filter=False)
    src.index(CORPUS, ids=IDS, metadata=[{"n": i} for i in range(len(CORPUS))])
    src.delete(ids=["d2"])
    want = index_view(src)
    src.close()
    to_pg = HippoConfig(show_progress=False, storage_backend="postgres", postgres_dsn=pg_dsn,
                        postgres_schema=pg_schema)
    report = export_index(tmp_path / "src", tmp_path / "pg", to_pg)
    assert report.backend == "postgres" and pg_schema in report.destination
    assert_copy_alike(tmp_path / "pg", want, storage_backend="postgres", postgres_dsn=pg_dsn)
    export_index(tmp_path / "pg", tmp_path / "back", HippoConfig(show_progress=False),
                 source_config=HippoConfig(show_progress=False, postgres_dsn=pg_dsn))
    assert_copy_alike(tmp_path / "back", want)


def test_the_command_line_exports_into_an_embedded_postgres(pg_dirs, capsys):
    base = pg_dirs()
    src = make_rag(base / "src", use_filter=False)
    src.index(CORPUS[:4], ids=IDS[:4])
    want = index_view(src)
    src.close()
    assert main(["export", "--save-dir", str(base / "src"), str(base / "pg"), "--to", "postgres", "--quiet"]) == 0
    assert "exported 4 passages" in capsys.readouterr().out
    assert_copy_alike(base / "pg", want)                     # found on its recorded backend


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
    base = pg_dirs()
    real_sample_index(base / "src")
    want = real_sample_rankings(base / "src")
    assert all(len(w[2]) == len(w[0]) > 0 for w in want)        # every passage explained
    export_index(base / "src", base / "pg", HippoConfig(show_progress=False, storage_backend="postgres"))
    assert real_sample_rankings(base / "pg") == want
    export_index(base / "pg", base / "back", HippoConfig(show_progress=False))
    assert real_sample_rankings(base / "back") == want
