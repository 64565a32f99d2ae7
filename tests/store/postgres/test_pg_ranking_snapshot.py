"""A lazy PostgreSQL reader ranks inside one snapshot (``hipporag2``, ``naive``): while it ranks it asks the
database for top-k rows and passage texts, and a writer that commits meanwhile does not reach it. Before,
``python -m reproduce serve-load`` and a stress of one reader against one writer saw answers shorter than
top_k, passages named with a document id that never existed, and ``KeyError`` on a passage id the reader
did not hold. Here the writer deletes a document in the middle of every ranking (fake models)."""
from __future__ import annotations

import pytest
from helpers import CORPUS, make_rag

from hippo_engine.store.postgres.lazy import LazyPostgresStore

IDS = [f"doc-{i}" for i in range(len(CORPUS))]


def _pg(save, dsn, schema, search):
    return make_rag(save, storage_backend="postgres", postgres_dsn=dsn, postgres_schema=schema,
                    postgres_search=search, use_filter=False)


@pytest.mark.parametrize("search", ["hnsw", "exact"])
@pytest.mark.parametrize("mode", ["naive", "hipporag2"])
def test_a_writer_committing_during_a_ranking_does_not_reach_it(tmp_path, pg_dsn, pg_schema, monkeypatch, mode,
                                                                 search):
    writer = _pg(tmp_path / "m", pg_dsn, pg_schema, search)
    reader = _pg(tmp_path / "m", pg_dsn, pg_schema, search)
    try:
        writer.index(CORPUS, ids=IDS)
        query = "Where was Ilse Marrow born?"
        before = reader.retrieve([query], 4, mode=mode)[0]
        deleted: list[str] = []

        def after_a_delete(read):
            def run(self, *args, **kwargs):
                left = [d for d in IDS if d not in deleted]
                deleted.append(left[0])
                writer.delete(ids=deleted[-1:])       # committed before each of the reader's queries
                return read(self, *args, **kwargs)
            return run

        for name in ("extremes", "texts", "texts_found", "text"):    # top-k rows, passage texts
            monkeypatch.setattr(LazyPostgresStore, name, after_a_delete(getattr(LazyPostgresStore, name)))
        sol = reader.retrieve([query], 4, mode=mode)[0]
        monkeypatch.undo()
        assert deleted, "the ranking asked the database nothing"
        assert sol.docs == before.docs and sol.doc_ids == before.doc_ids          # the version it started from
        assert list(sol.doc_scores) == list(before.doc_scores)
        after = reader.retrieve([query], 4, mode=mode)[0]                      # then the new one
        assert len(after.docs) == 4 and not {d for ds in after.doc_ids for d in ds} & set(deleted)
    finally:
        reader.close()
        writer.close()
