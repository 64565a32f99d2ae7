"""second_hop and dense_agree through HippoRAG on a real extractor="ner" index (spaCy, the packaged
embedder): every strategy ranks every passage, keeps the first walk's head; the "auto" defaults are the
measured wide / 2 / 2 on this index, and dense_agree moves only dense retrieval's best passage."""
import numpy as np
import pytest

from hippo_engine import HippoRAG

pytestmark = pytest.mark.slow

DOCS = ["Green (album)\nGreen is the fourth studio album by the English guitarist Steve Hillage, released in 1978.",
        "Steve Hillage\nSteve Hillage is an English musician. He married the keyboardist Miquette Giraudy in 1979.",
        "Miquette Giraudy\nMiquette Giraudy is a French keyboard player and singer, born in Nice.",
        "Green\nGreen is the colour between cyan and yellow on the visible spectrum.",
        "Gong (band)\nGong is a progressive rock band formed in Paris by Daevid Allen.",
        "Nice\nNice is a city on the French Riviera, in the south east of France."]
QUESTIONS = ["Who is the spouse of the Green performer?", "Where was the wife of Steve Hillage born?"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("second_hop")
    with HippoRAG(path, extractor="ner", show_progress=False) as rag:
        rag.index(DOCS)
    return path


def ranking(folder, **config):
    with HippoRAG(folder, extractor="ner", show_progress=False, **config) as rag:
        return rag.retrieve(QUESTIONS)


@pytest.mark.parametrize("hop", ["wide", "bridge", "reseed"])
def test_each_second_hop_scores_its_head_term_and_ranks_every_passage(folder, hop):
    """Without the dense term a passage's score is its second-walk term plus, on the first walk's two best,
    the head term: head_weight x their first-walk probability over its largest (the first gets it whole)."""
    base = ranking(folder, second_hop="none", dense_weight=0.0)
    out = ranking(folder, second_hop=hop, second_hop_head=2, dense_weight=0.0)
    alone = ranking(folder, second_hop=hop, second_hop_head=2, head_weight=0.0, dense_weight=0.0)
    for b, o, a in zip(base, out, alone, strict=True):
        assert sorted(o.docs) == sorted(DOCS) and not o.used_fallback
        assert all(np.diff(o.doc_scores) <= 0)
        walk = dict(zip(a.docs, a.doc_scores, strict=True))           # the second walk's term alone
        first = dict(zip(b.docs, b.doc_scores / b.doc_scores[0], strict=True))
        for i, (doc, score) in enumerate(zip(o.docs, o.doc_scores, strict=True)):
            head = 2.0 * first[doc] if doc in b.docs[:2] else 0.0
            assert score == pytest.approx(walk[doc] + head, rel=1e-12), i
    assert ranking(folder, second_hop=hop, second_hop_head=2, dense_weight=0.0)[0].docs == out[0].docs  # deterministic


def test_auto_defaults_are_the_measured_configuration_on_a_ner_index(folder):
    with HippoRAG(folder, show_progress=False) as rag:
        cfg = rag.retriever.config
        assert (rag.config.second_hop, rag.config.dense_agree, rag.config.dense_weight) == ("auto",) * 3
        assert (cfg.second_hop, cfg.second_hop_head, cfg.dense_agree, cfg.dense_weight) == ("wide", 2, 0, 1.5)
        default = rag.retrieve(QUESTIONS)
    measured = ranking(folder, second_hop="wide", second_hop_head=2, dense_agree=0, dense_weight=1.5)
    assert [d.docs for d in default] == [m.docs for m in measured]
    assert all(np.array_equal(d.doc_scores, m.doc_scores) for d, m in zip(default, measured, strict=True))


def test_dense_agree_moves_only_dense_best(folder):
    base = ranking(folder, second_hop="none", dense_agree=0, dense_weight=0.0)
    with HippoRAG(folder, extractor="ner", show_progress=False) as rag:
        dense = rag.retrieve_dpr(QUESTIONS)
    agreed = ranking(folder, second_hop="none", dense_agree=len(DOCS), dense_weight=0.0)
    for a, b, d in zip(agreed, base, dense, strict=True):
        assert a.docs[0] == d.docs[0]
        assert [x for x in a.docs if x != d.docs[0]] == [x for x in b.docs if x != d.docs[0]]


def test_second_hop_needs_a_hyperedge_index(tmp_path):
    from fakes import ScriptedLLM
    llm = ScriptedLLM(lambda m: '{"named_entities": ["Steve Hillage"]}' if "Named entities" not in m[-1]["content"]
                      else '{"triples": [["Steve Hillage", "released", "Green"]]}')
    with HippoRAG(tmp_path, llm=llm, use_filter=False, show_progress=False, second_hop="wide") as rag:
        rag.index(DOCS[:2])
        with pytest.raises(ValueError, match="hyperedges"):
            rag.retrieve(QUESTIONS[:1])


#: the graph ranks Miquette Giraudy's page first and Steve Hillage's second; dense retrieval's best is his
DISAGREE = "Which French singer and keyboard player married Steve Hillage?"


@pytest.mark.parametrize("agree", [0, 2, len(DOCS)])
def test_the_top_k_is_a_prefix_of_the_ranking_for_every_k(folder, agree):
    """``top_k`` only cuts the ranking: the top-rank rule looks at its ``dense_agree`` ranks whatever k is
    (with k=1 it saw one rank and left dense retrieval's best behind the graph's first)."""
    questions = [*QUESTIONS, DISAGREE]
    with HippoRAG(folder, extractor="ner", show_progress=False, dense_agree=agree, dense_weight=0.0) as rag:
        full = rag.retrieve(questions, len(DOCS))
        for k in range(1, len(DOCS) + 1):
            for f, cut in zip(full, rag.retrieve(questions, k), strict=True):
                assert cut.docs == f.docs[:k] and np.array_equal(cut.doc_scores, f.doc_scores[:k])
        dense_best = rag.retrieve_dpr([DISAGREE])[0].docs[0]
    assert (full[-1].docs[0] == dense_best) == (agree > 0)      # the rule moved it first (and only with it on)
