"""Issue 39, item 1: one document list per index, however a document arrived. ``HippoRAG.documents()`` (and
every door that lists documents) reads the index's document registry, which the index writer keeps in the
transaction of each change; an index written before the registry existed gets it filled when opened."""
from __future__ import annotations

import contextlib
import sqlite3

from helpers import make_rag

from hippo_engine.ids import chunk_id, legacy_document_id

DOCS = {"alpha": "Alice Brown founded the Quarry Lantern festival in Pellwick.",
        "beta": "The Vellmar Observatory stands on a hill above Tarnby.",
        "gamma": "Tova Brann wrote the novel The Glass Orchard in 1931."}


def ids(rag) -> list[str]:
    return [d["id"] for d in rag.documents()["documents"]]


def test_documents_are_listed_in_the_order_indexed_and_follow_replace_and_delete(tmp_path):
    with make_rag(tmp_path / "m") as rag:
        assert rag.documents() == {"documents": [], "total": 0, "offset": 0, "limit": 100}
        rag.index(list(DOCS.values()), ids=list(DOCS))
        listed = rag.documents()
        assert ids(rag) == list(DOCS) and listed["total"] == 3
        assert all(d["added"] == d["updated"] and d["added"].endswith("Z") for d in listed["documents"])
        rag.index(["Alice Brown moved the festival to Tarnby."], ids=["alpha"])      # replaced: keeps its place
        again = rag.documents()["documents"]
        assert [d["id"] for d in again] == list(DOCS) and again[0]["added"] == listed["documents"][0]["added"]
        rag.delete(ids=["beta"])
        assert ids(rag) == ["alpha", "gamma"]
        assert [d["id"] for d in rag.documents(offset=1, limit=1)["documents"]] == ["gamma"]


def _sql(rag, *statements) -> None:
    path = rag.index_state.db.path
    rag.close()
    with contextlib.closing(sqlite3.connect(path)) as c, c:
        for s in statements:
            c.execute(s)


def test_an_index_from_before_the_registry_gets_it_filled_on_open(tmp_path):
    rag = make_rag(tmp_path / "m")
    rag.index(list(DOCS.values()), ids=list(DOCS))
    _sql(rag, "DROP TABLE document_registry")
    with make_rag(tmp_path / "m") as rag:
        assert ids(rag) == list(DOCS) and rag.documents()["total"] == 3


def test_passages_without_document_rows_are_listed_under_their_legacy_id_until_removed_or_claimed(tmp_path):
    rag = make_rag(tmp_path / "m")
    rag.index(list(DOCS.values()))                       # derived ids
    _sql(rag, "DELETE FROM documents", "DROP TABLE document_registry")      # as written before document ids
    legacy = {t: legacy_document_id(chunk_id(t)) for t in DOCS.values()}
    with make_rag(tmp_path / "m") as rag:
        assert sorted(ids(rag)) == sorted(legacy.values())
        rag.delete(docs=[DOCS["alpha"]])                 # by text: the old passage goes, and its row
        assert sorted(ids(rag)) == sorted([legacy[DOCS["beta"]], legacy[DOCS["gamma"]]])
        rag.index([DOCS["beta"]], ids=["beta-now"])      # a document claims the old passage: one row, its id
        assert sorted(ids(rag)) == sorted(["beta-now", legacy[DOCS["gamma"]]])
        rag.delete(ids=[legacy[DOCS["gamma"]]])
        assert ids(rag) == ["beta-now"]
