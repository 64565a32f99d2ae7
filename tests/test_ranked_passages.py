"""Issue 40: a query's ranked passages are shaped once (hippo_engine.results), for HTTP, MCP and the adapters."""
from __future__ import annotations

import math

from hippo_engine.datatypes import QuerySolution
from hippo_engine.results import first_document_id, ranked_passages


def _solution() -> QuerySolution:
    sol = QuerySolution.from_ranking("q", ["Alpha\nfirst text", "second"], [0.5, math.nan])
    sol.passage_ids, sol.doc_ids = ["chunk-a", "chunk-b"], [["d1", "d2"], []]
    return sol


def test_ranked_passages_carry_rank_ids_score_text_title_and_metadata():
    seen = []

    def lookup(ids):
        seen.append(list(ids))
        return {"d1": {"user": "ann"}}

    first, second = ranked_passages(_solution(), lookup)
    assert seen == [["d1", "d2"]]                    # one lookup for every document shown
    assert (first.rank, first.id, first.doc_ids, first.score, first.title) == (1, "chunk-a", ["d1", "d2"], 0.5, "Alpha")
    assert first.documents == {"d1": {"user": "ann"}, "d2": {}} and first.doc_id == "d1"
    assert (second.rank, second.doc_id, second.documents) == (2, "chunk-b", {})
    assert math.isnan(second.score)
    # the JSON shape the HTTP API and the MCP server send: a score that is not finite is null
    assert [p.to_dict() for p in (first, second)] == [
        {"id": "chunk-a", "text": "Alpha\nfirst text", "score": 0.5, "doc_ids": ["d1", "d2"], "rank": 1},
        {"id": "chunk-b", "text": "second", "score": None, "doc_ids": [], "rank": 2}]


def test_a_solution_without_ids_or_scores_still_ranks_its_passages():
    sol = QuerySolution(question="q", docs=["one", "two"], doc_scores=[1.0])
    assert [(p.rank, p.id, p.doc_ids, p.score, p.documents) for p in ranked_passages(sol)] == [
        (1, "", [], 1.0, {}), (2, "", [], None, {})]
    assert first_document_id([], "chunk-x") == "chunk-x"
