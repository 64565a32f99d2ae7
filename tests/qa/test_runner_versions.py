"""A retrieve must show one committed version of the index: the passages it ranked and the document ids it
names for them come from the same version, even when another writer commits in between (found by
``python -m reproduce serve-load``: a passage shown with a document id that never existed)."""
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
        assert deleted[0] not in shown          # ranked again on the version after the delete
    finally:
        reader.close()
        writer.close()


def test_a_ranking_during_which_the_reader_moved_on_is_done_again(tmp_path, monkeypatch):
    """A lazy PostgreSQL reader reads passage texts from the database while it ranks and may reload a newer
    version meanwhile: a ranking is kept only if the version it started from is still the stored one."""
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
        assert deleted[0] not in shown and sol.doc_ids == [[d] for d in shown]
    finally:
        reader.close()
        writer.close()
