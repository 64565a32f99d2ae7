"""HiRAG on top of the HippoRAG 2 index: community summary nodes and HiRAG's retrieval modes.

Summary nodes (``use_community_nodes=True``). Every community (see
:mod:`hippo_engine.hirag.communities`) becomes a node of the PPR graph, after the entity and passage
nodes, linked to its member entities (``community_entity_weight``) and to its parent community
(``community_parent_weight``); its report text lives in a fourth embedding store. At query time
:class:`CommunityRetriever` also seeds the ``community_seed_top_k`` communities whose report
vectors are nearest the query, with ``community_seed_weight x min-max(similarity)``. Switched
off (the default), ``HippoRAG`` uses the plain ``Retriever``: exactly HippoRAG 2.

Modes (``retrieve(..., mode=...)`` / ``rag_qa(..., mode=...)``):

========== =========================================================== ======================
mode       context sections                                             passages (ranking)
========== =========================================================== ======================
hipporag2  passages (the reader's ``qa_top_k``)                         HippoRAG 2 PPR
naive      passages                                                     dense
hi_local   entities, relations, passages                                text units of top entities
hi_global  community reports, passages                                  text units of top entities
hi_bridge  reasoning path, passages                                     text units, then path passages
hi         reports, reasoning path, entities, passages                  text units, then path passages
========== =========================================================== ======================

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
path's relations (HiRAG shows only the text units); ``hipporag2``/``naive`` answer with the
standard reader over ``qa_top_k`` passages.

Every section is cut to its token budget (``hi_text_unit_tokens``, ``hi_local_context_tokens``,
``hi_bridge_tokens``, ``hi_report_tokens``), counted with the encoder's tokenizer when it has
one, else as whitespace-separated words. ``only_need_context=True`` returns :class:`HiContext`
objects instead of solutions or answers.
"""
from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hippo_engine.config import HippoConfig
from hippo_engine.hirag.communities import (
    Community,
    CommunitySet,
    ReportInputs,
    TokenCounter,
    communities_state,
    entity_edges,
    entity_igraph,
    load_communities,
    whitespace_tokens,
)
from hippo_engine.hirag.communities import build_communities as _build
from hippo_engine.index.graph import KIND_CONTEXT, GraphData
from hippo_engine.retrieve.retriever import Retriever, min_max, top_k

logger = logging.getLogger(__name__)

MODES = ("hipporag2", "naive", "hi_local", "hi_global", "hi_bridge", "hi")
KIND_COMMUNITY = 8  # edge kind bit of community edges (the graph module uses 1, 2, 4)
SECTION_TITLES = {"reports": "Backgrounds", "bridge": "Reasoning Path", "entities": "Entities",
                  "relations": "Relations", "passages": "Sources"}
MODE_SECTIONS = {
    "hipporag2": ("passages",),
    "naive": ("passages",),
    "hi_local": ("entities", "relations", "passages"),
    "hi_global": ("reports", "passages"),
    "hi_bridge": ("bridge", "passages"),
    "hi": ("reports", "bridge", "entities", "passages"),
}
PASSAGE_PREFIX = "Wikipedia Title: "


