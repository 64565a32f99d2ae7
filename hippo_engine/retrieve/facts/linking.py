"""How a query reaches the graph: the linking strategies of HippoRAG 2 and its ablations.

Each strategy is a small frozen object carrying its own settings, chosen once per
``Retriever`` (:func:`resolve_linking`) instead of a ``linking`` string tested on every block:

- :class:`FactLinking` (``"fact"``, the paper): the entities of the query's best facts (after
  the recognition filter), ``top_k`` candidates.
- :class:`NerLinking` (``"ner"``): each query NER entity linked to its nearest entity node.
- :class:`QueryLinking` (``"query"``): the query vector linked to its ``top_k`` nearest entity nodes.
- :class:`NerFactLinking` (``"ner_fact"``, the LLM-free path): both the facts' entities and the
  NER entities, the larger seed per entity (see :meth:`LinkGraph.hybrid_reset`).

A strategy turns one :class:`Block` of queries into :class:`Links` (one row per (query, entity
node, score)) and builds the block's reset matrix from them, with the :class:`LinkGraph` of the
index version (entity search, the entity nodes of fact rows, passage counts, seed sources; the
seeding rules are :mod:`~hippo_engine.retrieve.facts.seeding`'s). Nothing here calls back into the
:class:`~.retriever.Retriever`, which then runs PPR on the matrix (or the dense fallback).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hippo_engine.retrieve.facts import seeding
from hippo_engine.retrieve.facts.seeding import SeedSource, entity_seed_table
from hippo_engine.retrieve.scoring import Rows

if TYPE_CHECKING:
    from hippo_engine.config import RetrievalConfig
    from hippo_engine.index.graph import GraphData
    from hippo_engine.retrieve.facts.fact_search import MatrixSearch, StoreSearch

#: a block's seed table of query NER entities: (query j, entity node, weight)
SeedTable = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class Block:
    """One block of queries (``s:e`` of the call): their vectors, candidate facts and kept
    masks (fact-scoring linkings), NER vectors, dense scores and seed-source scores."""

    s: int
    e: int
    q_fact: np.ndarray
    dense: np.ndarray
    candidates: tuple[np.ndarray, np.ndarray] | None = None
    kept: np.ndarray | None = None
    ner_vectors: list | None = None
    extra: list = field(default_factory=list)
    #: per query, the :class:`.ann_prior.AnnPrior` its dense column came from (None: a scan)
    ann: list | None = None

    def priors(self, cols) -> list | None:
        """The ``ann`` entries of the block's queries ``cols`` (None where the scores were scanned)."""
        return None if self.ann is None else [self.ann[j] for j in cols]

    @property
    def size(self) -> int:
        return self.e - self.s


@dataclass
class Links:
    """A block's links: query number in the block, entity node and score per row, plus the
    seed table of query NER entities (``ner_fact`` only)."""

    query: np.ndarray
    nodes: np.ndarray
    scores: np.ndarray
    ner_table: SeedTable | None = None

    def linked(self, b: int) -> np.ndarray:
        """Which of the block's ``b`` queries reached the graph."""
        has = np.zeros(b, bool)
        has[self.query] = True
        if self.ner_table is not None:
            has[self.ner_table[0]] = True
        return has


