"""Document ids: index(docs, ids=...), delete(ids=...), ids in results, replacement, legacy
passages without document rows, and the delete / replace equalities."""
import logging

import pytest
from helpers import CORPUS, assert_same, make_rag, snapshot

from hippo_engine.ids import chunk_id, document_id, legacy_document_id
from hippo_engine.index.documents import split_documents

IDS = [f"d{i}" for i in range(len(CORPUS))]


def pid(text: str) -> str:
    return chunk_id(text)


def test_split_documents_ids_chunks_and_duplicates():
    b = split_documents(["a b c d", "", "a b e f", "a b c d"], None, "index", 2)
    assert b.skipped == [1]
    assert list(b.documents) == [document_id("a b c d"), document_id("a b e f")]   # duplicate collapsed
    assert b.documents[document_id("a b c d")] == [pid("a b"), pid("c d")]
    assert set(b.passages) == {pid("a b"), pid("c d"), pid("e f")}
    b = split_documents(["x", "x"], ["one", "two"], "index", None)
    assert b.documents == {"one": [pid("x")], "two": [pid("x")]}
    assert legacy_document_id(pid("x")) == document_id("x")


@pytest.mark.parametrize("ids, err, match", [
    (["a"], ValueError, r"index\(\): ids has 1 item\(s\) but there are 2"),
    (["a", "a"], ValueError, r"ids item 1 \('a'\) repeats item 0"),
    (["a", 3], TypeError, r"ids must be strings; items \[1\]"),
    (["a", " "], ValueError, r"ids must be non-empty strings; items \[1\]"),
    ("ab", TypeError, "ids must be a list"),
])
def test_bad_ids_are_refused_naming_the_item(tmp_path, ids, err, match):
    rag = make_rag(tmp_path)
    with pytest.raises(err, match=match):
        rag.index(CORPUS[:2], ids=ids)
    assert len(rag.index_state) == 0


def test_delete_needs_exactly_one_of_docs_and_ids(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:2])
    with pytest.raises(TypeError, match="exactly one"):
        rag.delete()
    with pytest.raises(TypeError, match="exactly one"):
        rag.delete(CORPUS[:1], ids=["x"])
    with pytest.raises(ValueError, match=r"delete\(\): ids item 1"):
        rag.delete(ids=["x", "x"])


def test_index_report_and_results_carry_ids(tmp_path):
    rag = make_rag(tmp_path)
    rep = rag.index(CORPUS, ids=IDS)
    assert rep["added"] == len(CORPUS)
    assert rep["documents"] == {"added": IDS, "replaced": [], "unchanged": 0}
    for mode in ("hipporag2", "naive", "hi_local"):
        sol = rag.retrieve(["Who mapped Lake Veloria?"], num_to_retrieve=3, mode=mode)[0]
        assert sol.passage_ids == [pid(d) for d in sol.docs], mode
        assert sol.doc_ids == [[IDS[CORPUS.index(d)]] for d in sol.docs], mode
        d = sol.to_dict()
        assert d["passage_ids"] == sol.passage_ids and d["doc_ids"] == sol.doc_ids
    sols = rag.rag_qa(["Who mapped Lake Veloria?"], mode="hi_local")[0]
    assert sols[0].doc_ids and sols[0].doc_ids[0][0] in IDS


def test_derived_ids_without_ids(tmp_path):
    rag = make_rag(tmp_path)
    rep = rag.index(CORPUS[:3])
    assert rep["documents"]["added"] == [document_id(d) for d in CORPUS[:3]]
    sol = rag.retrieve(["Who mapped Lake Veloria?"], num_to_retrieve=1)[0]
    assert sol.doc_ids == [[document_id(sol.docs[0])]]


def test_reindex_same_id_same_text_is_a_no_op(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS, ids=IDS)
    before, calls, version = snapshot(rag), rag.llm.calls, rag.index_state.version
    rep = rag.index(CORPUS, ids=IDS)
    assert rep == {"added": 0}                                 # nothing changed
    rep = rag.index(CORPUS[:2] + [CORPUS[0]], ids=["d0", "d1", "again"])
    assert rep["added"] == 0 and rep["documents"] == {"added": ["again"], "replaced": [], "unchanged": 2}
    assert rag.llm.calls == calls and rag.index_state.version == version
    assert rag.index_state.documents_of([pid(CORPUS[0])]) == [["again", "d0"]]
    rag.delete(ids=["again"])
    assert_same(before, snapshot(rag))


def test_same_id_other_text_replaces_the_document(tmp_path):
    rag = make_rag(tmp_path / "r")
    rag.index(CORPUS[:4], ids=IDS[:4])
    rep = rag.index([CORPUS[5]], ids=["d1"])           # d1 now holds Brask's text
    assert rep["documents"] == {"added": [], "replaced": ["d1"], "unchanged": 0}
    assert rep["added"] == 1 and rep["removed"] == 1
    ref = make_rag(tmp_path / "ref")
    ref.index([CORPUS[0], CORPUS[5], CORPUS[2], CORPUS[3]], ids=["d0", "d1", "d2", "d3"])
    assert_same(snapshot(ref), snapshot(rag))
    assert rag.index_state.stored_documents(["d1"])[0] == {"d1": [pid(CORPUS[5])]}