# ============================================================================ pure functions
def check_mode(mode: str) -> str:
    """Return ``mode`` if known, else raise ``ValueError`` naming the modes."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    return mode


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


def augment_graph(graph: GraphData, communities: Sequence[Community], entity_weight: float,
                  parent_weight: float) -> GraphData:
    """``graph`` plus one node per community (after all existing nodes) linked to its member
    entities and to its parent community. Members no longer in ``graph`` are skipped; weights of
    0 add no edges. Edges carry kind ``KIND_COMMUNITY``."""
    base = graph.num_nodes
    idx = graph.index_of
    cpos = {c.id: base + i for i, c in enumerate(communities)}
    src, dst, w = [], [], []
    for i, c in enumerate(communities):
        node = base + i
        if entity_weight > 0:
            for e in c.entities:
                j = idx.get(e)
                if j is not None and j < graph.num_entities:
                    src.append(j)
                    dst.append(node)
                    w.append(float(entity_weight))
        if parent_weight > 0 and c.parent in cpos:
            p = cpos[c.parent]
            src.append(min(p, node))
            dst.append(max(p, node))
            w.append(float(parent_weight))
    n_new = len(src)
    node_ids = np.concatenate([graph.node_ids, np.array([c.id for c in communities], dtype=object)])
    extra = dict(graph.extra)
    extra.update({"num_base_nodes": base, "community_levels": np.array([c.level for c in communities], np.int64)})
    return GraphData(node_ids=node_ids, num_entities=graph.num_entities,
                     src=np.concatenate([graph.src, np.asarray(src, np.int64)]),
                     dst=np.concatenate([graph.dst, np.asarray(dst, np.int64)]),
                     weight=np.concatenate([graph.weight, np.asarray(w, np.float64)]),
                     kinds=np.concatenate([graph.kinds, np.full(n_new, KIND_COMMUNITY, np.uint8)]),
                     extra=extra)


def community_seeds(scores: np.ndarray, weight: float, keep: int) -> np.ndarray:
    """Reset weights of community nodes: ``weight x min-max(scores)`` for the ``keep`` best
    communities (ties: lower index), 0 elsewhere."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.zeros(len(scores))
    if weight <= 0 or len(scores) == 0 or keep <= 0:
        return out
    best = top_k(scores, keep)
    out[best] = weight * min_max(scores)[best]
    return out


def find_path_with_required_nodes(g, required: Sequence[int], components: Sequence[int] | None = None) -> list[int]:
    """Vertices of a walk that visits ``required`` in the given order, joining consecutive
    required vertices by an unweighted shortest path of ``g`` (an ``igraph.Graph``). A required
    vertex that cannot be reached from the previous one is appended directly (a jump). An empty
    ``required`` gives ``[]``. ``components``: vertex -> connected component id (computed if
    not given)."""
    required = [int(v) for v in required]
    if not required:
        return []
    if components is None:
        components = g.connected_components().membership
    path = [required[0]]
    cur = required[0]
    for nxt in required[1:]:
        if nxt == cur:
            continue
        if components[cur] != components[nxt]:
            path.append(nxt)
        else:
            sp = g.get_shortest_paths(cur, to=nxt, weights=None, output="vpath")[0]
            path.extend(sp[1:] if sp else [nxt])
        cur = nxt
    return path


# ============================================================================ summary nodes in PPR
class CommunityRetriever(Retriever):
    """A ``Retriever`` whose graph also holds community nodes and whose queries also seed them.

    Community seeds come from the query-to-passage vector against the report vectors. With
    ``community_seed_weight=0`` and both edge weights 0 the community nodes are isolated and
    unseeded.
    """

    def __init__(self, config: HippoConfig, graph: GraphData, passage_ids, passage_mat, fact_ids, fact_mat,
                 entity_ids, entity_mat, entity_text, passage_triples, communities: Sequence[Community],
                 community_mat: np.ndarray):
        aug = augment_graph(graph, communities, config.community_entity_weight, config.community_parent_weight)
        super().__init__(config, aug, passage_ids, passage_mat, fact_ids, fact_mat, entity_ids, entity_mat,
                         entity_text, passage_triples)
        self.communities = list(communities)
        self.community_nodes = np.arange(graph.num_nodes, aug.num_nodes, dtype=np.int64)
        self.community_mat = np.asarray(community_mat, dtype=np.float32).reshape(len(self.communities), -1)
        self.n_passages = len(passage_ids)
        self._pending: np.ndarray | None = None

    def community_scores(self, q: np.ndarray) -> np.ndarray:
        """(n_communities, n_queries) cosine of report vectors and query vectors."""
        if len(self.community_mat) == 0:
            return np.zeros((0, q.shape[0]))
        return self.community_mat @ q.T

    def search(self, queries, q_fact, q_pass, k, filter_fn=None, ner_vectors=None):
        """As ``Retriever.search``; every graph search also seeds community nodes."""
        self._pending = self.community_scores(q_pass)
        try:
            return super().search(queries, q_fact, q_pass, k, filter_fn, ner_vectors)
        finally:
            self._pending = None

    # Inside ``search`` the dense score column of each query carries its community scores
    # below the passage rows, so ``reset_vector`` sees them; outside it nothing changes.
    def dense_scores(self, q_pass: np.ndarray) -> np.ndarray:
        dense = super().dense_scores(q_pass)
        if self._pending is None or self._pending.shape[0] == 0:
            return dense
        return np.vstack([dense, self._pending])

    def dense_rank(self, scores: np.ndarray, k: int):
        return super().dense_rank(scores[: self.n_passages], k)

    def reset_vector(self, linked, dense):
        n = self.n_passages
        weights, seeds = super().reset_vector(linked, dense[:n])
        if len(dense) > n:
            weights[self.community_nodes] += community_seeds(dense[n:], self.config.community_seed_weight,
                                                             self.config.community_seed_top_k)
        return weights, seeds


