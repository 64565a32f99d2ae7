"""The context of ``graphrag_local`` (nano-graphrag's local query), from one index's engine.

For a query: the ``graphrag_top_k`` entities nearest it by vector search; the communities of those
entities up to ``level``, by how many of the entities they hold, then report rating, then id (their
reports, one line each, under ``community_report_tokens``); the entities (name and degree) and their
relations to their neighbours, by (degree sum, weight), together under ``local_context_tokens``;
and the entities' text units, by entity rank then by how many of the entity's neighbours the
passage also mentions, under ``text_unit_tokens``. The passage ranking is the text units.
Budgets: QueryParam's, else the ``graphrag`` section's (4,000 / 4,800 / 3,200 tokens).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from hippo_engine.config import GraphRAGConfig, QueryParam
from hippo_engine.datatypes import HiContext
from hippo_engine.hirag.context import pack_by_tokens
from hippo_engine.qa.reader import DEFAULT_PASSAGE_PREFIX


def ranked_communities(eng, ents: Sequence[int], level: int) -> list[int]:
    """Communities (up to ``level``, with a report) holding any of ``ents``: by how many, then
    report rating, then id."""
    wanted = set(ents)
    cnt: Counter[int] = Counter()
    for ci, c in enumerate(eng.communities):
        if c.level <= level and c.id in eng.reports:
            n = len(eng.member_sets[ci] & wanted)
            if n:
                cnt[ci] = n
    return sorted(cnt, key=lambda ci: (-cnt[ci], -eng.reports[eng.communities[ci].id].rating,
                                       eng.communities[ci].id))


class LocalContextBuilder:
    """Builds ``graphrag_local`` contexts (``config``: the ``graphrag`` section)."""

    def __init__(self, config: GraphRAGConfig):
        self.config = config

    def budgets(self, param: QueryParam) -> tuple[int, int, int]:
        """(text units, local context, community reports) token budgets of a call."""
        c = self.config
        return (param.text_unit_tokens or c.graphrag_text_unit_tokens,
                param.local_context_tokens or c.graphrag_local_context_tokens,
                param.community_report_tokens or c.graphrag_report_tokens)

    def build(self, eng, query: str, q_ent: np.ndarray, param: QueryParam, limit: int) -> HiContext:
        """The context of one query (``q_ent``: its entity-matching vector); at most ``limit`` passages ranked."""
        units, local, report_budget = self.budgets(param)
        level = self.config.graphrag_level if param.level is None else param.level
        ctx = HiContext(query=query, mode="graphrag_local")
        found = eng.top_entities(q_ent, self.config.graphrag_top_k)
        top = [e for e, _ in found]
        ctx.entities = [(eng.name(e), round(s, 6)) for e, s in found]
        comms = ranked_communities(eng, top, level)
        texts = [eng.reports[eng.communities[ci].id].text().replace("\n", " ") for ci in comms]
        shown = section(eng, ctx, "reports", texts, report_budget)
        ctx.communities = [eng.communities[ci].id for ci in comms[:shown]]
        section(eng, ctx, "entities", [eng.entity_line(e) for e in top], local)
        section(eng, ctx, "relations", [eng.relation_text(p) for p in eng.relations(top)],
                max(local - ctx.tokens["entities"], 0))
        ranking = eng.text_units(top)[:limit]
        ctx.passages = [eng.passage_text(p) for p in ranking]
        passages_section(eng, ctx, units)
        return ctx


def section(eng, ctx: HiContext, name: str, lines: Sequence[str], budget: int) -> int:
    """Put the lines that fit ``budget`` into section ``name``; return how many fit."""
    kept = pack_by_tokens(lines, eng.count, budget)
    ctx.sections[name] = "\n".join(kept)
    ctx.tokens[name] = sum(eng.count(x) for x in kept)
    return len(kept)


def passages_section(eng, ctx: HiContext, budget: int) -> None:
    """The ``passages`` section: the ranked passages (with the reader's prefix) that fit ``budget``."""
    blocks = pack_by_tokens([f"{DEFAULT_PASSAGE_PREFIX}{p}" for p in ctx.passages], eng.count, budget)
    ctx.sections["passages"] = "\n\n".join(blocks)
    ctx.tokens["passages"] = sum(eng.count(b) for b in blocks)
    ctx.passage_context = len(blocks)
