"""HippoRAG 2 retrieval (paper section 3): the ``Retriever`` orchestrating scoring, the
recognition filter, seeding and Personalized PageRank for batches of queries.

The math lives in pure functions: :mod:`~hippo_engine.retrieve.scoring` (min-max, top-k, exact
dot products, matrix scans), :mod:`~hippo_engine.retrieve.facts.seeding` (entity and passage seeds,
reset vectors) and :mod:`~hippo_engine.retrieve.ppr.kernel` (the PPR kernel). ``Retriever`` holds the
matrices and the PPR kernel of one index version and runs queries in blocks of
``query_batch_size``: one matrix product scores all facts (and one scan all passages) for a
block, the recognition filter sees every query's candidates in one call, the seeds of a block are
built with array operations, and one batched PPR run ranks the passages of every query of the
block that reached the graph. How a query reaches the graph is a strategy object resolved once
(:mod:`~hippo_engine.retrieve.facts.linking`); what the retriever reads is chosen once
(:mod:`~hippo_engine.retrieve.views`). Extra seed sources (:class:`~hippo_engine.retrieve.facts.seeding.SeedSource`,
e.g. HiRAG's community nodes) add their own reset weights.

Determinism: a query's ranking and scores are bit-identical whether it runs alone or in any
batch (see :mod:`~hippo_engine.retrieve.scoring`; the PPR kernel gives bit-identical columns
whatever the batch).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hippo_engine.auto import resolve_retrieval
from hippo_engine.config import HippoConfig, PPRConfig, RetrievalConfig
from hippo_engine.index.graph import KIND_CONTEXT, GraphData
from hippo_engine.retrieve.encoding import encode_queries  # noqa: F401 - re-exported (its old import path)
from hippo_engine.retrieve.facts.fact_search import FactRows
from hippo_engine.retrieve.facts.kept_facts import kept_masks
from hippo_engine.retrieve.facts.linking import Block, LinkGraph, Linking, resolve_linking
from hippo_engine.retrieve.facts.seeding import SeedSource, entity_seed_table, entity_seeds, passage_seeds, table_seeds  # noqa: F401
from hippo_engine.retrieve.ppr.ann_prior import AnnDense
from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.ppr.push import PushPPR
from hippo_engine.retrieve.ppr.solver import PPRSolver
from hippo_engine.retrieve.raw_result import FilterMany, RawResult  # noqa: F401 - re-exported (their old import path)
from hippo_engine.retrieve.scoring import (  # noqa: F401 - min_max, top_k and dense_column re-exported
    Rows,
    dense_column,
    dense_first,
    dense_scores,
    max_row_norm,
    min_max,
    nearest_rows,
    row_blocks,
    row_scores,
    top_fact_rows,
    top_k,
)
from hippo_engine.retrieve.second.fusion import make_fusion
from hippo_engine.retrieve.second.second_hop import make_second_hop
from hippo_engine.retrieve.second.second_walk import SecondWalk
from hippo_engine.retrieve.top_rank import dense_agree
from hippo_engine.retrieve.trace import keep_trace
from hippo_engine.retrieve.views import ReaderViews, reader_views

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.linking import Links
    from hippo_engine.retrieve.restriction import Restriction

logger = logging.getLogger(__name__)

#: bytes one query may take in a block's dense arrays over the graph's nodes (reset vectors of both walks,
#: PPR solution): a block holds fewer than ``query_batch_size`` queries on a graph where that would exceed
#: ``BLOCK_BYTES`` (at 1M passages, about 9.6M nodes, 64 queries needed 4.9 GB for the reset matrix alone)
NODE_BYTES_PER_QUERY = 32
BLOCK_BYTES = 512 << 20

def retrieval_section(config: HippoConfig | RetrievalConfig) -> RetrievalConfig:
    """The retrieval section (a whole ``HippoConfig`` is accepted for convenience)."""
    return config.retrieval if isinstance(config, HippoConfig) else config


def ppr_section(config: HippoConfig | RetrievalConfig, ppr: PPRConfig | None) -> PPRConfig:
    """The PPR section: ``ppr`` when given, else the one of a whole ``HippoConfig``, else the defaults."""
    if ppr is not None:
        return ppr
    return config.ppr if isinstance(config, HippoConfig) else PPRConfig.model_validate({})


class Retriever(FactRows):
    """Query-time view of one index version. Build it once; it is invalid after index/delete.

    ``config``: the retrieval section (a whole ``HippoConfig`` gives both sections); ``ppr``: the PPR
    section (default: the ``HippoConfig``'s, else the defaults), which the walk reads
    (:class:`.ppr.solver.PPRSolver`); ``views``: what it reads (:class:`.views.ReaderViews`);
    ``linking``: the linking strategy (default: ``config.linking``, ``"auto"`` read as ``"fact"``);
    ``extractor``: the index's, which resolves the ``"auto"`` retrieval settings
    (:func:`hippo_engine.auto.resolve_retrieval`; None: the paper's one walk).
    ``graph`` may hold nodes after the entity and passage nodes (e.g. HiRAG community nodes, see
    ``hirag.seeds.augment_graph``), which ``seed_sources`` seed. :meth:`from_index` builds one
    from an ``Index``."""

    def __init__(self, config: HippoConfig | RetrievalConfig, graph: GraphData, views: ReaderViews, *,
                 linking: Linking | None = None, seed_sources: Sequence[SeedSource] = (),
                 hyperedges: Callable[[], Any] | None = None, extractor: str | None = None,
                 ppr: PPRConfig | None = None):
        #: the PPR section (damping, solver, tolerances)
        self.ppr = ppr = ppr_section(config, ppr)
        #: the retrieval section with its "auto" settings resolved for the index's extractor
        self.config = config = resolve_retrieval(retrieval_section(config), extractor)
        #: the second walk (``config.second_hop``) and the passages' hyperedges it reads (a provider)
        self.second_hop = make_second_hop(str(config.second_hop), keep_head=int(config.second_hop_head))
        #: the dense_agree top-rank rule's N (resolved: an int; an ablation switch, 0 by default)
        self.dense_agree = int(config.dense_agree)
        #: the one score of a search with a second walk or a dense term (None: the walk's PPR probability)
        self.fusion = make_fusion(config, self.second_hop is not None)
        self.extractor = extractor
        #: the linking strategy in effect (see :mod:`.linking`)
        self.linking = linking or resolve_linking(config, None)
        if ppr.ppr_dtype == "float32" and ppr.ppr_backend == "power" and ppr.ppr_tol < 1e-7:
            logger.warning("ppr_tol=%g is below what float32 PPR can reach (about 1e-7): every query will run "
                           "ppr_max_iter=%d steps; use ppr_dtype='float64' for tight tolerances",
                           ppr.ppr_tol, ppr.ppr_max_iter)
        self.graph = graph
        self.views = views
        self.seed_sources = list(seed_sources)
        self.passage_mat, self.fact_mat, self.entity_mat = views.passage_mat, views.fact_mat, views.entity_mat
        self.entity_ids = views.entity_ids
        #: fact ids by row, as the views hand them over (see :attr:`.views.ReaderViews.fact_ids`)
        self.fact_ids = views.fact_ids
        self.passage_nodes = self._passage_nodes(views.passage_ids)
        self.entity_text, self.entity_texts = views.entity_text, views.entity_texts
        #: where fact candidates and entity neighbours come from (see :mod:`.fact_search`)
        self.fact_search, self.entity_search, self.facts = views.fact_search, views.entity_search, views.facts
        self._fact_row_nodes: dict[int, np.ndarray] = {}
        # passages per entity node = its context edges
        ctx = (graph.kinds & KIND_CONTEXT) > 0
        self.passage_counts = (np.bincount(graph.src[ctx], minlength=graph.num_nodes)
                               + np.bincount(graph.dst[ctx], minlength=graph.num_nodes)).astype(np.float64)
        #: the walk: PPR solved as the PPR section says (its kernel: None with ``ppr_backend="igraph"``)
        self.walk = PPRSolver(ppr, graph, self.passage_nodes)
        self.kernel: PPRKernel | None = self.walk.kernel
        w = self._passage_weight()
        #: the dense prior from the passage store's HNSW index (used with push: :meth:`block_dense`)
        self.ann_dense = AnnDense(views.passage_store, self.passage_mat, w) \
            if views.passage_store is not None and w and config.dense_prior == "auto" else None
        #: what the linking strategy reads of this version (see :class:`.linking.LinkGraph`)
        self.link_graph = LinkGraph(graph, self.entity_search, self.fact_links, self.passage_nodes,
                                    self.passage_counts, config.linking_top_k, self._passage_weight(),
                                    self.seed_sources)
        self._second = None if self.second_hop is None else SecondWalk(self.second_hop, self, hyperedges, extractor)

    def _passage_nodes(self, ids: np.ndarray) -> np.ndarray:
        g = self.graph
        ids = np.asarray(ids, dtype=object)
        seg = g.node_ids[g.num_entities:g.num_entities + len(ids)]
        if len(seg) == len(ids) and (len(ids) == 0 or bool(np.all(seg == ids))):
            return np.arange(g.num_entities, g.num_entities + len(ids), dtype=np.int64)   # same sorted order
        idx = g.index_of
        return np.fromiter((idx[p] for p in ids), np.int64, len(ids))

    @classmethod
    def from_index(cls, config: HippoConfig | RetrievalConfig, index, graph: GraphData | None = None,
                   seed_sources: Sequence[SeedSource] = (), *, exact: bool | None = None,
                   ppr: PPRConfig | None = None) -> Retriever:
        """The retriever of an ``Index``'s current version (``graph``: an augmented graph), with
        the linking of ``config`` resolved for the index's extractor (``ppr``: the PPR section, see
        :class:`Retriever`). On a lazy PostgreSQL reader facts and entities are searched in the database
        (``exact``: exact scans, default ``postgres_search == "exact"`` of the index's config)."""
        ppr = ppr_section(config, ppr)
        config = retrieval_section(config)
        if exact is None:
            exact = index.config.postgres_search == "exact"
        return cls(config, graph if graph is not None else index.graph, reader_views(index, exact),
                   linking=resolve_linking(config, index.extractor), seed_sources=seed_sources,
                   hyperedges=lambda: index.passage_hyperedges, extractor=index.extractor, ppr=ppr)

    # --- scoring --------------------------------------------------------------------------
    def dense_scores(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_passages, n_queries) raw cosine scores (float32), bit-identical whatever the batch."""
        return dense_scores(self.passage_mat, q_pass)

    def top_facts(self, q_fact: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` best facts and their min-max normalised scores, (rows, scores) of
        shape (n_queries, min(k, n_facts)): exact from a matrix (``scoring.top_fact_rows``), or
        from the database (:class:`.fact_search.StoreSearch`)."""
        return self.fact_search.top_normalised(q_fact, k)

    def fact_scores(self, q_fact: np.ndarray) -> np.ndarray:
        """(n_facts, n_queries) min-max normalised scores of every fact (not on the query path;
        needs the fact matrix in memory)."""
        if self.fact_mat is None:
            raise ValueError("fact_scores needs the fact vectors in memory (postgres_search='memory')")
        q = np.atleast_2d(np.asarray(q_fact, dtype=np.float32))
        if len(self.fact_mat) == 0:
            return np.zeros((0, q.shape[0]))
        out = np.empty((len(self.fact_mat), q.shape[0]), np.float32)
        for s, e in row_blocks(len(self.fact_mat)):
            out[s:e] = row_scores(self.fact_mat, s, e, q).T
        return min_max(out, axis=0)

    def dense_rank(self, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best passage rows by dense score and their min-max normalised scores (the
        one dense ranking: the ``naive`` mode and HippoRAG 2's fallback)."""
        order = top_k(scores, k)
        return order, min_max(scores)[order]

    # --- linking and seeding (see :class:`.linking.LinkGraph`) --------------------------------
    def link_entities(self, vectors: np.ndarray, per_vector: int) -> list[tuple[int, float]]:
        """Each vector linked to its ``per_vector`` nearest entity nodes by cosine."""
        return self.link_graph.link_entities(vectors, per_vector)

    def _passage_weight(self) -> float | None:
        return self.config.passage_node_weight if self.config.use_passage_nodes else None

    def reset_vector(self, linked: Sequence[tuple[int, float]], dense: np.ndarray
                     ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """One query's reset vector (entity seeds + passage seeds) and its seeds, best first."""
        return self.link_graph.reset_vector(linked, dense)

    def reset_matrix(self, query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, dense: np.ndarray,
                     cols: Rows) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
        """Reset vectors of several queries at once, (n_nodes, len(cols)); see
        ``seeding.reset_matrix`` (seed sources are not applied here)."""
        return self.link_graph.reset_matrix(query, nodes, scores, dense, cols)

    # --- graph search ------------------------------------------------------------------------
    def block_dense(self, q_pass: np.ndarray, k: int, ann: bool) -> tuple[np.ndarray, list | None]:
        """Dense scores (n_passages, b) of a block and, where they came from the passage store's
        HNSW index (``ann`` allowed, push in use; see :mod:`.ann_prior`), each column's ``AnnPrior``."""
        if ann and self.ann_dense is not None and self.uses_push:
            head = max(self.config.dense_prior_head, self.ppr.ppr_push_head, k)
            return self.ann_dense.block(q_pass, head, k, self.dense_scores)
        return self.dense_scores(q_pass), None

    def run_ppr(self, resets: np.ndarray, priors: list | None = None) -> np.ndarray:
        """PPR for reset columns (n_nodes, b); returns passage scores (n_passages, b) by store row.
        ``priors``: per column, the ``AnnPrior`` of its passage prior (push only; None: exact)."""
        return self.walk.run(resets, priors)

    @property
    def pusher(self) -> PushPPR:
        """The forward-push solver on this version's kernel (built on first use)."""
        return self.walk.pusher

    @property
    def uses_push(self) -> bool:
        """Whether PPR runs by forward push (``ppr_solver``; "auto": from ``ppr_push_min_nodes`` nodes)."""
        return self.walk.uses_push

    # --- the whole query path ----------------------------------------------------------------
    def search(self, queries: Sequence[str], q_fact: np.ndarray, q_pass: np.ndarray, k: int,
               filter_many: FilterMany | None = None, ner_vectors: Sequence[np.ndarray | None] | None = None,
               explain: bool = False, restriction: Restriction | None = None) -> tuple[list[RawResult], dict]:
        """Rank passages for a batch of encoded queries (HippoRAG 2 retrieval).

        ``q_fact``/``q_pass``: (b, dim) query vectors for fact and passage matching.
        ``filter_many(questions, candidate lists) -> kept lists`` is the recognition filter,
        called once for all queries that have candidate facts (None: keep all candidates).
        ``ner_vectors[j]``: embeddings of query j's NER entities (linkings that ``needs_ner``).
        Queries run in blocks of ``query_batch_size``. ``explain``: each result keeps its
        ``trace`` (reset vector, dense and PPR scores; the ranking is the same, except where the prior
        would come from the HNSW index: an explained block scores every passage). ``restriction``: a
        metadata filter's (:mod:`.filtering`): candidate facts, entity links and seeds come from
        allowed passages only and the ranking keeps allowed passages. Returns the results and a
        timing breakdown in seconds.
        """
        tim = {"scoring": 0.0, "filter": 0.0, "seeding": 0.0, "ppr": 0.0}
        t0 = time.perf_counter()
        sources = self.seed_sources if restriction is None else []
        extra = [src.score(q_pass) for src in sources]    # (n_items, b) per source
        q_fact = np.atleast_2d(np.asarray(q_fact))
        q_pass = np.atleast_2d(np.asarray(q_pass))
        results = [RawResult() for _ in queries]
        bs = self.block_size()
        spans = [(s, min(len(queries), s + bs)) for s in range(0, len(queries), bs)]
        cands: list[tuple[np.ndarray, np.ndarray]] = []
        kept: list[np.ndarray] = []
        tops: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(spans)
        if self.linking.scores_facts:
            n_cand = self.linking.candidate_count(filter_many is not None)
            # one search serves the first walk's candidates and the second walk's sentences (their first
            # n_cand columns are exactly the n_cand best: same scores, same ties)
            n_top = max(n_cand, self._second.facts_needed if self._second is not None else 0)
            found = [self.top_facts(q_fact[s:e], n_top) if restriction is None else
                     restriction.fact_search.top_normalised(q_fact[s:e], n_top) for s, e in spans]
            cands = [(rows[:, :n_cand], scores[:, :n_cand]) for rows, scores in found]
            tops = list(found)
            tim["scoring"] += time.perf_counter() - t0
            kept = self._filter(queries, spans, cands, results, filter_many, tim)
        for n, (s, e) in enumerate(spans):
            tb = time.perf_counter()
            dense, ann = self.block_dense(q_pass[s:e], k, restriction is None and not explain)
            block = Block(s, e, q_fact[s:e], dense, cands[n] if cands else None, kept[n] if cands else None,
                          None if ner_vectors is None else list(ner_vectors[s:e]),
                          [scores[:, s:e] for scores in extra], ann)
            tim["scoring"] += time.perf_counter() - tb
            self._search_block(block, k, results, tim, explain, restriction, tops[n])
        tim["total"] = time.perf_counter() - t0
        return results, tim

    def block_size(self) -> int:
        """Queries per block: ``query_batch_size``, fewer on a graph whose dense per-query arrays would pass
        ``BLOCK_BYTES`` (a query's scores do not depend on its block)."""
        fit = BLOCK_BYTES // max(1, NODE_BYTES_PER_QUERY * self.graph.num_nodes)
        return max(1, min(self.config.query_batch_size, fit))

    def _filter(self, queries, blocks, cands, results, filter_many, tim) -> list[np.ndarray]:
        """Candidate and kept facts of every query; kept masks per block (:func:`.kept_facts.kept_masks`)."""
        return kept_masks(self, queries, blocks, cands, results, filter_many, tim)

    def _search_block(self, block: Block, k: int, results: list[RawResult], tim: dict, explain: bool = False,
                      restriction: Restriction | None = None, top: tuple | None = None) -> None:
        """Link, seed and walk one block; a query that reaches no entity gets the dense ranking
        (``top``: the block's best facts, for the second walk)."""
        t1 = time.perf_counter()
        dense = block.dense
        g = self.link_graph if restriction is None else restriction.link_graph(self.link_graph)
        if restriction is not None:
            block.dense = restriction.seed_dense(dense)     # passage seeds from allowed passages only
        links = self.linking.links(g, block)
        has_link = links.linked(block.size)
        graph_cols = np.flatnonzero(has_link)
        self._fallback(block.s, np.flatnonzero(~has_link), dense, k, results, restriction)
        priors = block.priors(graph_cols)
        table, R = self._seed(g, links, block, graph_cols, priors, results, restriction, explain) \
            if len(graph_cols) else (None, None)
        t2 = time.perf_counter()
        tim["seeding"] += t2 - t1
        block.dense = dense
        walks: dict[str, Any] = {}
        probs = None
        if len(graph_cols):
            probs = self._walk(g, block, graph_cols, (table, R, priors), links, restriction, walks, top)
            self._rank(probs, dense, graph_cols, block.s, k, results, restriction)
        tim["ppr"] += time.perf_counter() - t2
        if explain:
            keep_trace(block, results, graph_cols, R, probs, walks, self.second_hop, self.dense_agree, restriction,
                       self.fusion)

    def _fallback(self, s: int, cols: np.ndarray, dense: np.ndarray, k: int, results: list[RawResult],
                  restriction: Restriction | None) -> None:
        """The dense ranking for the block's queries ``cols`` (they reached no entity; ``s``: the block's start)."""
        for j in cols.tolist():
            results[s + j].used_fallback = True
            results[s + j].order, results[s + j].scores = self.dense_rank(dense[:, j], k) if restriction is None \
                else restriction.dense_rank(self, dense[:, j], k)

    def _seed(self, g: LinkGraph, links: Links, block: Block, cols: np.ndarray, priors: list | None,
              results: list[RawResult], restriction: Restriction | None, explain: bool
              ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, np.ndarray | None]:
        """The seeds of the block's queries ``cols``, each query's seed entities named in its result: (the seed
        table, None) where the first walk runs by parts (:meth:`_by_parts`), else (None, the reset matrix)."""
        table, R = None, None
        if self._by_parts(priors, g, restriction, explain):
            table, report = self.linking.seed_table(g, links, block, cols)
            seeds = table_seeds(table, len(cols)) if report else None
        else:
            R, seeds = self.linking.resets(g, links, block, cols)
            if restriction is not None:
                restriction.block_seeds(R, self.passage_nodes)
        if seeds is not None:
            self._name_seeds(seeds, cols, block.s, results)
        return table, R

    def _walk(self, g: LinkGraph, block: Block, cols: np.ndarray, seeded: tuple, links: Links,
              restriction: Restriction | None, walks: dict[str, Any], top: tuple | None) -> np.ndarray:
        """The ranking scores (n_passages, len(cols)) of the block's queries ``cols`` from their seeds
        (``seeded``: seed table, reset matrix, priors): the first walk (``walks["first"]``), the second walk
        when there is one, and the one score of :mod:`.second.fusion` when there is one."""
        table, R, priors = seeded
        if table is not None and priors is not None:
            probs = walks["first"] = self.walk.run_table(table, priors)
        else:
            probs = walks["first"] = self.run_ppr(R, priors)
            if self._second is not None:
                probs = self._second.run(g, block, cols, R, probs, links, restriction, walks, top)
        if self.fusion is not None:
            probs = self.fusion.score(probs, block.dense[:, cols], walks["first"] if self._second else None,
                                      None if restriction is None else restriction.blocked_rows)
        return probs

    def _rank(self, probs: np.ndarray, dense: np.ndarray, cols: np.ndarray, s: int, k: int,
              results: list[RawResult], restriction: Restriction | None) -> None:
        """Each walked query's ``k`` best passages by its scores ``probs[:, c]``, after the ``dense_first`` head
        and the ``dense_agree`` rule."""
        head, agree = self.config.dense_first, self.dense_agree
        wide = max(k, agree)        # the top-rank rule sees its ``agree`` ranks whatever k is: k is a cut
        for c, j in enumerate(cols.tolist()):
            if restriction is not None:
                order, scores = restriction.graph_rank(probs[:, c], dense[:, j], head, wide)
                order, scores = dense_agree(order, scores, restriction.masked(dense[:, j]), agree)
            else:
                order = top_k(probs[:, c], wide)
                order, scores = dense_first(order, probs[order, c], dense[:, j], head, wide)
                order, scores = dense_agree(order, scores, dense[:, j], agree)
            results[s + j].order, results[s + j].scores = order[:k], scores[:k]

    def _by_parts(self, priors: list | None, g: LinkGraph, restriction: Restriction | None, explain: bool) -> bool:
        """Whether the first walk runs from the seed table and the index's priors alone (no reset matrix:
        ``push_ann.run_seed_table``): every prior from the index, one walk, no seed source, filter or trace."""
        return (priors is not None and all(p is not None for p in priors) and self._second is None
                and not g.seed_sources and restriction is None and not explain and self.uses_push)

    def _name_seeds(self, seeds: list, cols: np.ndarray, s: int, results: list[RawResult]) -> None:
        """Each query's seed entities as (name, weight)."""
        ids = self.graph.node_ids
        keys = list(dict.fromkeys(ids[n] for c in range(len(cols)) for n, _ in seeds[c]))
        name_of = dict(zip(keys, self.entity_texts(keys), strict=True))
        for c, j in enumerate(cols.tolist()):
            results[s + j].seed_entities = [(name_of[ids[n]], float(w)) for n, w in seeds[c]]