# ============================================================================ facade helpers
_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def build_communities(rag, max_llm_reports: int | None = None, show_progress: bool | None = None) -> dict:
    """Compute (or update) ``rag``'s communities, reports and report vectors; see
    :func:`hippo_engine.hirag.communities.build_communities`. Invalidates cached retrievers."""
    summary = _build(rag.index_state, rag.config, lambda: rag.llm, count=token_counter(rag.encoder),
                     max_llm_reports=max_llm_reports, show_progress=show_progress)
    rag._retriever = None
    _ENGINES.pop(rag, None)
    return summary


def get_community_set(rag, build: bool = True) -> CommunitySet | None:
    """The communities of ``rag``'s index. Missing or stale ones are (re)built first when
    ``build`` and ``community_auto_update`` allow it (reports only for changed communities);
    a stale set is otherwise used with a warning; missing ones give None when not built."""
    state = communities_state(rag.index_state, rag.config)
    if state != "current":
        if build and rag.config.community_auto_update:
            logger.info("communities are %s; building them now", state)
            build_communities(rag)
        elif state == "missing":
            return None
        else:
            logger.warning("communities are stale (the index changed); call build_communities() to update them")
    return load_communities(rag.index_state)


def community_retriever(rag) -> CommunityRetriever:
    """The ``CommunityRetriever`` for ``rag``'s current index (communities built if needed)."""
    cset = get_community_set(rag)
    if cset is None:
        raise RuntimeError("use_community_nodes=True but no communities exist and community_auto_update is off; "
                           "call build_communities() first")
    st = rag.index_state.stores
    return CommunityRetriever(rag.config, rag.index_state.graph, st["passage"].ids, st["passage"].matrix,
                              st["fact"].ids, st["fact"].matrix, st["entity"].ids, st["entity"].matrix,
                              st["entity"].text, rag.index_state.passage_triples, cset.communities, cset.matrix())


# ============================================================================ contexts
@dataclass
class HiContext:
    """What one query's retrieval assembled for the reader in some mode.

    ``sections`` maps section names (``reports``, ``bridge``, ``entities``, ``relations``,
    ``passages``) to their text, in order; ``tokens`` their token counts. ``passages`` is the
    passage ranking (best first) the mode produced; ``passage_context`` how many of them made
    it into the passages section. ``path`` is the bridge's entity path (names).
    """

    query: str
    mode: str
    sections: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    passages: list = field(default_factory=list)
    passage_context: int = 0
    entities: list = field(default_factory=list)
    communities: list = field(default_factory=list)
    key_entities: list = field(default_factory=list)
    path: list = field(default_factory=list)

    @property
    def text(self) -> str:
        """The sections as one string, each under a ``-----Title-----`` line."""
        return "\n".join(f"-----{SECTION_TITLES[k]}-----\n{v}\n" for k, v in self.sections.items())

    def to_dict(self) -> dict:
        return {"query": self.query, "mode": self.mode, "sections": dict(self.sections), "tokens": dict(self.tokens),
                "passages": list(self.passages), "passage_context": self.passage_context,
                "entities": list(self.entities), "communities": list(self.communities),
                "key_entities": list(self.key_entities), "path": list(self.path), "text": self.text}


