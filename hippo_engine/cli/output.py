"""What the command line prints for query results: a solution (question, answer, the sources it
cites, its passages with a one-line snippet each), metrics, and the JSON form of a run."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hippo_engine.datatypes import QuerySolution
from hippo_engine.ids import chunk_id
from hippo_engine.qa.evaluate import gold_matches

#: characters of a cited passage's first line that are printed
SOURCE_WIDTH = 100


def _clip(text: str, width: int = SOURCE_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def cited_sources(sol: QuerySolution) -> list[tuple[int, str, str]]:
    """Per cited passage ``(rank, title, first line of its text)``, in the order cited."""
    ids = list(sol.passage_ids) if len(sol.passage_ids) == len(sol.docs) else [chunk_id(d) for d in sol.docs]
    rank = {pid: i for i, pid in reversed(list(enumerate(ids)))}
    out = []
    for pid in sol.citations:
        if pid in rank:
            title, _, body = sol.docs[rank[pid]].partition("\n")
            first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
            out.append((rank[pid] + 1, title, _clip(first)))
    return out


def print_answer(sol: QuerySolution) -> None:
    """The answer (with the gold answers when known), what was done to it, and its cited sources."""
    gold = f"   (gold: {' | '.join(sol.gold_answers)})" if sol.gold_answers else ""
    print(f"A: {sol.answer}{gold}")
    for note in sol.answer_notes:
        print(f"   [answer {note}]")
    for rank, title, first in cited_sources(sol):
        print(f"   source [{rank}] {title}: {first}")
    if sol.invalid_citations:
        print(f"   ({sol.invalid_citations} citation(s) to no shown passage dropped)")


def print_solution(sol: QuerySolution, k: int, with_answer: bool = False) -> None:
    """A solution: question, answer (``with_answer``), LLM errors, facts or fallback, top ``k`` passages."""
    print(f"\nQ: {sol.question}")
    if with_answer:
        print_answer(sol)
    for err in sol.errors:
        print(f"   [LLM error: {err}]")
    if sol.used_fallback:
        why = "an LLM call failed" if sol.errors else "no fact kept, no query entity"
        print(f"   [no entity reached the graph ({why}): dense retrieval fallback]")
    elif sol.kept_facts:
        print("   facts: " + "; ".join(" | ".join(f) for f in sol.kept_facts))
    for rank, (doc, score) in enumerate(zip(sol.docs[:k], sol.doc_scores[:k], strict=False), 1):
        title, _, body = doc.partition("\n")
        mark = " *" if gold_matches(sol, rank - 1) else ""
        ids = f"  ({', '.join(sol.doc_ids[rank - 1])})" if len(sol.doc_ids) >= rank else ""
        print(f"  {rank:>2}. [{score:.4f}] {_clip(title, SOURCE_WIDTH)}{mark}{ids}")
        if body.strip():
            print(f"      {snippet(doc)}")


def print_metrics(name: str, metrics: dict) -> None:
    """One line of scores, ``name: Recall@1 0.500  Recall@2 0.750``; nothing when there are none."""
    if metrics:
        print(f"{name}: " + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))


def snippet(doc: str, width: int = SOURCE_WIDTH) -> str:
    """A passage's text after its title line, on one line (whitespace collapsed), clipped to ``width``."""
    title, _, body = doc.partition("\n")
    return _clip(" ".join((body or title).split()), width)


def retrieve_json(solutions: Sequence[QuerySolution], metrics: dict) -> str:
    """A ``retrieve`` run as JSON: the metrics (Recall@k when scored, else empty) and every solution's ``to_dict()``."""
    return json.dumps({"metrics": metrics, "solutions": [s.to_dict() for s in solutions]}, ensure_ascii=False,
                      indent=1)


def qa_json(solutions: Sequence[QuerySolution], metrics: Sequence[Any] = ()) -> str:
    """A ``qa`` run as JSON: every solution's ``to_dict()`` and the metrics (retrieval, qa) when scored."""
    return json.dumps({"solutions": [s.to_dict() for s in solutions], "metrics": list(metrics)},
                      ensure_ascii=False, indent=1)
