"""HiRAG context assembly: what the reader sees in the hi_* modes (and ``naive``).

As in HiRAG: the ``hi_top_k`` entities nearest the query (and ``10 x hi_top_k`` for key
entities); text units are the passages of those entities, ordered by entity rank then by how
many of the entity's graph neighbours share the passage; relations are the edges at those
entities sorted by (degree sum, weight); communities are those of the top entities up to
level ``hi_level``, by how many top entities they hold, then by report rating. The bridge takes,
for each selected community in order, up to ``hi_top_m`` of its members among the key-entity
candidates (in rank order, de-duplicated keeping the first occurrence: deterministic, unlike
HiRAG's set), and chains unweighted shortest paths through them in that order on the entity
graph built from the stored ``GraphData`` arrays; unreachable key entities are jumped to. The
path's context is the edges along it (in path order) and then the other edges among its nodes.
Differences from HiRAG: after the text units, hi_bridge and hi rank the passages that state the
path's relations (HiRAG shows only the text units).

Every section is cut to its token budget (``hi_text_unit_tokens``, ``hi_local_context_tokens``,
``hi_bridge_tokens``, ``hi_report_tokens``), counted with the encoder's tokenizer when it has
one, else as whitespace-separated words. Which sections a mode shows: its spec's ``sections``
(:mod:`hippo_engine.modes`).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from hippo_engine.config import HiRAGConfig
from hippo_engine.datatypes import SECTION_TITLES, HiContext  # noqa: F401 (re-exported)
from hippo_engine.hirag.clustering import Community, entity_edges, entity_igraph
from hippo_engine.hirag.provenance import ContextTrace, Segment, context_items
from hippo_engine.hirag.report_context import ReportInputs, TokenCounter, whitespace_tokens
from hippo_engine.hirag.report_store import CommunitySet
from hippo_engine.index.graph import KIND_CONTEXT
from hippo_engine.modes import mode_spec
from hippo_engine.qa.reader import DEFAULT_PASSAGE_PREFIX
from hippo_engine.retrieve.scoring import top_k


def dedupe(items) -> list:
    """Items in first-occurrence order without repeats."""
    seen, out = set(), []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def pack_by_tokens(texts: Sequence[str], count: TokenCounter, budget: int) -> list[str]:
    """The longest prefix of ``texts`` whose token counts sum to at most ``budget``."""
    out, used = [], 0
    for t in texts:
        n = count(t)
        if used + n > budget:
            break
        out.append(t)
        used += n
    return out


def token_counter(encoder) -> TokenCounter:
    """Count tokens with ``encoder.tokenizer`` (no special tokens) if it has one, else words.
    Counts are memoised per text."""
    tok = getattr(encoder, "tokenizer", None)
    if tok is None:
        return whitespace_tokens
    cache: dict[str, int] = {}

    def count(text: str) -> int:
        n = cache.get(text)
        if n is None:
            try:
                n = len(tok.encode(text, add_special_tokens=False, verbose=False))
            except TypeError:  # a tokenizer without these keywords
                n = len(tok.encode(text))
            if len(cache) < 200_000:
                cache[text] = n
        return n

    return count


def path_segments(g, required: Sequence[int], components: Sequence[int] | None = None) -> list[Segment]:
    """The legs of :func:`find_path_with_required_nodes`: one per consecutive pair of distinct
    required vertices, joined by an unweighted shortest path of ``g`` or by a jump."""
    required = [int(v) for v in required]
    if not required:
        return []
    if components is None:
        components = g.connected_components().membership
    out = []
    cur = required[0]
    for nxt in required[1:]:
        if nxt == cur:
            continue
        sp = [] if components[cur] != components[nxt] else \
            g.get_shortest_paths(cur, to=nxt, weights=None, output="vpath")[0]
        out.append(Segment(cur, nxt, [int(v) for v in sp[1:]] if sp else [nxt], not sp))
        cur = nxt
    return out


def find_path_with_required_nodes(g, required: Sequence[int], components: Sequence[int] | None = None) -> list[int]:
    """Vertices of a walk that visits ``required`` in the given order, joining consecutive
    required vertices by an unweighted shortest path of ``g`` (an ``igraph.Graph``). A required
    vertex that cannot be reached from the previous one is appended directly (a jump). An empty
    ``required`` gives ``[]``. ``components``: vertex -> connected component id (computed if
    not given)."""
    if not len(required):
        return []
    path = [int(required[0])]
    for seg in path_segments(g, required, components):
        path.extend(seg.nodes)
    return path


class HiRAGEngine:
    """Query-time view of one index version (and its communities) for the HiRAG modes.

    ``index``: the ``Index`` (graph, stores, passage triples); ``config``: the HiRAG section;
    ``cset``: its communities (None:
    modes that need them are unavailable); ``count``: the token counter of section budgets."""

    def __init__(self, index, config: HiRAGConfig, cset: CommunitySet | None, count: TokenCounter = whitespace_tokens):
        self.config = config
        self.graph = graph = index.graph
        st = index.mirrored_stores
        self.passage_store = st["passage"]
        self.entity_text = st["entity"].text
        idx = graph.index_of
        ent_ids = st["entity"].ids
        self.entity_mat = st["entity"].matrix
        self.entity_nodes = np.fromiter((idx.get(e, -1) for e in ent_ids), np.int64, len(ent_ids))
        self.passage_mat = st["passage"].matrix
        self.passage_nodes = np.fromiter((idx[p] for p in st["passage"].ids), np.int64, len(st["passage"].ids))
        self.node_ids = graph.node_ids
        n_ent = graph.num_entities
        src, dst, w = entity_edges(graph)
        self.degree = np.bincount(np.concatenate([src, dst]), minlength=n_ent) if len(src) else np.zeros(n_ent, int)
        self.neighbors: list[list[int]] = [[] for _ in range(n_ent)]
        self.pair_weight: dict[tuple[int, int], float] = {}
        for s, d, ww in zip(src.tolist(), dst.tolist(), w.tolist(), strict=False):
            self.neighbors[s].append(d)
            self.neighbors[d].append(s)
            self.pair_weight[(s, d) if s < d else (d, s)] = ww
        ctx = (graph.kinds & KIND_CONTEXT) > 0
        a, b = graph.src[ctx], graph.dst[ctx]
        self.ent_passages: list[list[int]] = [[] for _ in range(n_ent)]
        for x, y in zip(a.tolist(), b.tolist(), strict=False):
            e, p = (x, y) if x < n_ent else (y, x)
            self.ent_passages[e].append(p)
        for lst in self.ent_passages:
            lst.sort()
        self.ent_passage_sets = [set(x) for x in self.ent_passages]
        self.inputs = ReportInputs(graph, self.entity_text, self.passage_store.text, index.passage_triples)
        self._g = None
        self._components = None
        self.cset = cset
        self.communities: list[Community] = cset.communities if cset else []
        self.reports = cset.reports if cset else {}
        self.ent_communities: dict[int, list[int]] = {}
        for ci, c in enumerate(self.communities):
            if c.level > self.config.hi_level:
                continue
            for e in c.entities:
                j = idx.get(e)
                if j is not None and j < n_ent:
                    self.ent_communities.setdefault(j, []).append(ci)
        self.member_sets = [set(idx[e] for e in c.entities if e in idx) for c in self.communities]
        self.count = count

    # --- graph pieces -------------------------------------------------------------------------
    @property
    def entity_graph(self):
        """The entity graph as igraph (built lazily from the GraphData arrays)."""
        if self._g is None:
            self._g = entity_igraph(self.graph)
            self._components = self._g.connected_components().membership
        return self._g

    def name(self, node: int) -> str:
        """The entity text of graph node ``node``."""
        return self.inputs.name(str(self.node_ids[node]))

    def passage_text(self, node: int) -> str:
        """The passage text of graph node ``node``."""
        return self.passage_store.text(str(self.node_ids[node]))

    def pair_lines(self, a: int, b: int) -> list[str]:
        """Relation lines of the entity pair (a, b) (see ``ReportInputs.relation_lines``)."""
        x, y = str(self.node_ids[a]), str(self.node_ids[b])
        return self.inputs.relation_lines((x, y) if x < y else (y, x))

    # --- HiRAG building blocks ------------------------------------------------------------------
    def top_entities(self, q: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(graph node, cosine) of the ``k`` entities nearest ``q``."""
        if len(self.entity_mat) == 0:
            return []
        sims = self.entity_mat @ q
        return [(int(self.entity_nodes[r]), float(sims[r])) for r in top_k(sims, k) if self.entity_nodes[r] >= 0]

    def text_units(self, ents: Sequence[int]) -> list[int]:
        """Passages of the entities, by entity order then by how many of the entity's
        neighbours also appear in the passage (more first), then passage id."""
        seen, out = set(), []
        for e in ents:
            cands = []
            for p in self.ent_passages[e]:
                if p in seen:
                    continue
                rel = sum(1 for n in self.neighbors[e] if p in self.ent_passage_sets[n])
                cands.append((-rel, str(self.node_ids[p]), p))
            for _, _, p in sorted(cands):
                seen.add(p)
                out.append(p)
        return out

    def relations(self, ents: Sequence[int]) -> list[tuple[int, int]]:
        """Entity pairs incident to ``ents``, by (degree sum, weight) descending, then ids."""
        pairs = {(e, n) if e < n else (n, e) for e in ents for n in self.neighbors[e]}
        return sorted(pairs, key=lambda p: (-(self.degree[p[0]] + self.degree[p[1]]), -self.pair_weight.get(p, 0.0),
                                            str(self.node_ids[p[0]]), str(self.node_ids[p[1]])))

    def relation_text(self, p: tuple[int, int]) -> str:
        """One line for an entity pair: its relations, or ``a | related to | b``."""
        lines = self.pair_lines(*p)
        return "; ".join(lines) if lines else f"{self.name(p[0])} | related to | {self.name(p[1])}"

    def top_communities(self, ents: Sequence[int]) -> list[int]:
        """Communities (up to ``hi_level``) of the entities, by how many of them they contain,
        then report rating, then id."""
        cnt = Counter(ci for e in ents for ci in self.ent_communities.get(e, ()))
        rating = {ci: self.reports[self.communities[ci].id].rating if self.communities[ci].id in self.reports else -1.0
                  for ci in cnt}
        return sorted(cnt, key=lambda ci: (-cnt[ci], -rating[ci], self.communities[ci].id))

    def key_entities(self, comms: Sequence[int], overall: Sequence[int], top_m: int) -> list[int]:
        """For each community in order, its first ``top_m`` members among ``overall`` (rank
        order); concatenated without repeats. No communities: ``overall[:top_m]``."""
        if not comms:
            return list(overall[:top_m])
        keys = []
        for ci in comms:
            members = self.member_sets[ci]
            keys.extend([e for e in overall if e in members][:top_m])
        return dedupe(keys)

    def bridge(self, keys: Sequence[int]) -> tuple[list[int], list[tuple[int, int]]]:
        """(path through ``keys``, edges among the path's nodes: along the path first, then the
        others by (degree sum, weight))."""
        _, path, pairs = self.bridge_legs(keys)
        return path, pairs

    def bridge_legs(self, keys: Sequence[int]) -> tuple[list[Segment], list[int], list[tuple[int, int]]]:
        """:meth:`bridge` with the path's legs (:class:`Segment`) first."""
        if not keys:
            return [], [], []
        g = self.entity_graph
        legs = path_segments(g, keys, self._components)
        path = [int(keys[0])] + [v for seg in legs for v in seg.nodes]
        along = []
        for a, b in zip(path, path[1:], strict=False):
            p = (a, b) if a < b else (b, a)
            if p in self.pair_weight:
                along.append(p)
        along = dedupe(along)
        nodes = set(path)
        among = {(a, n) if a < n else (n, a) for a in nodes for n in self.neighbors[a] if n in nodes}
        others = sorted(among - set(along), key=lambda p: (-(self.degree[p[0]] + self.degree[p[1]]),
                                                              -self.pair_weight.get(p, 0.0), p))
        return legs, path, along + others

    def pair_passages(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """Passages that state a relation of the pairs (both entities appear), in pair order."""
        out = []
        for a, b in pairs:
            out.extend(sorted(self.ent_passage_sets[a] & self.ent_passage_sets[b],
                              key=lambda p: str(self.node_ids[p])))
        return dedupe(out)

    # --- assembling a context ---------------------------------------------------------------
    def context(self, query: str, mode: str, q_ent: np.ndarray, q_pass: np.ndarray, limit: int,
                explain: bool = False) -> HiContext:
        """Build the context of ``mode`` (one of the hi_* modes) for one query (``q_pass`` unused).
        ``explain``: also fill ``ctx.provenance`` (every item's section and why it was chosen,
        :func:`~.provenance.context_items`); the context and ranking are the same either way."""
        cfg = self.config
        ctx = HiContext(query=query, mode=mode)
        wanted = mode_spec(mode).sections
        overall = self.top_entities(q_ent, cfg.hi_top_k * 10)
        top = [e for e, _ in overall[: cfg.hi_top_k]]
        ctx.entities = [(self.name(e), round(s, 6)) for e, s in overall[: cfg.hi_top_k]]
        tr = ContextTrace(overall=overall, top=top, text_units=self.text_units(top))
        ranking = tr.text_units
        comms: list[int] = []
        if "reports" in wanted or "bridge" in wanted:
            ranked = [ci for ci in self.top_communities(top) if self.communities[ci].id in self.reports]
            texts = [self.reports[self.communities[ci].id].text() for ci in ranked]
            packed = pack_by_tokens(texts, self.count, cfg.hi_report_tokens)
            comms = tr.communities = ranked[: len(packed)]
            ctx.communities = [self.communities[ci].id for ci in comms]
            if "reports" in wanted:
                tr.shown["reports"] = self._section(ctx, "reports", [t.replace("\n", " ") for t in packed],
                                                    cfg.hi_report_tokens)
        if "bridge" in wanted:
            keys = tr.keys = self.key_entities(comms, [e for e, _ in overall], cfg.hi_top_m)
            tr.legs, tr.path, pairs = self.bridge_legs(keys)
            ctx.key_entities = [self.name(e) for e in keys]
            ctx.path = [self.name(e) for e in tr.path]
            kept = self._section(ctx, "bridge", [self.relation_text(p) for p in pairs], cfg.hi_bridge_tokens)
            tr.bridge_pairs = pairs[:kept]
            # HiRAG's passages are the top entities' text units; the passages stating the
            # path's relations come after them (ranked first they cut MuSiQue Recall@5
            # from 48.6 to 21.0)
            ranking = dedupe(ranking + self.pair_passages(tr.bridge_pairs))
        if "entities" in wanted:
            tr.shown["entities"] = self._section(ctx, "entities", [self.entity_line(e) for e in top],
                                                 cfg.hi_local_context_tokens)
        if "relations" in wanted:
            left = cfg.hi_local_context_tokens - ctx.tokens.get("entities", 0)
            rel = self.relations(top)
            tr.relation_pairs = rel[: self._section(ctx, "relations", [self.relation_text(p) for p in rel],
                                                    max(left, 0))]
        tr.ranking = ranking[:limit]
        ctx.passages = [self.passage_text(p) for p in tr.ranking]
        self._passages_section(ctx, ctx.passages)
        if explain:
            ctx.provenance = context_items(self, ctx, tr)
        return ctx

    def entity_line(self, e: int) -> str:
        """The entities section's line of entity node ``e``: its name and degree."""
        return f"{self.name(e)} (degree {int(self.degree[e])})"

    def _section(self, ctx: HiContext, name: str, lines: Sequence[str], budget: int) -> int:
        """Put the lines that fit ``budget`` into section ``name``; return how many fit."""
        kept = pack_by_tokens(lines, self.count, budget)
        ctx.sections[name] = "\n".join(kept)
        ctx.tokens[name] = sum(self.count(x) for x in kept)
        return len(kept)

    def _passages_section(self, ctx: HiContext, passages: Sequence[str]) -> None:
        blocks = [f"{DEFAULT_PASSAGE_PREFIX}{p}" for p in passages]
        kept = pack_by_tokens(blocks, self.count, self.config.hi_text_unit_tokens)
        ctx.sections["passages"] = "\n\n".join(kept)
        ctx.tokens["passages"] = sum(self.count(x) for x in kept)
        ctx.passage_context = len(kept)


def passage_context(query: str, mode: str, passages: Sequence[str], shown: int, count: TokenCounter, budget: int,
                    entities: Sequence = ()) -> HiContext:
    """A context of passages only (``hipporag2``/``naive`` answers): the first ``shown`` of the
    ranked ``passages`` that fit ``budget`` tokens, each as ``<prefix><passage>``."""
    ctx = HiContext(query=query, mode=mode, passages=list(passages))
    ctx.entities = list(entities)
    blocks = pack_by_tokens([f"{DEFAULT_PASSAGE_PREFIX}{p}" for p in passages[:shown]], count, budget)
    ctx.sections["passages"] = "\n\n".join(blocks)
    ctx.tokens["passages"] = sum(count(b) for b in blocks)
    ctx.passage_context = len(blocks)
    return ctx
