"""Per-question results and their statistics (reproduce/tables/results.py)."""
import pytest
from fakes import NgramEncoder, NoCallLLM
from helpers import CORPUS
from toy_tables import QUESTIONS, CountingLLM, run

from hippo_engine import HippoRAG
from hippo_engine.evaluation.metrics import recall_at_k
from reproduce.tables.results import ResultCache, paired_difference, recall_curve


def test_recall_curve_matches_engine_metrics(env):
    run(env, "table-recall", "--no-filter", llm=CountingLLM())
    (f,) = [p for p in (env["save"] / "reproduce_runs").glob("retrieval-use_filter=False-*.jsonl")]
    entries = list(ResultCache(f, {}).load().values())
    rag = HippoRAG(env["save"], llm=NoCallLLM(), encoder=NgramEncoder(), use_filter=False, show_progress=False)
    qs = [q for q, _, _ in QUESTIONS]
    gold = [[CORPUS[j] for j in g] for _, g, _ in QUESTIONS]
    _, metrics = rag.retrieve(qs, gold_docs=gold)
    ks = [1, 2, 5, 10]
    ours = recall_curve(entries, ks)
    assert {f"Recall@{k}": ours[k] for k in ks} == pytest.approx({f"Recall@{k}": metrics[f"Recall@{k}"] for k in ks})
    assert recall_at_k([[]], [[]], ks=[1]) == {"Recall@1": 0.0}
    assert recall_curve([{"gold_ranks": [], "n_gold": 0}], [1]) == {1: 0.0}


def test_paired_difference():
    a = [{"gold_ranks": [1], "n_gold": 1}, {"gold_ranks": [None], "n_gold": 1}, {"gold_ranks": [3, 9], "n_gold": 2}]
    b = [{"gold_ranks": [7], "n_gold": 1}, {"gold_ranks": [2], "n_gold": 1}, {"gold_ranks": [3, 4], "n_gold": 2}]
    p = paired_difference(a, b, k=5)
    assert p["better"] == 1 and p["worse"] == 2
    assert p["mean"] == pytest.approx((1 - 1 - 0.5) / 3)
    assert p["low"] <= p["mean"] <= p["high"]
    assert paired_difference(a, b, k=5) == p  # deterministic
