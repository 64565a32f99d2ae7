"""The context of ``graphrag_global``: the community reports a query's map-reduce reads.

Scoring: every community up to ``level`` with a report rated at least ``graphrag_global_min_rating``
is scored by the cosine of its report vector with the query's passage vector, and ranked by that
score, then rating, then id (nano-graphrag ranks by size and rating alone; the query-relevance score
lets a bounded number of map calls see the relevant reports first). Batching: the ranked reports,
one line each, are grouped greedily into batches of at most ``community_report_tokens`` (a report
longer than a batch is cut to it), at most ``graphrag_global_max_batches`` batches (one map call
each). The ``reports`` section holds the batched reports in order; :func:`batches` recovers the
same batches from it. The passage ranking is the ranked communities' representative passages.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.config import GraphRAGConfig, QueryParam
from hippo_engine.datatypes import HiContext
from hippo_engine.graphrag.engine_search import community_passages
from hippo_engine.hirag.context import dedupe
from hippo_engine.hirag.report_context import TokenCounter

#: the line between two map batches in the reports section
BATCH_BREAK = "-----"


def cut_to_tokens(text: str, count: TokenCounter, budget: int) -> str:
    """The longest prefix of ``text``'s words that counts at most ``budget`` tokens."""
    if count(text) <= budget:
        return text
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def group_batches(texts: Sequence[str], count: TokenCounter, budget: int, max_batches: int) -> list[list[str]]:
    """``texts`` in order, grouped greedily into at most ``max_batches`` batches of at most ``budget`` tokens."""
    out: list[list[str]] = []
    used = budget + 1
    for t in texts:
        t = cut_to_tokens(t, count, budget)
        n = count(t)
        if not t:
            continue
        if used + n > budget:
            if len(out) == max_batches:
                break
            out.append([])
            used = 0
        out[-1].append(t)
        used += n
    return out


def batches(ctx: HiContext) -> list[list[str]]:
    """The map batches of a ``graphrag_global`` context (its reports section, split at :data:`BATCH_BREAK`)."""
    text = ctx.sections.get("reports", "")
    groups = [g.strip() for g in text.split(f"\n{BATCH_BREAK}\n")]
    return [[line for line in g.split("\n") if line.strip()] for g in groups if g]


class GlobalContextBuilder:
    """Builds ``graphrag_global`` contexts (``config``: the ``graphrag`` section)."""

    def __init__(self, config: GraphRAGConfig):
        self.config = config

    def ranked(self, eng, q_pass: np.ndarray, level: int) -> list[tuple[int, float]]:
        """(community index, score) of the eligible communities, best first."""
        cfg = self.config
        cset = eng.cset
        if cset is None or not eng.communities:
            return []
        sims = cset.matrix() @ q_pass
        cands = []
        for ci, c in enumerate(eng.communities):
            rep = eng.reports.get(c.id)
            if c.level <= level and rep is not None and rep.rating >= cfg.graphrag_global_min_rating:
                cands.append((ci, float(sims[ci]), rep.rating))
        cands.sort(key=lambda t: (-t[1], -t[2], eng.communities[t[0]].id))
        return [(ci, s) for ci, s, _ in cands]

    def build(self, eng, query: str, q_pass: np.ndarray, param: QueryParam, limit: int) -> HiContext:
        """The context of one query (``q_pass``: its passage-matching vector)."""
        cfg = self.config
        level = cfg.graphrag_level if param.level is None else param.level
        budget = param.community_report_tokens or cfg.graphrag_report_tokens
        ctx = HiContext(query=query, mode="graphrag_global")
        ranked = self.ranked(eng, q_pass, level)
        texts = [eng.reports[eng.communities[ci].id].text().replace("\n", " ") for ci, _ in ranked]
        groups = group_batches(texts, eng.count, budget, cfg.graphrag_global_max_batches)
        shown = sum(len(g) for g in groups)
        ctx.sections["reports"] = f"\n{BATCH_BREAK}\n".join("\n".join(g) for g in groups)
        ctx.tokens["reports"] = sum(eng.count(t) for g in groups for t in g)
        ctx.communities = [eng.communities[ci].id for ci, _ in ranked[:shown]]
        ranking = dedupe(p for ci, _ in ranked[:shown] for p in community_passages(eng, ci))[:limit]
        ctx.passages = [eng.passage_text(p) for p in ranking]
        return ctx
