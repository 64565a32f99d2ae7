"""Query results as plain JSON-ready dicts (what :class:`~hippo_engine.service.memory.Memory` returns and the
HTTP, MCP and web layers send): ranked passages, answers with their citations, and the subgraph of a query
drawn from its explanations."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hippo_engine.datatypes import Explanation, QuerySolution
from hippo_engine.ids import CHUNK_PREFIX
from hippo_engine.results import finite, ranked_passages

PASSAGE_PREFIX = "passage: "    # how explain names a passage node (retrieve/explain/core.py)


def passages(sol: QuerySolution) -> list[dict]:
    """The ranked passages of a solution: ``{"id", "text", "score", "doc_ids", "rank"}`` (rank from 1;
    :func:`hippo_engine.results.ranked_passages`)."""
    return [p.to_dict() for p in ranked_passages(sol)]


def retrieval(sol: QuerySolution, mode: str, explain: bool) -> dict:
    """One query's result: ``{"query", "mode", "passages", "explanations"?}``."""
    out: dict[str, Any] = {"query": sol.question, "mode": mode, "passages": passages(sol)}
    if explain:
        out["explanations"] = [e.to_dict() for e in sol.explanations]
    return out


def empty_retrieval(query: str, mode: str, explain: bool) -> dict:
    """The result of a query on a memory that holds no documents yet."""
    out: dict[str, Any] = {"query": query, "mode": mode, "passages": []}
    if explain:
        out["explanations"] = []
    return out


def answer(question: str, sol: QuerySolution) -> dict:
    """An answer: ``{"question", "answer", "citations": [{"id", "text", "doc_ids"}], "passages", "notes"}``;
    citations are the passages the answer cites, in the order cited."""
    shown = passages(sol)
    by_id = {p["id"]: p for p in shown}
    cites = [{"id": c, "text": by_id[c]["text"], "doc_ids": by_id[c]["doc_ids"]} for c in sol.citations if c in by_id]
    return {"question": question, "answer": sol.answer, "citations": cites, "passages": shown,
            "notes": list(sol.answer_notes)}


class _Graph:
    """Nodes and edges gathered in insertion order, nodes capped at ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.nodes: dict[str, dict] = {}
        self.edges: dict[tuple[str, str, str], dict] = {}

    def node(self, node_id: str, label: str, kind: str, score: float | None = None) -> bool:
        have = self.nodes.get(node_id)
        if have is None:
            if len(self.nodes) >= self.limit:
                return False
            self.nodes[node_id] = {"id": node_id, "label": label, "kind": kind, "score": score}
        elif score is not None and (have["score"] is None or score > have["score"]):
            have["score"] = score
        return True

    def edge(self, a: str, b: str, kind: str) -> None:
        if a in self.nodes and b in self.nodes and a != b:
            key = (a, b, kind) if a < b else (b, a, kind)
            self.edges.setdefault(key, {"source": a, "target": b, "kind": kind})


def subgraph(query: str, explanations: Sequence[Explanation], texts: dict[str, str], limit: int) -> dict:
    """The part of the graph that explains a query's top passages: the query, its seed entities (scored by
    their share of the passages' scores), each passage (scored by its score) and the nodes and edges of the
    most probable walks from the seeds to the passages. ``texts``: passage id -> text (for labels)."""
    g = _Graph(max(int(limit), 2))
    g.node("query", query, "query", None)
    for ex in explanations:
        pid = f"passage:{ex.passage_id}"
        label = texts.get(ex.passage_id, ex.passage_id).split("\n", 1)[0][:80]
        if not g.node(pid, label, "passage", finite(ex.score)):
            break
        for s in ex.seeds:
            sid = f"{s.kind}:{s.entity}"
            if g.node(sid, s.entity, "seed", finite(s.share)):
                g.edge("query", sid, "seed")
        for path in ex.paths:
            names = [pid if i == len(path.nodes) - 1 else _node_id(n) for i, n in enumerate(path.nodes)]
            for n, name in zip(names, path.nodes, strict=True):
                if n not in g.nodes:
                    g.node(n, name.removeprefix(PASSAGE_PREFIX), _kind(name), None)
            for a, b, e in zip(names, names[1:], path.edges, strict=False):
                g.edge(a, b, e.kind)
        if not ex.paths:    # a passage ranked without walks (dense): tie it to the query
            g.edge("query", pid, "dense")
    return {"nodes": list(g.nodes.values()), "edges": list(g.edges.values())}


def _node_id(name: str) -> str:
    if name.startswith(PASSAGE_PREFIX):
        return f"passage-title:{name.removeprefix(PASSAGE_PREFIX)}"
    if name.startswith(CHUNK_PREFIX):
        return f"passage:{name}"
    return f"entity:{name}"


def _kind(name: str) -> str:
    return "passage" if name.startswith((PASSAGE_PREFIX, CHUNK_PREFIX)) else "entity"


__all__ = ["answer", "empty_retrieval", "passages", "retrieval", "subgraph"]
