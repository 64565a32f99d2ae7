"""Retrieval: pure scoring/seeding functions, PPR ranking on a hand-built graph, fallback,
ablation code paths, and retrieval after index/delete."""
import json

import numpy as np
import pytest

from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, make_rag, toy_respond
from hippo_engine.retrieval import entity_seeds, min_max, passage_seeds, top_k
from hippo_engine.text import mdhash_id


def test_min_max_and_top_k():
    np.testing.assert_allclose(min_max(np.array([1.0, 3.0, 2.0])), [0, 1, 0.5])
    np.testing.assert_array_equal(min_max(np.array([2.0, 2.0])), [1, 1])  # constant -> ones
    np.testing.assert_array_equal(top_k(np.array([0.1, 0.9, 0.5, 0.9]), 3), [1, 3, 2])  # ties: lower index
    assert len(top_k(np.array([1.0]), 5)) == 1


def test_entity_seeds_mean_and_idf():
    counts = np.array([2, 1, 4, 0, 0])
    # node 0 linked twice (scores 1.0 and 0.5, 2 passages) -> mean(0.5, 0.25)=0.375
    w, seeds = entity_seeds([(0, 1.0), (0, 0.5), (1, 0.3), (2, 1.0)], counts, 5, keep=2)
    assert seeds == [(0, 0.375), (1, 0.3)]
    assert w[2] == 0 and w[0] == 0.375
    np.testing.assert_allclose(passage_seeds(np.array([0.2, 0.4, 0.3]), 0.05), [0, 0.05, 0.025])


# A hand-built memory: the two-hop chain Nora -> Pell -> Quill is spread over three passages.
DOCS = ["P1\nNora Vance founded Pell Works.", "P2\nPell Works is based in Quillton.",
        "P3\nQuillton has a river port.", "P4\nZed Orr paints boats."]
TRIPLES = {DOCS[0]: [["Nora Vance", "founded", "Pell Works"]],
           DOCS[1]: [["Pell Works", "based in", "Quillton"]],
           DOCS[2]: [["Quillton", "has", "river port"]],
           DOCS[3]: [["Zed Orr", "paints", "boats"]]}


def chain_llm():
    def respond(messages):
        user = messages[-1]["content"]
        if "Named entities:" not in user and "Passage:" in user:
            return json.dumps({"named_entities": []})
        for d, t in TRIPLES.items():
            if d in user:
                return json.dumps({"triples": t})
        return "[]"
    return ScriptedLLM(respond)


def test_ppr_ranking_on_hand_built_graph(tmp_path):
    rag = make_rag(tmp_path, llm=chain_llm(), use_filter=False, passage_node_weight=0.0, linking_top_k=1)
    rag.index(DOCS)
    (sol,) = rag.retrieve(["Who founded Pell Works?"])
    # the top fact is (nora vance, founded, pell works); with linking_top_k=1 one entity seeds
    assert sol.kept_facts[0] == ("nora vance", "founded", "pell works")
    assert len(sol.seed_entities) == 1
    # walk order: the seed's passage(s) first, then the next hop, the unconnected passage last
    seed = sol.seed_entities[0][0]
    first = "P1" if seed == "nora vance" else None
    assert sol.docs[-1] == DOCS[3] and sol.doc_scores[-1] == 0.0
    assert sol.docs.index(DOCS[0]) < sol.docs.index(DOCS[2])
    assert sol.docs.index(DOCS[1]) < sol.docs.index(DOCS[2])
    if first:
        assert sol.docs[0] == DOCS[0]
    assert not sol.used_fallback


def test_fallback_when_filter_keeps_nothing(tmp_path):
    def respond(messages):
        text = " ".join(m["content"] for m in messages)
        if "relevant" in text.lower() and "Passage:" not in messages[-1]["content"]:
            return "[[ ## relevant_facts ## ]]\n[]\n\n[[ ## completed ## ]]"
        return chain_llm().respond(messages)
    rag = make_rag(tmp_path, llm=ScriptedLLM(respond))
    rag.index(DOCS)
    dense = rag.retrieve_dpr(["Who founded Pell Works?"])[0]
    (sol,) = rag.retrieve(["Who founded Pell Works?"])
    assert sol.used_fallback and sol.kept_facts == [] and len(sol.candidate_facts) > 0
    assert sol.docs == dense.docs


@pytest.mark.parametrize("linking", ["fact", "query", "ner"])
@pytest.mark.parametrize("use_passage_nodes", [True, False])
def test_ablation_paths(tmp_path, linking, use_passage_nodes):
    rag = make_rag(tmp_path, llm=chain_llm(), use_filter=False, linking=linking,
                   use_passage_nodes=use_passage_nodes)
    rag.index(DOCS)
    (sol,) = rag.retrieve(["Where is Pell Works based?"])
    if linking == "ner":  # the toy NER finds nothing in queries -> fallback
        assert sol.used_fallback
    else:
        assert sol.seed_entities and not sol.used_fallback
        if linking == "query":
            assert sol.candidate_facts == []
    assert sorted(sol.docs) == sorted(DOCS)
    r = rag._get_retriever()
    reset, _ = r.reset_vector([(0, 1.0)], np.array([0.1, 0.5, 0.2, 0.9]))
    assert (reset[r.passage_nodes].sum() > 0) == use_passage_nodes


def test_metrics_and_determinism(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?"]
    gold = [[CORPUS[1]], [CORPUS[3]]]
    sols, m = rag.retrieve(qs, gold_docs=gold)
    assert set(m) >= {"Recall@1", "Recall@2", "Recall@5"} and all(0 <= v <= 1 for v in m.values())
    again, _ = rag.retrieve(qs, gold_docs=gold)
    assert [s.docs for s in sols] == [s.docs for s in again]
    assert all(np.array_equal(a.doc_scores, b.doc_scores) for a, b in zip(sols, again))


def test_retrieval_sees_index_and_delete(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS[:4])
    q = ["Who married Oren Pike?"]
    assert CORPUS[7] not in rag.retrieve(q)[0].docs
    rag.index(CORPUS[4:])
    assert CORPUS[7] in rag.retrieve(q)[0].docs
    rag.delete([CORPUS[7]])
    docs = rag.retrieve(q)[0].docs
    assert CORPUS[7] not in docs and len(docs) == len(CORPUS) - 1
    assert CORPUS[7] not in rag.retrieve_dpr(q)[0].docs


def test_bad_queries(tmp_path):
    rag = make_rag(tmp_path)
    with pytest.raises(RuntimeError, match="empty"):
        rag.retrieve(["anything"])
    rag.index(CORPUS[:2])
    with pytest.raises(TypeError):
        rag.retrieve("not a list")
    with pytest.raises(ValueError):
        rag.retrieve(["ok", "  "])