@dataclass
class LinkGraph:
    """The graph side of linking for one index version: the ``graph``, the ``entity_search``
    (nearest entity nodes of a vector), ``fact_links`` (entity nodes of fact rows, see
    :meth:`.fact_search.FactRows.fact_links`), the passage nodes by store row, the passages per
    entity node (``passage_counts``), the entity seeds kept per query (``keep``:
    ``linking_top_k``), the passage seed weight (None: no passage seeds) and extra seed sources."""

    graph: GraphData
    entity_search: MatrixSearch | StoreSearch
    fact_links: Callable[[Rows], tuple[np.ndarray, np.ndarray]]
    passage_nodes: np.ndarray
    passage_counts: np.ndarray
    keep: int
    passage_weight: float | None
    seed_sources: list[SeedSource] = field(default_factory=list)

    def kept_fact_links(self, block: Block) -> Links:
        """Links of the block's kept candidate facts: each fact's entities, with the fact's score."""
        if block.candidates is None or block.kept is None:
            raise ValueError("fact links need the block's candidate facts (a linking that scores facts)")
        cand_rows, cand_scores = block.candidates
        qq, cc = np.nonzero(block.kept)
        lengths, ln = self.fact_links(cand_rows[qq, cc])
        lq = np.repeat(qq, lengths)
        ls = np.repeat(cand_scores[qq, cc], lengths)
        ok = ln >= 0
        return Links(lq[ok], ln[ok], ls[ok])

    def link_entities(self, vectors: np.ndarray | None, per_vector: int) -> list[tuple[int, float]]:
        """Each vector linked to its ``per_vector`` nearest entity nodes by cosine."""
        if len(self.entity_search) == 0 or vectors is None or len(vectors) == 0:
            return []
        linked = []
        for nodes, sims in self.entity_search.nearest_nodes(vectors, per_vector, self.graph):
            for n, w in zip(nodes.tolist(), np.asarray(sims).tolist(), strict=True):
                if n >= 0:
                    linked.append((int(n), float(max(w, 0.0))))
        return linked

    def vector_links(self, vectors: Sequence[np.ndarray | None], per_vector: int) -> Links:
        """Links of each query's vectors (None: no vector) to their nearest entity nodes."""
        lq: list[int] = []
        ln: list[int] = []
        ls: list[float] = []
        for j, vecs in enumerate(vectors):
            linked = self.link_entities(vecs, per_vector) if vecs is not None and len(vecs) else []
            lq += [j] * len(linked)
            ln += [n for n, _ in linked]
            ls += [w for _, w in linked]
        return Links(np.array(lq, np.int64), np.array(ln, np.int64), np.array(ls, np.float64))

    def ner_table(self, ner_vectors: Sequence[np.ndarray | None] | None) -> SeedTable:
        """Seed table (query j, node, weight) of the block's query NER entities: each entity
        vector linked to its nearest entity node (one scan of the entity store for the block)."""
        vecs = [np.atleast_2d(v) for v in (ner_vectors or []) if v is not None and len(v)]
        owner = [j for j, v in enumerate(ner_vectors or []) if v is not None and len(v) for _ in range(len(v))]
        if not vecs or len(self.entity_search) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        found = self.entity_search.nearest_nodes(np.concatenate(vecs), 1, self.graph)
        has = np.array([len(n) > 0 for n, _ in found], bool)
        nodes = np.array([int(n[0]) if len(n) else -1 for n, _ in found], np.int64)
        sims = np.array([float(w[0]) if len(w) else 0.0 for _, w in found])
        ok = (nodes >= 0) & has
        return seeding.ner_seed_table(np.asarray(owner, np.int64)[ok], nodes[ok], sims[ok], self.passage_counts)

    def reset_vector(self, linked: Sequence[tuple[int, float]], dense: np.ndarray
                     ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """One query's reset vector (entity seeds + passage seeds) and its seeds, best first."""
        return seeding.reset_vector(linked, dense, self.passage_nodes, self.passage_counts, self.graph.num_nodes,
                                    self.keep, self.passage_weight)

    def reset_matrix(self, query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, dense: np.ndarray,
                     cols: Rows) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
        """Reset vectors of several queries at once, (n_nodes, len(cols)); see
        ``seeding.reset_matrix`` (seed sources are not applied here)."""
        return seeding.reset_matrix(query, nodes, scores, dense, cols, self.passage_nodes, self.passage_counts,
                                    self.graph.num_nodes, self.keep, self.passage_weight)

    def seed_table(self, links: Links, block: Block, cols: np.ndarray) -> SeedTable:
        """The entity seeds of ``links`` for the block's queries ``cols`` (HippoRAG 2's rule, ``keep``
        kept) as (column c, node, weight), best first per column: what :meth:`seeded_reset` puts in
        its matrix besides the passage seeds and the seed sources'."""
        cols = np.asarray(cols, dtype=np.int64)
        pos = np.full(block.dense.shape[1] if block.dense.ndim == 2 else 0, -1, np.int64)
        pos[cols] = np.arange(len(cols))
        q = links.query
        sel = pos[q] >= 0 if len(q) else np.zeros(0, bool)
        return entity_seed_table(pos[q[sel]], links.nodes[sel], links.scores[sel], self.passage_counts, self.keep)

    def seeded_reset(self, links: Links, block: Block, cols: np.ndarray) -> tuple[np.ndarray, list]:
        """The entity seeds of ``links`` (HippoRAG 2's rule), passage seeds and the seed sources'."""
        R, seeds = seeding.reset_matrix_from_seeds(self.seed_table(links, block, cols), block.dense, cols,
                                                   self.passage_nodes, self.graph.num_nodes, self.passage_weight)
        for src, scores in zip(self.seed_sources, block.extra, strict=True):
            src.add_seeds(R, scores, cols)
        return R, seeds

    def hybrid_table(self, links: Links, block: Block, cols: np.ndarray) -> SeedTable:
        """``ner_fact`` linking's entity seeds: the facts' (HippoRAG 2's rule, ``keep`` kept) and the
        NER entities', the larger weight per entity, as (column c, node, weight), best first per column."""
        fact_table = entity_seed_table(links.query, links.nodes, links.scores, self.passage_counts, self.keep)
        ner = links.ner_table if links.ner_table is not None else self.ner_table(None)
        q, n, w = seeding.max_merge(fact_table, ner)
        pos = np.full(block.dense.shape[1], -1, np.int64)
        pos[cols] = np.arange(len(cols))
        sel = pos[q] >= 0
        q, n, w = pos[q[sel]], n[sel], w[sel]
        order = np.lexsort((n, -w, q))    # per column, best first (ties: lower node)
        return q[order], n[order], w[order]

    def hybrid_reset(self, links: Links, block: Block, cols: np.ndarray) -> np.ndarray:
        """``ner_fact`` linking: :meth:`hybrid_table`'s entity seeds, then passage seeds."""
        R, _ = seeding.reset_matrix_from_seeds(self.hybrid_table(links, block, cols), block.dense, cols,
                                               self.passage_nodes, self.graph.num_nodes, self.passage_weight)
        return R


@dataclass(frozen=True)
class Linking:
    """Base of the strategies: ``name`` (the ``linking`` setting), whether the query's facts
    are scored (``scores_facts``: candidates, recognition filter) and whether query NER
    vectors are needed (``needs_ner``)."""

    name: ClassVar[str] = ""
    scores_facts: ClassVar[bool] = False
    needs_ner: ClassVar[bool] = False

    def candidate_count(self, filtered: bool) -> int:
        """Candidate facts per query (``filtered``: the recognition filter runs)."""
        return 0

    def links(self, g: LinkGraph, block: Block) -> Links:
        raise NotImplementedError

    def resets(self, g: LinkGraph, links: Links, block: Block, cols: np.ndarray
               ) -> tuple[np.ndarray, list | None]:
        """The block's reset matrix for queries ``cols`` and their entity seeds (None: not reported)."""
        return g.seeded_reset(links, block, cols)

    def seed_table(self, g: LinkGraph, links: Links, block: Block, cols: np.ndarray) -> tuple[SeedTable, bool]:
        """The entity seeds :meth:`resets` puts in the matrix, as a table (column c, node, weight; best
        first per column), and whether :meth:`resets` reports them."""
        return g.seed_table(links, block, cols), True


@dataclass(frozen=True)
class FactLinking(Linking):
    """The paper: the entities of the ``top_k`` best facts that survive the filter."""

    top_k: int = 5
    name: ClassVar[str] = "fact"
    scores_facts: ClassVar[bool] = True

    def candidate_count(self, filtered: bool) -> int:
        return self.top_k

    def links(self, g: LinkGraph, block: Block) -> Links:
        return g.kept_fact_links(block)


@dataclass(frozen=True)
class QueryLinking(Linking):
    """Ablation: the query (fact-instruction) vector linked to its ``top_k`` nearest entities."""

    top_k: int = 5
    name: ClassVar[str] = "query"

    def links(self, g: LinkGraph, block: Block) -> Links:
        return g.vector_links([block.q_fact[j:j + 1] for j in range(block.size)], self.top_k)


@dataclass(frozen=True)
class NerLinking(Linking):
    """Ablation: each query NER entity linked to its nearest entity node."""

    name: ClassVar[str] = "ner"
    needs_ner: ClassVar[bool] = True

    def links(self, g: LinkGraph, block: Block) -> Links:
        vectors = block.ner_vectors if block.ner_vectors is not None else [None] * block.size
        return g.vector_links(vectors, 1)


@dataclass(frozen=True)
class NerFactLinking(Linking):
    """The LLM-free path: the best facts' entities (``fact_top_k`` candidates with the filter,
    ``unfiltered_top_k`` without) and the query NER entities, the larger seed per entity."""

    fact_top_k: int = 5
    unfiltered_top_k: int = 1
    name: ClassVar[str] = "ner_fact"
    scores_facts: ClassVar[bool] = True
    needs_ner: ClassVar[bool] = True

    def candidate_count(self, filtered: bool) -> int:
        return self.fact_top_k if filtered else self.unfiltered_top_k

    def links(self, g: LinkGraph, block: Block) -> Links:
        links = g.kept_fact_links(block)
        links.ner_table = g.ner_table(block.ner_vectors)
        return links

    def resets(self, g: LinkGraph, links: Links, block: Block, cols: np.ndarray
               ) -> tuple[np.ndarray, list | None]:
        return g.hybrid_reset(links, block, cols), None

    def seed_table(self, g: LinkGraph, links: Links, block: Block, cols: np.ndarray) -> tuple[SeedTable, bool]:
        return g.hybrid_table(links, block, cols), False


def resolve_linking(config: RetrievalConfig, extractor: str | None) -> Linking:
    """The strategy of ``config.linking`` (``"auto"``: ``ner_fact`` on an ``extractor="ner"``
    index, ``fact`` otherwise), with its settings from the retrieval config."""
    name = config.linking
    if name == "auto":
        name = "ner_fact" if extractor == "ner" else "fact"
    make = {"fact": lambda: FactLinking(config.linking_top_k),
            "query": lambda: QueryLinking(config.linking_top_k),
            "ner": NerLinking,
            "ner_fact": lambda: NerFactLinking(config.linking_top_k, config.ner_fact_top_k)}
    return make[name]()
