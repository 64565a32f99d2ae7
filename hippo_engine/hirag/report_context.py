"""What a community report prompt shows: entity names and degrees, relation lines, passage
excerpts (:class:`ReportInputs`), packed into a token budget per community
(:func:`community_context`), with the children's reports standing in for the raw members they
cover when the raw context does not fit.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from hippo_engine.hirag.clustering import Community, entity_edges
from hippo_engine.ids import entity_id
from hippo_engine.index.graph import KIND_SYNONYMY, GraphData

TokenCounter = Callable[[str], int]


class Reported(Protocol):
    """What a context needs of a sub-community's report (``reports.CommunityReport``)."""

    title: str
    summary: str
    findings: list[dict]


def whitespace_tokens(text: str) -> int:
    """Token count as whitespace-separated words (the fallback counter)."""
    return len(text.split())


# ============================================================================ report inputs
class ReportInputs:
    """What report prompts are built from: entity names and degrees, the relation triples of
    each entity pair, and passage texts. Built once from an index's content."""

    def __init__(self, graph: GraphData, entity_text: Callable[[str], str], passage_text: Callable[[str], str],
                 passage_triples: Mapping[str, Sequence[tuple[str, str, str]]]):
        self.graph = graph
        self.entity_text = entity_text
        self.passage_text = passage_text
        src, dst, w = entity_edges(graph)
        deg = np.bincount(np.concatenate([src, dst]), minlength=graph.num_entities) if len(src) else \
            np.zeros(graph.num_entities, dtype=np.int64)
        self.degree = {str(graph.node_ids[i]): int(deg[i]) for i in range(graph.num_entities)}
        ids = graph.node_ids
        self.edge_weight: dict[tuple[str, str], float] = {}
        self.edge_kinds: dict[tuple[str, str], int] = {}
        kinds = graph.kinds[(graph.src < graph.num_entities) & (graph.dst < graph.num_entities)]
        for s, d, ww, k in zip(src.tolist(), dst.tolist(), w.tolist(), kinds.tolist(), strict=False):
            x, y = str(ids[s]), str(ids[d])
            key = (x, y) if x < y else (y, x)
            self.edge_weight[key] = ww
            self.edge_kinds[key] = k
        self.pair_triples: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for pid in sorted(passage_triples):
            for t in passage_triples[pid]:
                x, y = entity_id(t[0]), entity_id(t[2])
                if x == y:
                    continue
                key = (x, y) if x < y else (y, x)
                lst = self.pair_triples.setdefault(key, [])
                if t not in lst:
                    lst.append(t)

    def name(self, eid: str) -> str:
        """The entity text of ``eid`` (the id itself when unknown)."""
        try:
            return self.entity_text(eid)
        except KeyError:
            return eid

    def relation_lines(self, pair: tuple[str, str]) -> list[str]:
        """``subject | predicate | object`` for each triple linking the pair; a synonymy-only
        pair reads ``a | similar to | b``, another pair without a stored triple
        ``a | related to | b``."""
        triples = self.pair_triples.get(pair)
        if triples:
            return [f"{s} | {p} | {o}" for s, p, o in triples]
        if self.edge_kinds.get(pair, 0) & KIND_SYNONYMY:
            return [f"{self.name(pair[0])} | similar to | {self.name(pair[1])}"]
        if pair in self.edge_kinds:
            return [f"{self.name(pair[0])} | related to | {self.name(pair[1])}"]
        return []


def _fit(lines: Sequence[str], count: TokenCounter, budget: int) -> list[str]:
    """The longest prefix of ``lines`` whose total token count is within ``budget``."""
    out, used = [], 0
    for ln in lines:
        n = count(ln) + 1
        if used + n > budget:
            break
        out.append(ln)
        used += n
    return out


def _excerpt(text: str, max_words: int) -> str:
    words = text.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


def community_context(c: Community, inputs: ReportInputs, child_reports: Mapping[str, Reported],
                      children: Mapping[str, Community], budget: int, count: TokenCounter = whitespace_tokens,
                      passage_words: int = 80) -> tuple[str, bool]:
    """The report prompt's context for ``c`` within ``budget`` tokens.

    Raw form: entities (by degree), relations (by edge weight), passage excerpts (most members
    first). When the raw entities and relations do not fit and children have reports, the
    children's reports come first (up to half the budget) and the raw part keeps only what they
    do not cover: entities outside any reported child and relations between children.
    Returns (context text, whether child reports were used).
    """
    ents = sorted(c.entities, key=lambda e: (-inputs.degree.get(e, 0), inputs.name(e)))
    pairs = sorted(c.edges, key=lambda p: (-inputs.edge_weight.get(p, 0.0), p))
    ent_lines = [f"- {inputs.name(e)}" for e in ents]
    rel_lines = [ln for p in pairs for ln in inputs.relation_lines(p)]
    raw_tokens = sum(count(x) + 1 for x in ent_lines + rel_lines)
    reported = [children[k] for k in c.children if k in child_reports and k in children]
    used_children = raw_tokens > budget * 0.6 and bool(reported)
    sections: list[str] = []
    remaining = budget
    if used_children:
        blocks = []
        for ch in sorted(reported, key=lambda x: (-x.size, x.id)):
            r = child_reports[ch.id]
            finds = "; ".join(f.get("summary", "") for f in r.findings if f.get("summary"))
            blocks.append(f"- {r.title}: {r.summary}" + (f" Findings: {finds}" if finds else ""))
        blocks = _fit(blocks, count, budget // 2)
        if blocks:
            sections.append("Sub-community reports:\n" + "\n".join(blocks))
            remaining -= sum(count(b) + 1 for b in blocks)
        covered: dict[str, str] = {}
        for ch in reported[: len(blocks)]:
            for e in ch.entities:
                covered[e] = ch.id
        ent_lines = [f"- {inputs.name(e)}" for e in ents if e not in covered]
        rel_lines = [ln for p in pairs if covered.get(p[0]) is None or covered.get(p[0]) != covered.get(p[1])
                     for ln in inputs.relation_lines(p)]
    ent_fit = _fit(ent_lines, count, max(remaining // 4, 1))
    rel_fit = _fit(rel_lines, count, max((remaining - sum(count(x) + 1 for x in ent_fit)) * 2 // 3, 1))
    left = remaining - sum(count(x) + 1 for x in ent_fit + rel_fit)
    psg_lines = []
    for pid in c.passages:
        try:
            psg_lines.append(f"- {_excerpt(inputs.passage_text(pid), passage_words)}")
        except KeyError:
            continue
        if len(psg_lines) >= 50:
            break
    psg_fit = _fit(psg_lines, count, max(left, 0))
    if ent_fit:
        sections.append("Entities:\n" + "\n".join(ent_fit))
    if rel_fit:
        sections.append("Relations (subject | predicate | object):\n" + "\n".join(rel_fit))
    if psg_fit:
        sections.append("Passages:\n" + "\n".join(psg_fit))
    return "\n\n".join(sections), used_children
