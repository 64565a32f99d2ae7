"""A retrieve must show one committed version of the index: the passages it ranked and the document ids it
names for them come from the same version, even when another writer commits in between (found by
``python -m reproduce serve-load``: a passage shown with a document id that never existed). Each test has
a writer commit in the middle of a ranking (fake models, SQLite)."""
from __future__ import annotations

from helpers import CORPUS, make_rag

IDS = [f"doc-{i}" for i in range(len(CORPUS))]


def test_doc_ids_are_those_of_the_version_that_was_ranked(tmp_path, monkeypatch):
    reader = make_rag(tmp_path / "m", use_filter=False)
    writer = make_rag(tmp_path / "m", use_filter=False)
    try:
        writer.index(CORPUS, ids=IDS)
        query = "Where was Ilse Marrow born?"
        first = reader.retrieve([query], 3)[0]
        assert all(len(ds) == 1 and ds[0] in IDS for ds in first.doc_ids)
        search = reader.queries.searches.search("hipporag2")
        ranked, deleted = search.retrieve, []

        def rank_then_another_writer_deletes(queries, param):
            sols = ranked(queries, param)
            if not deleted:         # the first ranking only: its top document goes right after it
                deleted.append(IDS[CORPUS.index(sols[0].docs[0])])
                writer.delete(ids=deleted)
            return sols

        monkeypatch.setattr(search, "retrieve", rank_then_another_writer_deletes)
        sol = reader.retrieve([query], 3)[0]
        shown = [IDS[CORPUS.index(d)] for d in sol.docs]
        assert sol.doc_ids == [[d] for d in shown], f"passages of {shown} shown with doc ids {sol.doc_ids}"
        assert len(shown) == 3
    finally:
        reader.close()
        writer.close()


def test_a_reader_that_moved_on_during_a_ranking_still_names_the_ranked_version(tmp_path, monkeypatch):
    """A lazy PostgreSQL reader reads passage texts from the database while it ranks and may reload a newer
    version meanwhile: the document ids are still those of the version the passages were ranked on."""
    reader = make_rag(tmp_path / "m", use_filter=False)
    writer = make_rag(tmp_path / "m", use_filter=False)
    try:
        writer.index(CORPUS, ids=IDS)
        query = "Where was Ilse Marrow born?"
        reader.retrieve([query], 3)
        search = reader.queries.searches.search("hipporag2")
        ranked, deleted = search.retrieve, []

        def rank_while_another_writer_deletes(queries, param):
            sols = ranked(queries, param)
            if not deleted:
                deleted.append(IDS[CORPUS.index(sols[0].docs[0])])
                writer.delete(ids=deleted)
                reader.index_state.refresh()      # the reader moves on before the ranking returns
            return sols

        monkeypatch.setattr(search, "retrieve", rank_while_another_writer_deletes)
        sol = reader.retrieve([query], 3)[0]
        shown = [IDS[CORPUS.index(d)] for d in sol.docs]
        assert sol.doc_ids == [[d] for d in shown] and len(shown) == 3
    finally:
        reader.close()
        writer.close()


def test_a_ranking_reads_one_version_however_many_writers_commit_meanwhile(tmp_path, monkeypatch):
    """hipporag2 and naive rank inside one snapshot of the database: a delete committed during each ranking
    does not reach it; the answer is that of the version the ranking started from, on the first try."""
    reader = make_rag(tmp_path / "m", use_filter=False)
    writer = make_rag(tmp_path / "m", use_filter=False)
    try:
        writer.index(CORPUS, ids=IDS)
        query = "Where was Ilse Marrow born?"
        for mode in ("hipporag2", "naive"):
            before = reader.retrieve([query], 3, mode=mode)[0]
            search = reader.queries.searches.search(mode)
            ranked, calls = search.retrieve, []

            def rank_while_writers_delete(queries, param, ranked=ranked, calls=calls):
                calls.append(1)
                sols = ranked(queries, param)
                alive = [d for d in IDS if d in reader.index_state.all_documents()]
                writer.delete(ids=[alive[0]])                  # commits during every ranking
                return sols

            monkeypatch.setattr(search, "retrieve", rank_while_writers_delete)
            sol = reader.retrieve([query], 3, mode=mode)[0]
            monkeypatch.undo()
            assert len(calls) == 1, f"{mode}: ranked {len(calls)} times"
            assert sol.docs == before.docs and sol.doc_ids == before.doc_ids
            assert list(sol.doc_scores) == list(before.doc_scores)
            writer.index(CORPUS, ids=IDS)                      # everything back for the next mode
    finally:
        reader.close()
        writer.close()
