"""The checks of ``python -m reproduce ranking-prefix`` (issue 38) on rankings made up to break each rule once;
the real doors: tests/retrieve/integration/test_ranking_prefix_doors.py."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from reproduce.ranking_prefix import explanation_violations, http_rankings, prefix_violations, same_rankings

FULL = [("a", 0.5), ("b", 0.25), ("c", 0.25), ("d", 0.125)]


def by_k(**changed):
    """Two queries ranked at k = 1..3 and 20 (the reference), each the prefix of FULL, with ``changed`` (k -> the
    first query's ranking) put in."""
    out = {k: [FULL[:k], FULL[:k]] for k in (1, 2, 3)} | {20: [FULL, FULL]}
    for k, r in changed.items():
        out[int(k[1:])][0] = r
    return out


def test_the_prefix_with_its_scores_passes():
    assert prefix_violations("door", by_k()) == []
    assert same_rankings("door", by_k(), by_k(), "python") == []


def test_each_rule_is_caught_where_it_breaks():
    assert prefix_violations("d", by_k(k2=[("b", 0.25), ("a", 0.5)])) == [
        "d k=2 q0: the score rises at ranks [2] ([0.5])",
        "d k=2 q0: ids [b, a] are not the first 2 of the top 4 [a, b, c, d]"]
    [v] = prefix_violations("d", by_k(k3=[("a", 0.5), ("b", 0.25), ("c", 0.2499999)]))
    assert v.startswith("d k=3 q0: scores differ from the deepest call's at ranks [3]")
    assert "d k=1 q0: scores shown that are not finite numbers at ranks [1]" in prefix_violations(
        "d", by_k(k1=[("a", None)]))
    [v] = prefix_violations("d", by_k(k3=FULL[:2]))
    assert "are not the first 3" in v
    [v] = same_rankings("http", by_k(k1=[("a", 0.6)]), by_k(), "python")
    assert v.startswith("http k=1 q0:") and "differs from python's" in v


def _solution(*rows):
    """A solution whose passages have ``(score shown, ranked_score, seed contributions, dense_prior, check)``."""
    exps = [SimpleNamespace(passage_id=f"p{i}", ranked_score=ranked, check=check, placed_by="ppr", dense_prior=prior,
                            seeds=[SimpleNamespace(contribution=c) for c in seeds])
            for i, (_, ranked, seeds, prior, check) in enumerate(rows)]
    return SimpleNamespace(passage_ids=[e.passage_id for e in exps], doc_scores=[r[0] for r in rows], explanations=exps)


def test_explanations_must_add_up_to_the_score_shown():
    good = _solution((0.5, 0.5, [0.3, 0.1], 0.1, 0.0), (0.2, 0.2, [0.1], 0.1 + 3e-8, 3e-8),  # within check
                     (0.2, 0.2, [0.1], 0.1 + 3e-8, 3e-8 - 1e-17))     # the check summed in another order
    assert explanation_violations("x", 2, [good]) == []
    placeholder = _solution((3.0, 3.0, [0.1], 0.04, 1e-9))          # a rule's score the terms do not make
    [v] = explanation_violations("x", 1, [placeholder])
    assert v == "x k=1 q0 rank 1 (ppr): the terms add up to 0.14, not the ranked score 3.0"
    not_shown = _solution((0.14, 0.15, [0.1], 0.05, 0.0))
    [v] = explanation_violations("x", 1, [not_shown])
    assert "ranked_score 0.15 is not the score shown 0.14" in v
    with_term = _solution((0.2, 0.2, [0.1], 0.05, 0.0))
    with_term.explanations[0].dense_term = 0.05                      # a term the engine may add (issue 38)
    assert explanation_violations("x", 1, [with_term]) == []


def test_the_http_door_posts_batches_and_reads_each_passage_id_and_score():
    httpx = pytest.importorskip("httpx")
    sent = []

    def handler(request):
        body = json.loads(request.content)
        sent.append(body)
        if body["top_k"] == 9:
            return httpx.Response(422, json={"detail": "top_k"})
        return httpx.Response(200, json={"results": [
            {"query": q, "passages": [{"id": f"{q}-{r}", "score": 1.0 / (r + 1), "text": "", "doc_ids": []}
                                      for r in range(body["top_k"])]} for q in body["queries"]]})

    with httpx.Client(base_url="http://door", transport=httpx.MockTransport(handler)) as client:
        got = http_rankings(client, ["a", "b", "c"], 2, batch=2)
        assert got == [[("a-0", 1.0), ("a-1", 0.5)], [("b-0", 1.0), ("b-1", 0.5)], [("c-0", 1.0), ("c-1", 0.5)]]
        assert sent == [{"queries": ["a", "b"], "top_k": 2}, {"queries": ["c"], "top_k": 2}]
        with pytest.raises(RuntimeError, match="POST /retrieve top_k=9: 422"):
            http_rankings(client, ["a"], 9)