class HiRAGEngine:
    """Query-time view of one index version (and its communities) for the HiRAG modes."""

    def __init__(self, rag, cset: CommunitySet | None):
        index = rag.index_state
        self.config: HippoConfig = rag.config
        self.graph = graph = index.graph
        st = index.stores
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
        self.count = token_counter(rag.encoder)

    # --- graph pieces -------------------------------------------------------------------------
    @property
    def entity_graph(self):
        """The entity graph as igraph (built lazily from the GraphData arrays)."""
        if self._g is None:
            self._g = entity_igraph(self.graph)
            self._components = self._g.connected_components().membership
        return self._g

    def name(self, node: int) -> str:
        return self.inputs.name(str(self.node_ids[node]))

    def passage_text(self, node: int) -> str:
        return self.passage_store.text(str(self.node_ids[node]))

    def pair_lines(self, a: int, b: int) -> list[str]:
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
        if not keys:
            return [], []
        g = self.entity_graph
        path = find_path_with_required_nodes(g, keys, self._components)
        along = []
        for a, b in zip(path, path[1:], strict=False):
            p = (a, b) if a < b else (b, a)
            if p in self.pair_weight:
                along.append(p)
        along = dedupe(along)
        nodes = set(path)
        others = {(a, n) if a < n else (n, a) for a in nodes for n in self.neighbors[a] if n in nodes}
        others = sorted(others - set(along), key=lambda p: (-(self.degree[p[0]] + self.degree[p[1]]),
                                                              -self.pair_weight.get(p, 0.0), p))
        return path, along + others

    def pair_passages(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """Passages that state a relation of the pairs (both entities appear), in pair order."""
        out = []
        for a, b in pairs:
            out.extend(sorted(self.ent_passage_sets[a] & self.ent_passage_sets[b],
                              key=lambda p: str(self.node_ids[p])))
        return dedupe(out)

    # --- assembling a context ---------------------------------------------------------------
    def context(self, query: str, mode: str, q_ent: np.ndarray, q_pass: np.ndarray, limit: int) -> HiContext:
        """Build the context of ``mode`` (one of the hi_* modes or naive) for one query."""
        cfg = self.config
        ctx = HiContext(query=query, mode=mode)
        wanted = MODE_SECTIONS[mode]
        if mode == "naive":
            dense = self.passage_mat @ q_pass
            ranking = [int(self.passage_nodes[r]) for r in top_k(dense, limit)]
        else:
            overall = self.top_entities(q_ent, cfg.hi_top_k * 10)
            top = [e for e, _ in overall[: cfg.hi_top_k]]
            ctx.entities = [(self.name(e), round(s, 6)) for e, s in overall[: cfg.hi_top_k]]
            ranking = self.text_units(top)
            comms: list[int] = []
            if "reports" in wanted or "bridge" in wanted:
                ranked = [ci for ci in self.top_communities(top) if self.communities[ci].id in self.reports]
                texts = [self.reports[self.communities[ci].id].text() for ci in ranked]
                kept = pack_by_tokens(texts, self.count, cfg.hi_report_tokens)
                comms = ranked[: len(kept)]
                ctx.communities = [self.communities[ci].id for ci in comms]
                if "reports" in wanted:
                    self._section(ctx, "reports", [t.replace("\n", " ") for t in kept], cfg.hi_report_tokens)
            if "bridge" in wanted:
                keys = self.key_entities(comms, [e for e, _ in overall], cfg.hi_top_m)
                path, pairs = self.bridge(keys)
                ctx.key_entities = [self.name(e) for e in keys]
                ctx.path = [self.name(e) for e in path]
                kept = self._section(ctx, "bridge", [self.relation_text(p) for p in pairs], cfg.hi_bridge_tokens)
                # HiRAG's passages are the top entities' text units; the passages stating the
                # path's relations come after them (ranked first they cut MuSiQue Recall@5
                # from 48.6 to 21.0)
                ranking = dedupe(ranking + self.pair_passages(pairs[:kept]))
            if "entities" in wanted:
                lines = [f"{self.name(e)} (degree {int(self.degree[e])})" for e in top]
                self._section(ctx, "entities", lines, cfg.hi_local_context_tokens)
            if "relations" in wanted:
                left = cfg.hi_local_context_tokens - ctx.tokens.get("entities", 0)
                self._section(ctx, "relations", [self.relation_text(p) for p in self.relations(top)], max(left, 0))
        ranking = ranking[:limit]
        ctx.passages = [self.passage_text(p) for p in ranking]
        self._passages_section(ctx, ctx.passages)
        return ctx

    def _section(self, ctx: HiContext, name: str, lines: Sequence[str], budget: int) -> int:
        """Put the lines that fit ``budget`` into section ``name``; return how many fit."""
        kept = pack_by_tokens(lines, self.count, budget)
        ctx.sections[name] = "\n".join(kept)
        ctx.tokens[name] = sum(self.count(x) for x in kept)
        return len(kept)

    def _passages_section(self, ctx: HiContext, passages: Sequence[str]) -> None:
        blocks = [f"{PASSAGE_PREFIX}{p}" for p in passages]
        kept = pack_by_tokens(blocks, self.count, self.config.hi_text_unit_tokens)
        ctx.sections["passages"] = "\n\n".join(kept)
        ctx.tokens["passages"] = sum(self.count(x) for x in kept)
        ctx.passage_context = len(kept)


def get_engine(rag, need_communities: bool) -> HiRAGEngine:
    """A cached ``HiRAGEngine`` for ``rag``'s current index (and communities when needed)."""
    cset = get_community_set(rag) if need_communities else None
    if need_communities and cset is None:
        raise RuntimeError("this mode needs communities; call build_communities() first "
                           "(or set community_auto_update=True)")
    key = (rag.index_state.version, rag.index_state.db.get_meta("communities_version") if need_communities else None,
           id(rag.config))
    hit = _ENGINES.get(rag)
    if hit is not None and hit[0] == key:
        return hit[1]
    eng = HiRAGEngine(rag, cset)
    _ENGINES[rag] = (key, eng)
    return eng


def _wrap_contexts(rag, solutions, mode: str) -> list[HiContext]:
    """Contexts for already-ranked solutions (hipporag2): the reader's ``qa_top_k`` passages."""
    count = token_counter(rag.encoder)
    out = []
    for s in solutions:
        ctx = HiContext(query=s.question, mode=mode, passages=list(s.docs))
        ctx.entities = list(s.seed_entities)
        blocks = pack_by_tokens([f"{PASSAGE_PREFIX}{p}" for p in s.docs[: rag.config.qa_top_k]], count,
                                rag.config.hi_text_unit_tokens)
        ctx.sections["passages"] = "\n\n".join(blocks)
        ctx.tokens["passages"] = sum(count(b) for b in blocks)
        ctx.passage_context = len(blocks)
        out.append(ctx)
    return out


def build_contexts(rag, queries: Sequence[str], mode: str, num_to_retrieve: int | None = None
                   ) -> list[HiContext]:
    """The assembled context of each query in ``mode``."""
    check_mode(mode)
    k = num_to_retrieve or rag.config.retrieval_top_k
    if mode == "hipporag2":
        return _wrap_contexts(rag, rag.retrieve(list(queries), num_to_retrieve=k), mode)
    t0 = time.perf_counter()
    eng = get_engine(rag, need_communities=mode in ("hi_global", "hi_bridge", "hi"))
    q_fact, q_pass = rag._encode_queries(list(queries))
    out = [eng.context(q, mode, q_fact[j], q_pass[j], k) for j, q in enumerate(queries)]
    logger.info("%s: %d contexts in %.2fs", mode, len(out), time.perf_counter() - t0)
    return out


def retrieve_mode(rag, queries, mode: str = "hipporag2", num_to_retrieve: int | None = None, gold_docs=None,
                  only_need_context: bool = False):
    """``HippoRAG.retrieve`` for any mode: ``QuerySolution``s (with metrics when ``gold_docs``),
    or the ``HiContext`` list when ``only_need_context``."""
    from hippo_engine.qa.reader import QuerySolution
    check_mode(mode)
    queries = rag._check_queries(queries, "retrieve")
    if only_need_context:
        return build_contexts(rag, queries, mode, num_to_retrieve)
    if mode == "hipporag2":
        return rag.retrieve(queries, num_to_retrieve=num_to_retrieve, gold_docs=gold_docs)
    if mode == "naive":
        return rag.retrieve_dpr(queries, num_to_retrieve=num_to_retrieve, gold_docs=gold_docs)
    contexts = build_contexts(rag, queries, mode, num_to_retrieve)
    sols = [_solution(QuerySolution, c) for c in contexts]
    return rag._with_metrics(sols, gold_docs, f"retrieve[{mode}]")


def _solution(cls, ctx: HiContext):
    n = len(ctx.passages)
    scores = np.arange(n, 0, -1, dtype=np.float64) / max(n, 1)
    return cls(question=ctx.query, docs=list(ctx.passages), doc_scores=scores,
               seed_entities=list(ctx.entities))


def rag_qa_mode(rag, queries, mode: str = "hipporag2", gold_docs=None, gold_answers=None, template=None,
                dense: bool = False, only_need_context: bool = False):
    """``HippoRAG.rag_qa`` for any mode. ``hipporag2``/``naive`` use the standard reader over
    ``qa_top_k`` passages; the hi_* modes show the reader their assembled context. With
    ``only_need_context`` the contexts are returned and no LLM is called."""
    from hippo_engine.qa.reader import QuerySolution, ReaderTemplate, default_reader_template
    check_mode(mode)
    if mode == "hipporag2" and dense:
        mode = "naive"
    if only_need_context:
        if queries and all(isinstance(q, QuerySolution) for q in queries):
            return _wrap_contexts(rag, queries, mode)
        return build_contexts(rag, rag._check_queries(queries, "rag_qa"), mode)
    if mode in ("hipporag2", "naive"):
        return rag.rag_qa(queries, gold_docs=gold_docs, gold_answers=gold_answers, template=template,
                          dense=mode == "naive")
    if queries and all(isinstance(q, QuerySolution) for q in queries):
        queries = [q.question for q in queries]   # hi_* modes retrieve in their own way
    queries = rag._check_queries(queries, "rag_qa")
    contexts = build_contexts(rag, queries, mode)
    sols = [_solution(QuerySolution, c) for c in contexts]
    tmpl = template if isinstance(template, ReaderTemplate) else (
        ReaderTemplate.from_dict(template) if template is not None else default_reader_template())
    batch = [_reader_messages(tmpl, c) for c in contexts]
    results = rag.llm.generate_many(batch, max_new_tokens=rag.config.max_new_tokens,
                                    temperature=rag.config.temperature, show_progress=rag.config.show_progress,
                                    desc=f"QA reading ({mode})")
    responses, metadata = _read_results(sols, results, contexts)
    if gold_docs is None and gold_answers is None:
        return sols, responses, metadata
    retrieval_metrics: dict = {}
    if gold_docs is not None:
        sols, retrieval_metrics = rag._with_metrics(sols, gold_docs, f"rag_qa[{mode}]")
    qa_metrics = rag._score_answers(sols, gold_answers, f"rag_qa[{mode}]")
    return sols, responses, metadata, retrieval_metrics, qa_metrics


def _reader_messages(tmpl, ctx: HiContext) -> list[dict]:
    """The reader prompt with the assembled context in place of the plain passage list."""
    from hippo_engine.qa.reader import format_reader_input
    msgs = [{"role": "system", "content": tmpl.system}]
    for ex in tmpl.examples:
        msgs.append({"role": "user", "content": format_reader_input(ex.question, ex.passages, tmpl.passage_prefix)})
        msgs.append({"role": "assistant", "content": ex.response})
    msgs.append({"role": "user", "content": f"{ctx.text}\nQuestion: {ctx.query}\nThought: "})
    return msgs


def _read_results(sols, results, contexts) -> tuple[list[str], list[dict]]:
    from hippo_engine.llm.base import LLMResponse
    from hippo_engine.qa.reader import parse_answer
    responses, metadata = [], []
    for s, res, c in zip(sols, results, contexts, strict=False):
        if isinstance(res, LLMResponse):
            s.answer = parse_answer(res.text or "")
            responses.append(res.text or "")
            metadata.append({"prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
                             "cached": res.cached, "finish_reason": res.finish_reason, "error": None,
                             "context_tokens": dict(c.tokens)})
        else:
            logger.warning("reader failed for question %r: %s", s.question[:80], res)
            s.answer = ""
            responses.append("")
            metadata.append({"prompt_tokens": 0, "completion_tokens": 0, "cached": False, "finish_reason": "error",
                             "error": f"{type(res).__name__}: {res}", "context_tokens": dict(c.tokens)})
    return responses, metadata
