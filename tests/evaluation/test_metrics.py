"""Hand-checked cases for the retrieval and QA metrics (expected values worked out by hand)."""
import pytest

from hippo_engine.evaluation.metrics import (
    DEFAULT_RECALL_KS,
    exact_match,
    f1,
    normalize_answer,
    qa_metrics,
    qa_metrics_per_query,
    recall_at_k,
    recall_at_k_per_query,
)

RETRIEVED = [["a", "b", "c", "d"], ["x", "y"], ["p"]]
GOLD = [["b", "d", "d"], ["z"], []]  # "d" twice counts once; the third query has no gold


def test_recall_per_query_by_hand():
    rows = recall_at_k_per_query(RETRIEVED, GOLD, ks=(1, 2, 4, 10))
    # query 1: gold {b, d}; top1 {a} -> 0, top2 {a, b} -> 1/2, top4 -> 2/2, top10 = all -> 1
    assert rows[0] == {"Recall@1": 0.0, "Recall@2": 0.5, "Recall@4": 1.0, "Recall@10": 1.0}
    # query 2: gold {z} never retrieved
    assert rows[1] == {"Recall@1": 0.0, "Recall@2": 0.0, "Recall@4": 0.0, "Recall@10": 0.0}
    # query 3: no gold -> 0
    assert rows[2] == {"Recall@1": 0.0, "Recall@2": 0.0, "Recall@4": 0.0, "Recall@10": 0.0}


def test_recall_mean_by_hand():
    r = recall_at_k(RETRIEVED, GOLD, ks=(1, 2, 4, 10))
    assert r["Recall@1"] == 0.0
    assert r["Recall@2"] == pytest.approx(1 / 6)
    assert r["Recall@4"] == pytest.approx(1 / 3)
    assert r["Recall@10"] == pytest.approx(1 / 3)


def test_recall_default_keys_and_exact_string_match():
    r = recall_at_k([["T\nx", "U\ny"]], [["U\ny", "t\nx"]])  # case differs: not the same passage
    assert list(r) == [f"Recall@{k}" for k in DEFAULT_RECALL_KS]
    assert r["Recall@1"] == 0.0
    assert r["Recall@2"] == 0.5
    assert r["Recall@200"] == 0.5


def test_recall_duplicates_in_ranking_count_once():
    assert recall_at_k([["a", "a", "b"]], [["a", "b"]], ks=(2, 3)) == {"Recall@2": 0.5, "Recall@3": 1.0}


def test_recall_errors_and_empty():
    with pytest.raises(ValueError):
        recall_at_k([["a"]], [], ks=(1,))
    with pytest.raises(ValueError):
        recall_at_k([["a"]], [["a"]], ks=(0,))
    assert recall_at_k([], [], ks=(1, 5)) == {"Recall@1": 0.0, "Recall@5": 0.0}


def test_normalize_answer():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("  Theatre  ") == "theatre"  # 'the' inside a word stays
    assert normalize_answer(None) == ""


def test_exact_match():
    assert exact_match("the Paris.", ["paris", "City of Light"]) == 1.0
    assert exact_match("Paris, France", ["paris"]) == 0.0
    assert exact_match("1975", "1975") == 1.0  # a single string is one alias
    assert exact_match("x", []) == 0.0


def test_f1_by_hand():
    # pred tokens [lukas, fenwright, composer]; gold [fenwright]: P=1/3, R=1 -> F1 = 0.5
    assert f1("Lukas Fenwright the composer", ["Fenwright"]) == pytest.approx(0.5)
    # against "Lukas Fenwright": P=2/3, R=1 -> F1 = 0.8; the max over aliases wins
    assert f1("Lukas Fenwright the composer", ["Fenwright", "Lukas Fenwright"]) == pytest.approx(0.8)
    # repeated tokens count with multiplicity: {new:2, york:1} vs {new:1, york:1}: 2 shared, P=2/3, R=1
    assert f1("new new york", "New York") == pytest.approx(0.8)
    assert f1("Marisport", ["Tessaly"]) == 0.0
    assert f1("anything", []) == 0.0
    assert f1("the", ["a"]) == 0.0  # both normalise to nothing


def test_qa_metrics_by_hand():
    preds = ["Paris", "1975 AD", "no idea"]
    golds = [["Paris"], "1975", ["Marisport"]]
    # EM: 1, 0, 0 -> 1/3. F1: 1, (P=1/2, R=1 -> 2/3), 0 -> (1 + 2/3) / 3 = 5/9
    m = qa_metrics(preds, golds)
    assert set(m) == {"ExactMatch", "F1"}
    assert m["ExactMatch"] == pytest.approx(1 / 3)
    assert m["F1"] == pytest.approx(5 / 9)
    rows = qa_metrics_per_query(preds, golds)
    assert rows[1] == {"ExactMatch": 0.0, "F1": pytest.approx(2 / 3)}


def test_qa_metrics_errors_and_empty():
    with pytest.raises(ValueError):
        qa_metrics(["a"], [])
    assert qa_metrics([], []) == {"ExactMatch": 0.0, "F1": 0.0}
