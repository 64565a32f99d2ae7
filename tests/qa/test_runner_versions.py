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
