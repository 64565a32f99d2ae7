"""reproduce/recall_explain.py's check on the toy ner index (fake encoder, real spaCy): the default's
explanations match the walks that placed each passage; a wrong score is counted."""
import dataclasses

from helpers import CORPUS, make_rag

from hippo_engine.config import QueryParam
from reproduce.recall_explain import check

QUERIES = ["Where was the geologist who founded Tamsin College from?", "Who mapped Lake Veloria?",
           "Which fair is held in Velor?"]


def test_the_check_passes_on_the_default_and_counts_a_wrong_score(tmp_path):
    nofilter = QueryParam(use_filter=False)
    with make_rag(tmp_path, extractor="ner") as rag:
        rag.index(CORPUS)
        explained = rag.retrieve(QUERIES, 5, param=nofilter, explain=True)
    with make_rag(tmp_path, extractor="ner", second_hop="none", dense_agree=0) as rag:
        one = rag.retrieve(QUERIES, 200, param=nofilter)
    placed, worst, bad = check(explained, one)
    assert bad == 0 and worst < 1e-6 and placed.get("second_hop_head") and placed.get("ppr")
    sol = explained[0]
    wrong = [dataclasses.replace(e, score=e.score * 2) for e in sol.explanations]
    assert check([dataclasses.replace(sol, explanations=wrong)], one[:1])[2] > 0