def test_replacement_keeps_passages_another_document_holds(tmp_path):
    rag = make_rag(tmp_path)
    rag.index([CORPUS[0], CORPUS[0]], ids=["a", "b"])
    rag.index([CORPUS[1]], ids=["a"])
    assert rag.index_state.has_passage(pid(CORPUS[0]))       # b still holds it
    rag.index([CORPUS[2]], ids=["b"])
    assert not rag.index_state.has_passage(pid(CORPUS[0]))


def test_delete_by_ids_equals_never_added(tmp_path, caplog):
    rag = make_rag(tmp_path / "d")
    rag.index(CORPUS, ids=IDS)
    with caplog.at_level(logging.WARNING):
        rep = rag.delete(ids=IDS[5:] + ["nope"])
    assert rep["documents"] == {"removed": IDS[5:], "unknown": ["nope"]}
    assert rep["removed"] == len(CORPUS) - 5
    assert "1 of 4 document(s) were not in the index" in caplog.text
    ref = make_rag(tmp_path / "a")
    ref.index(CORPUS[:5], ids=IDS[:5])
    assert_same(snapshot(rag), snapshot(ref))


def test_shared_chunks_survive_until_their_last_document_goes(tmp_path):
    a = "Velor Amber Fair. Brask Tamsin River. Orsk Highlands."
    b = "Velor Amber Fair. Mira Olt married. Oren Pike wrote."
    rag = make_rag(tmp_path / "x", chunk_size=3)
    rag.index([a, b], ids=["a", "b"])
    shared = pid("Velor Amber Fair.")
    assert rag.index_state.documents_of([shared]) == [["a", "b"]]
    rag.delete(ids=["a"])
    ref = make_rag(tmp_path / "y", chunk_size=3)
    ref.index([b], ids=["b"])
    assert_same(snapshot(rag), snapshot(ref))
    rag.delete(docs=[b])                      # by text: resolves to the document holding it
    assert len(rag.index_state) == 0 and snapshot(rag)["documents"] == {}


def test_delete_by_text_finds_a_document_indexed_with_an_id(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:3], ids=IDS[:3])
    rep = rag.delete(CORPUS[1:2] + ["Not indexed\nat all"])
    assert rep["documents"]["removed"] == ["d1"] and rep["documents"]["unknown_docs"] == [1]
    assert not rag.index_state.has_passage(pid(CORPUS[1]))
    assert rag.index_state.stored_documents(IDS[:3])[0].keys() == {"d0", "d2"}


def test_legacy_passages_without_document_rows(tmp_path):
    """An index written before document ids: each passage is its own document, with the id its
    text gets; delete(docs=[text]) and delete(ids=[that id]) work, re-indexing adopts it."""
    rag = make_rag(tmp_path / "old")
    rag.index(CORPUS)
    with rag.index_state.db.transaction():
        rag.index_state.db.delete_documents([document_id(d) for d in CORPUS])
    assert rag.index_state.documents_of([pid(CORPUS[0])]) == [[document_id(CORPUS[0])]]
    sol = rag.retrieve(["Who mapped Lake Veloria?"], num_to_retrieve=2)[0]
    assert sol.doc_ids == [[document_id(d)] for d in sol.docs]
    rep = rag.delete(CORPUS[6:7])
    assert rep["removed"] == 1 and rep["documents"]["unknown_docs"] == []
    rep = rag.delete(ids=[document_id(CORPUS[7]), "doc-0000"])
    assert rep["removed"] == 1 and rep["documents"]["unknown"] == ["doc-0000"]
    rep = rag.index(CORPUS[:6])
    assert rep["added"] == 0 and rep["documents"]["unchanged"] == 6
    assert rag.index_state.db.document_passages([document_id(CORPUS[0])]) == {document_id(CORPUS[0]):
                                                                              [pid(CORPUS[0])]}
    ref = make_rag(tmp_path / "new")
    ref.index(CORPUS[:6])
    assert_same(snapshot(ref), snapshot(rag))


def test_crash_mid_replacement_keeps_previous_state(tmp_path, monkeypatch):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:4], ids=IDS[:4])
    before = snapshot(rag)
    import hippo_engine.index.synonymystate as ix
    import hippo_engine.index.writer as writer_mod

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    # a crash while adding the new passage, then one after it, before the old one's removal
    for target, name in ((ix, "update_synonymy"), (writer_mod.IndexWriter, "_remove_rows")):
        monkeypatch.setattr(target, name, boom)
        with pytest.raises(RuntimeError, match="simulated crash"):
            rag.index([CORPUS[6]], ids=["d1"])
        monkeypatch.undo()
        assert_same(before, snapshot(rag))
    assert_same(before, snapshot(make_rag(tmp_path)))


def test_failed_extraction_records_only_whole_documents(tmp_path):
    from fakes import ScriptedLLM
    from helpers import toy_respond

    from hippo_engine.index.openie import OpenIEError

    def flaky(messages):
        if "Oren Pike was a geologist" in messages[-1]["content"]:
            return "no JSON here"
        return toy_respond(messages)

    rag = make_rag(tmp_path, llm=ScriptedLLM(flaky), chunk_size=12)
    long_doc = CORPUS[3] + " " + CORPUS[4]               # two chunks, the second fails
    with pytest.raises(OpenIEError):
        rag.index([long_doc, CORPUS[0]], ids=["long", "lake"])
    stored = rag.index_state.stored_documents(["long", "lake"])[0]
    assert stored.keys() == {"lake"}
    # the failed document's good chunk is not indexed either: no passage without its document
    assert sorted(rag.index_state.db.passage_ids()) == sorted(stored["lake"])
