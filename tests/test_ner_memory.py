"""extractor="ner": memory without an LLM, end to end on the facade (real spaCy, fake encoder)."""
import numpy as np
import pytest
from fakes import NgramEncoder, NoCallLLM, ScriptedLLM
from helpers import CORPUS, assert_same, snapshot

from hippo_engine import HippoRAG
from hippo_engine.store import StoreError

QUESTIONS = ["Where was Ilse Marrow born?", "Who founded the Amber Fair in Velor?",
             "Which river does the capital of Kaldavia lie on?"]


def ner_rag(path, **kw):
    return HippoRAG(path, extractor="ner", llm=kw.pop("llm", None) or NoCallLLM(), encoder=NgramEncoder(),
                    show_progress=False, **{"synonymy_threshold": 0.6, **kw})


def arrays(g):
    return (list(g.node_ids), g.src.tolist(), g.dst.tolist(), g.weight.tolist(), g.kinds.tolist())


def test_index_and_retrieve_make_no_llm_call(tmp_path):
    rag = ner_rag(tmp_path)            # NoCallLLM fails the test on any call
    rep = rag.index(CORPUS)
    assert rep["added"] == len(CORPUS) and rep["openie_llm_passages"] == 0
    assert rag.index_state.extractor == "ner"
    sols = rag.retrieve(QUESTIONS, num_to_retrieve=3)
    assert rag.retriever.linking.name == "ner_fact"
    assert [len(s.docs) for s in sols] == [3, 3, 3]
    assert sols[0].docs[0].startswith("Ilse Marrow")
    assert all(s.kept_facts and not s.used_fallback for s in sols)
    # a fact is a sentence linked to all its entities; it is shown as (text, "mentions", entities)
    text, rel, ents = sols[0].kept_facts[0]
    assert rel == "mentions" and text.endswith(".") and ents


def test_incremental_equals_batch_and_delete_equals_never_added(tmp_path):
    A, B = CORPUS[:5], CORPUS[5:]
    inc = ner_rag(tmp_path / "inc")
    inc.index(A)
    inc.index(B)
    full = ner_rag(tmp_path / "full")
    full.index(A + B)
    assert_same(snapshot(inc), snapshot(full))
    assert arrays(inc.graph) == arrays(full.graph)          # bit for bit, co-occurrence weights included
    full.delete(B)
    only_a = ner_rag(tmp_path / "a")
    only_a.index(A)
    assert_same(snapshot(full), snapshot(only_a))
    assert arrays(full.graph) == arrays(only_a.graph)
    assert full.index_state.passage_hyperedges == only_a.index_state.passage_hyperedges


def test_corpus_order_does_not_matter(tmp_path):
    a = ner_rag(tmp_path / "a")
    a.index(CORPUS)
    b = ner_rag(tmp_path / "b")
    b.index(list(reversed(CORPUS)))
    assert arrays(a.graph) == arrays(b.graph)
    sa, sb = a.retrieve(QUESTIONS), b.retrieve(QUESTIONS)
    for x, y in zip(sa, sb, strict=True):
        assert x.docs == y.docs and np.array_equal(x.doc_scores, y.doc_scores)


def test_extractors_do_not_mix(tmp_path):
    ner_rag(tmp_path).index(CORPUS[:2])
    openie = HippoRAG(tmp_path, extractor="openie", llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False)
    with pytest.raises(StoreError, match="extractor='ner'"):
        openie.index(CORPUS[2:3])
    with pytest.raises(ValueError, match="extractor='openie'"):
        ner_rag(tmp_path).import_openie(tmp_path / "x.json")


def test_filter_is_opt_in_and_then_works_as_in_openie(tmp_path):
    calls = []

    def keep_first(messages):
        calls.append(messages)
        return '[[ ## fact_after_filter ## ]]\n{"fact": []}\n\n[[ ## completed ## ]]'

    rag = ner_rag(tmp_path, llm=ScriptedLLM(keep_first), use_filter=True)
    rag.index(CORPUS)
    assert calls == []                                # indexing never asks the LLM
    sols = rag.retrieve(QUESTIONS[:1])
    assert len(calls) == 1 and "mentions" in calls[0][-1]["content"]
    assert sols[0].kept_facts == [] and len(sols[0].candidate_facts) == 5   # the filter saw 5 candidates


def test_sentence_mean_passage_vectors(tmp_path):
    from hippo_engine.ids import chunk_id, hyperedge_id

    rag = ner_rag(tmp_path / "m", passage_vectors="sentence_mean")
    rag.index(CORPUS[:5])
    rag.index(CORPUS[5:])
    st, facts = rag.index_state.stores["passage"], rag.index_state.stores["fact"]
    pid = chunk_id(CORPUS[2])
    fids = dict.fromkeys(hyperedge_id(h) for h in rag.index_state.passage_hyperedges[pid])
    mean = np.mean([facts.matrix[facts.row(f)].astype(np.float64) for f in fids], axis=0)
    assert np.allclose(st.matrix[st.row(pid)], mean / np.linalg.norm(mean), atol=1e-6)
    batch = ner_rag(tmp_path / "b", passage_vectors="sentence_mean")
    batch.index(CORPUS)
    assert_same(snapshot(rag), snapshot(batch))
    assert rag.retrieve(QUESTIONS[:1])[0].docs[0].startswith("Ilse Marrow")
    with pytest.raises(StoreError, match="passage_vectors"):
        ner_rag(tmp_path / "m")                      # an index keeps its passage vectors


def test_a_document_over_spacys_limit_is_refused_naming_it_and_chunk_size(tmp_path):
    """A document over spaCy's 1,000,000 characters (no chunking) gets a message naming the
    document and the chunk_size option, before any work, instead of spaCy's raw E088."""
    rag = ner_rag(tmp_path, chunk_size=None)
    big = "Ilse Marrow went to Velor. " * 37_040                # 1,000,080 characters
    with pytest.raises(ValueError, match=r"document 1 \(id 'big'\) has a passage of 1,000,080 characters.*"
                                         r"at most 1,000,000.*chunk_size") as e:
        rag.index([CORPUS[0], big], ids=["small", "big"])
    assert "E088" not in str(e.value)
    assert len(rag.index_state) == 0                          # nothing half-done
    assert rag.index([CORPUS[0]], ids=["small"])["added"] == 1


def test_a_query_over_spacys_limit_is_cut_for_query_ner_with_a_warning(tmp_path, caplog):
    """Query NER reads the start of an over-long query instead of failing the search. (spaCy's
    limit is lowered here: at the real 1,000,000 characters the model would take minutes.)"""
    import logging
    rag = ner_rag(tmp_path)
    rag.index(CORPUS)
    rag.ner.pipeline().max_length = 400
    query = QUESTIONS[0] + " Tell me more" * 60                 # 807 characters
    with caplog.at_level(logging.WARNING, logger="hippo_engine.index.ner"):
        sol = rag.retrieve([query, QUESTIONS[1]], num_to_retrieve=3)
    assert sol[0].docs[0].startswith("Ilse Marrow")
    assert [r.getMessage() for r in caplog.records if "query NER" in r.getMessage()] == [
        "query NER: 1 query(ies) longer than spaCy's limit of 400 characters (query 0: 807) cut to their first "
        "400 characters"]
