"""reproduce/recall_explain.py's check on the toy ner index (fake encoder, real spaCy): the default's
explanations add up to the scores returned; a wrong score is counted."""
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
    placed, worst, bad = check(explained)
    assert bad == 0 and worst < 1e-4 and placed.get("score")
    sol = explained[0]
    wrong = [dataclasses.replace(e, score=e.score * 2) for e in sol.explanations]
    assert check([dataclasses.replace(sol, explanations=wrong)])[2] > 0
