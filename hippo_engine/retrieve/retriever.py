"""HippoRAG 2 retrieval (paper section 3): the ``Retriever`` orchestrating scoring, the
recognition filter, seeding and Personalized PageRank for batches of queries.

The math lives in pure functions: :mod:`~hippo_engine.retrieve.scoring` (min-max, top-k, exact
dot products, matrix scans), :mod:`~hippo_engine.retrieve.seeding` (entity and passage seeds,
reset vectors) and :mod:`~hippo_engine.retrieve.ppr` (the PPR kernel). ``Retriever`` holds the
matrices and the PPR kernel of one index version and runs queries in blocks of
``query_batch_size``: one matrix product scores all facts (and one scan all passages) for a
block, the recognition filter sees every query's candidates in one call, the seeds of a block are
built with array operations, and one batched PPR run ranks the passages of every query of the
block that reached the graph. Extra seed sources (:class:`~hippo_engine.retrieve.seeding.SeedSource`,
e.g. HiRAG's community nodes) add their own reset weights.

Determinism: a query's ranking and scores are bit-identical whether it runs alone or in any
batch (see :mod:`~hippo_engine.retrieve.scoring`; the PPR kernel gives bit-identical columns
whatever the batch).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Triple
from hippo_engine.index.graph import KIND_CONTEXT, GraphData
from hippo_engine.retrieve import seeding
from hippo_engine.retrieve.fact_search import FactLookup, FactRows, MatrixSearch, StoreSearch
from hippo_engine.retrieve.ppr import PPRKernel
from hippo_engine.retrieve.scoring import (  # noqa: F401 - min_max, top_k and dense_column re-exported
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
from hippo_engine.retrieve.seeding import SeedSource, entity_seed_table, entity_seeds, passage_seeds  # noqa: F401

logger = logging.getLogger(__name__)

#: ``filter_many(questions, candidate fact lists) -> kept fact lists`` (the recognition filter)
FilterMany = Callable[[list[str], list[list[Triple]]], list[list[Triple]]]


@dataclass
class RawResult:
    """One query's ranking as passage store rows, plus what the graph search used."""

    order: np.ndarray = None     # passage rows, best first (top k)
    scores: np.ndarray = None
    candidate_facts: list = field(default_factory=list)
    kept_facts: list = field(default_factory=list)
    seed_entities: list = field(default_factory=list)   # [(phrase, weight)]
    used_fallback: bool = False


class Retriever(FactRows):
    """Query-time view of one index version. Build it once; it is invalid after index/delete.

    ``fact_triples``: fact id -> the triple shown for it (candidate and kept facts, the
    recognition filter); ``fact_entities``: fact id -> the normalised entities it links (a
    triple's subject and object, a hyperedge's entities; default: from ``fact_triples``).
    ``graph`` may hold nodes after the entity and passage nodes (e.g. HiRAG community nodes, see
    ``hirag.seeds.augment_graph``), which ``seed_sources`` seed. :meth:`from_index` builds one
    from an ``Index``."""

    def __init__(self, config: HippoConfig, graph: GraphData, passage_ids: np.ndarray, passage_mat: np.ndarray,
                 fact_ids: np.ndarray, fact_mat: np.ndarray | None, entity_ids: np.ndarray | None,
                 entity_mat: np.ndarray | None, entity_text: Callable[[str], str],
                 fact_triples: Mapping[str, Triple] | None,
                 fact_entities: Mapping[str, Sequence[str]] | None = None, *,
                 seed_sources: Sequence[SeedSource] = (), linking: str | None = None,
                 fact_search: MatrixSearch | StoreSearch | None = None,
                 entity_search: MatrixSearch | StoreSearch | None = None, facts: FactLookup | None = None,
                 entity_texts: Callable[[Sequence[str]], list[str]] | None = None):
        self.config = config
        #: the linking in effect (``config.linking`` with ``"auto"`` resolved; see ``from_index``)
        self.linking = linking or (config.linking if config.linking != "auto" else "fact")
        if config.ppr_dtype == "float32" and config.ppr_backend == "power" and config.ppr_tol < 1e-7:
            logger.warning("ppr_tol=%g is below what float32 PPR can reach (about 1e-7): every query will run "
                           "ppr_max_iter=%d steps; use ppr_dtype='float64' for tight tolerances",
                           config.ppr_tol, config.ppr_max_iter)
        self.graph = graph
        self.seed_sources = list(seed_sources)
        self.passage_mat, self.fact_mat, self.entity_mat = passage_mat, fact_mat, entity_mat
        self.entity_ids = entity_ids
        #: fact ids by row: an object array, or a bytes array (``S``) on a lazy PostgreSQL reader
        self.fact_ids = fact_ids if getattr(fact_ids, "dtype", None) is not None and fact_ids.dtype.kind == "S" \
            else np.asarray(fact_ids, dtype=object)
        self.passage_nodes = self._nodes_of(passage_ids, entities=False, required=True)
        self.entity_nodes = (self._nodes_of(entity_ids, entities=True, required=False) if entity_ids is not None
                             else np.zeros(0, np.int64))
        self.entity_text = entity_text
        self.entity_texts = entity_texts or (lambda keys: [entity_text(k) for k in keys])
        #: where fact candidates and entity neighbours come from (see :mod:`.facts`)
        self.fact_search = fact_search if fact_search is not None else MatrixSearch(fact_mat)
        self.entity_search = entity_search if entity_search is not None else MatrixSearch(entity_mat)
        self.facts = facts if facts is not None else FactLookup(known=fact_triples, entities=fact_entities)
        self._fact_row_nodes: dict[int, np.ndarray] = {}
        # passages per entity node = its context edges
        ctx = (graph.kinds & KIND_CONTEXT) > 0
        self.passage_counts = (np.bincount(graph.src[ctx], minlength=graph.num_nodes)
                               + np.bincount(graph.dst[ctx], minlength=graph.num_nodes)).astype(np.float64)
        self.kernel = PPRKernel.from_graph(graph, config.ppr_dtype) if config.ppr_backend == "power" else None
        self._igraph = None

    def _nodes_of(self, ids: np.ndarray, entities: bool, required: bool) -> np.ndarray:
        g = self.graph
        ids = np.asarray(ids, dtype=object)
        start = 0 if entities else g.num_entities
        seg = g.node_ids[start:start + len(ids)]
        if len(seg) == len(ids) and (len(ids) == 0 or bool(np.all(seg == ids))):
            return np.arange(start, start + len(ids), dtype=np.int64)   # same sorted order
        idx = g.index_of
        if required:
            return np.fromiter((idx[p] for p in ids), np.int64, len(ids))
        return np.fromiter((idx.get(e, -1) for e in ids), np.int64, len(ids))

    # --- facts -------------------------------------------------------------------------------
    @classmethod
    def from_index(cls, config: HippoConfig, index, graph: GraphData | None = None,
                   seed_sources: Sequence[SeedSource] = ()) -> Retriever:
        """The retriever of an ``Index``'s current version (``graph``: an augmented graph). On a
        lazy PostgreSQL reader (``index.reader_stores`` hold no fact or entity vectors) facts and
        entities are searched in the database (``postgres_search``: ``"hnsw"`` or ``"exact"``)."""
        st = index.reader_stores
        linking = config.linking
        if linking == "auto":
            linking = "ner_fact" if index.extractor == "ner" else "fact"
        graph = graph if graph is not None else index.graph
        if hasattr(st["fact"], "extremes"):
            exact = config.postgres_search == "exact"
            return cls(config, graph, st["passage"].ids, st["passage"].matrix, st["fact"].ids, None, None, None,
                       st["entity"].text, None, seed_sources=seed_sources, linking=linking,
                       fact_search=StoreSearch(st["fact"], exact), entity_search=StoreSearch(st["entity"], exact),
                       facts=FactLookup(fetch=index.db.facts_of), entity_texts=_names_of(st["entity"]))
        known = index.fact_hyperedges if index.passage_hyperedges else index.fact_triples
        return cls(config, graph, st["passage"].ids, st["passage"].matrix, st["fact"].ids, st["fact"].matrix,
                   st["entity"].ids, st["entity"].matrix, st["entity"].text, known, seed_sources=seed_sources,
                   linking=linking, entity_texts=st["entity"].texts)

    # --- scoring --------------------------------------------------------------------------
    def dense_scores(self, q_pass: np.ndarray) -> np.ndarray:
        """(n_passages, n_queries) raw cosine scores (float32), bit-identical whatever the batch."""
        return dense_scores(self.passage_mat, q_pass)

    def top_facts(self, q_fact: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's ``k`` best facts and their min-max normalised scores, (rows, scores) of
        shape (n_queries, min(k, n_facts)): exact from a matrix (``scoring.top_fact_rows``), or
        from the database (:class:`.facts.StoreSearch`)."""
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
        """The ``k`` best passage rows by dense score and their min-max normalised scores."""
        order = top_k(scores, k)
        return order, min_max(scores)[order]

    # --- linking ---------------------------------------------------------------------------
    def _nearest_entities(self, vectors: np.ndarray, per_vector: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each vector's ``per_vector`` nearest entities as (graph nodes, -1 if not in the graph;
        cosine scores), best first, from the matrix or from the database."""
        search = self.entity_search
        if isinstance(search, StoreSearch):
            return [(self.graph.node_index(ids, entities=True), sims)
                    for ids, sims in search.nearest_ids(vectors, per_vector)]
        return [(self.entity_nodes[rows], sims) for rows, sims in search.nearest(vectors, per_vector)]

    def link_entities(self, vectors: np.ndarray, per_vector: int) -> list[tuple[int, float]]:
        """Each vector linked to its ``per_vector`` nearest entity nodes by cosine."""
        if len(self.entity_search) == 0 or vectors is None or len(vectors) == 0:
            return []
        linked = []
        for nodes, sims in self._nearest_entities(vectors, per_vector):
            for n, w in zip(nodes.tolist(), np.asarray(sims).tolist(), strict=True):
                if n >= 0:
                    linked.append((int(n), float(max(w, 0.0))))
        return linked

    # --- graph search ------------------------------------------------------------------------
    def _passage_weight(self) -> float | None:
        return self.config.passage_node_weight if self.config.use_passage_nodes else None

    def reset_vector(self, linked: Sequence[tuple[int, float]], dense: np.ndarray
                     ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """One query's reset vector (entity seeds + passage seeds) and its seeds, best first."""
        return seeding.reset_vector(linked, dense, self.passage_nodes, self.passage_counts, self.graph.num_nodes,
                                    self.config.linking_top_k, self._passage_weight())

    def reset_matrix(self, query: np.ndarray, nodes: np.ndarray, scores: np.ndarray, dense: np.ndarray,
                     cols: Sequence[int]) -> tuple[np.ndarray, list[list[tuple[int, float]]]]:
        """Reset vectors of several queries at once, (n_nodes, len(cols)); see
        ``seeding.reset_matrix`` (seed sources are not applied here)."""
        return seeding.reset_matrix(query, nodes, scores, dense, cols, self.passage_nodes, self.passage_counts,
                                    self.graph.num_nodes, self.config.linking_top_k, self._passage_weight())

    def run_ppr(self, resets: np.ndarray) -> np.ndarray:
        """PPR for reset columns (n_nodes, b); returns passage scores (n_passages, b) by store row."""
        cfg = self.config
        if cfg.ppr_backend == "igraph":
            if self._igraph is None:
                self._igraph = self.graph.to_igraph()
            cols = [np.array(self._igraph.personalized_pagerank(
                damping=cfg.damping, directed=False, weights="weight", reset=resets[:, j].tolist(),
                implementation="prpack")) for j in range(resets.shape[1])]
            probs = np.column_stack(cols) if cols else np.zeros((self.graph.num_nodes, 0))
        else:
            probs = self.kernel.run(resets, cfg.damping, cfg.ppr_tol, cfg.ppr_max_iter, cfg.ppr_method,
                                    cfg.ppr_block_size)
        return probs[self.passage_nodes]

    # --- the whole query path ----------------------------------------------------------------
    def search(self, queries: Sequence[str], q_fact: np.ndarray, q_pass: np.ndarray, k: int,
               filter_many: FilterMany | None = None, ner_vectors: Sequence[np.ndarray] | None = None
               ) -> tuple[list[RawResult], dict]:
        """Rank passages for a batch of encoded queries (HippoRAG 2 retrieval).

        ``q_fact``/``q_pass``: (b, dim) query vectors for fact and passage matching.
        ``filter_many(questions, candidate lists) -> kept lists`` is the recognition filter,
        called once for all queries that have candidate facts (None: keep all candidates).
        ``ner_vectors[j]``: embeddings of query j's NER entities (``linking="ner"``). Queries
        run in blocks of ``query_batch_size``. Returns the results and a timing breakdown in
        seconds.
        """
        cfg = self.config
        tim = {"scoring": 0.0, "filter": 0.0, "seeding": 0.0, "ppr": 0.0}
        t0 = time.perf_counter()
        extra = [src.score(q_pass) for src in self.seed_sources]    # (n_items, b) per source
        q_fact = np.atleast_2d(np.asarray(q_fact))
        q_pass = np.atleast_2d(np.asarray(q_pass))
        results = [RawResult() for _ in queries]
        bs = cfg.query_batch_size
        blocks = [(s, min(len(queries), s + bs)) for s in range(0, len(queries), bs)]
        cands: list[tuple[np.ndarray, np.ndarray]] = []
        if self.linking in ("fact", "ner_fact"):
            n_cand = cfg.linking_top_k if self.linking == "fact" or filter_many is not None else cfg.ner_fact_top_k
            for s, e in blocks:
                cands.append(self.top_facts(q_fact[s:e], n_cand))
            tim["scoring"] += time.perf_counter() - t0
            kept_masks = self._filter(queries, blocks, cands, results, filter_many, tim)
        for n, (s, e) in enumerate(blocks):
            self._search_block(s, e, q_fact, q_pass, k, cands[n] if cands else None,
                               kept_masks[n] if cands else None, extra,
                               None if ner_vectors is None else list(ner_vectors[s:e]), results, tim)
        tim["total"] = time.perf_counter() - t0
        return results, tim

    def _filter(self, queries, blocks, cands, results, filter_many, tim) -> list[np.ndarray]:
        """Candidate and kept facts of every query (one ``filter_many`` call); kept masks per block.
        A padded slot (row -1) or a fact deleted since a lazy reader's view is no candidate."""
        masks, slots, asked, asked_cands = [], [], [], []
        every = np.unique(np.concatenate([rows.ravel() for rows, _ in cands] or [np.zeros(0, np.int64)]))
        self.facts.prefetch([self._fid(r) for r in every[every >= 0].tolist()])
        for (s, _), (rows, _) in zip(blocks, cands, strict=True):
            valid = rows >= 0
            for r in np.unique(rows[valid]).tolist():
                if not self.facts.has(self._fid(r)):
                    valid &= rows != r
            masks.append(valid.copy())
            triples = {r: self.fact_triple(r) for r in np.unique(rows[valid]).tolist()}
            for j, row in enumerate(rows.tolist()):
                slots.append(np.flatnonzero(valid[j]))
                results[s + j].candidate_facts = [triples[r] for r, ok in zip(row, valid[j], strict=True) if ok]
                if filter_many is not None and results[s + j].candidate_facts:
                    asked.append(s + j)
                    asked_cands.append(results[s + j].candidate_facts)
        starts = [s for s, _ in blocks]
        if asked:
            tf = time.perf_counter()
            kept = filter_many([queries[i] for i in asked], asked_cands)
            tim["filter"] += time.perf_counter() - tf
            for i, keep in zip(asked, kept, strict=True):
                n = int(np.searchsorted(starts, i, side="right")) - 1
                keep = set(keep)
                masks[n][i - starts[n], slots[i]] = [t in keep for t in results[i].candidate_facts]
        for (s, _), mask in zip(blocks, masks, strict=True):
            for j, m in enumerate(mask):
                res = results[s + j]
                res.kept_facts = [t for t, ok in zip(res.candidate_facts, m[slots[s + j]], strict=True) if ok]
        return masks

    def _search_block(self, s, e, q_fact, q_pass, k, cand, kept_mask, extra, ner_vectors, results, tim) -> None:
        cfg = self.config
        b = e - s
        t0 = time.perf_counter()
        dense = self.dense_scores(q_pass[s:e])
        t1 = time.perf_counter()
        tim["scoring"] += t1 - t0
        # links: one row per (query, fact or vector, entity)
        ner_table = None
        if self.linking == "ner_fact":
            ner_table = self._ner_table(ner_vectors, b)
        if self.linking in ("fact", "ner_fact"):
            cand_rows, cand_scores = cand
            qq, cc = np.nonzero(kept_mask)
            rows = cand_rows[qq, cc]
            lengths, ln = self.fact_links(rows)
            lq = np.repeat(qq, lengths)
            ls = np.repeat(cand_scores[qq, cc], lengths)
            ok = ln >= 0
            lq, ln, ls = lq[ok], ln[ok], ls[ok]
        else:
            lq, ln, ls = [], [], []
            for j in range(b):
                if self.linking == "query":
                    linked = self.link_entities(q_fact[s + j:s + j + 1], cfg.linking_top_k)
                else:
                    vecs = ner_vectors[j] if ner_vectors is not None else None
                    linked = self.link_entities(vecs, 1) if vecs is not None and len(vecs) else []
                lq += [j] * len(linked)
                ln += [n for n, _ in linked]
                ls += [w for _, w in linked]
            lq, ln, ls = np.array(lq, np.int64), np.array(ln, np.int64), np.array(ls, np.float64)
        has_link = np.zeros(b, bool)
        has_link[lq] = True
        if ner_table is not None:
            has_link[ner_table[0]] = True
        graph_cols = np.flatnonzero(has_link)
        for j in np.flatnonzero(~has_link).tolist():
            results[s + j].used_fallback = True
            results[s + j].order, results[s + j].scores = self.dense_rank(dense[:, j], k)
        if len(graph_cols) and ner_table is not None:
            R, seeds = self._hybrid_reset(lq, ln, ls, ner_table, dense, graph_cols)
        elif len(graph_cols):
            R, seeds = self.reset_matrix(lq, ln, ls, dense, graph_cols)
            for src, scores in zip(self.seed_sources, extra, strict=True):
                src.add_seeds(R, scores[:, s:e], graph_cols)
            ids = self.graph.node_ids
            names = self.entity_texts(list(dict.fromkeys(ids[n] for c in range(len(graph_cols)) for n, _ in seeds[c])))
            name_of = dict(zip(dict.fromkeys(ids[n] for c in range(len(graph_cols)) for n, _ in seeds[c]), names,
                               strict=True))
            for c, j in enumerate(graph_cols.tolist()):
                results[s + j].seed_entities = [(name_of[ids[n]], float(w)) for n, w in seeds[c]]
        t2 = time.perf_counter()
        tim["seeding"] += t2 - t1
        if len(graph_cols):
            probs = self.run_ppr(R)
            for c, j in enumerate(graph_cols.tolist()):
                order = top_k(probs[:, c], k)
                results[s + j].order, results[s + j].scores = dense_first(
                    order, probs[order, c], dense[:, j], cfg.dense_first, k)
        tim["ppr"] += time.perf_counter() - t2


    def _ner_table(self, ner_vectors, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Seed table (query j, node, weight) of the block's query NER entities: each entity
        vector linked to its nearest entity node (one scan of the entity store for the block)."""
        vecs = [np.atleast_2d(v) for v in (ner_vectors or []) if v is not None and len(v)]
        owner = [j for j, v in enumerate(ner_vectors or []) if v is not None and len(v) for _ in range(len(v))]
        if not vecs or len(self.entity_search) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        found = self._nearest_entities(np.concatenate(vecs), 1)
        has = np.array([len(n) > 0 for n, _ in found], bool)
        nodes = np.array([int(n[0]) if len(n) else -1 for n, _ in found], np.int64)
        sims = np.array([float(w[0]) if len(w) else 0.0 for _, w in found])
        ok = (nodes >= 0) & has
        return seeding.ner_seed_table(np.asarray(owner, np.int64)[ok], nodes[ok], sims[ok], self.passage_counts)

    def _hybrid_reset(self, lq, ln, ls, ner_table, dense, cols) -> tuple[np.ndarray, list]:
        """``ner_fact`` linking: the facts' entity seeds (HippoRAG 2's rule, ``linking_top_k``
        kept) and the NER entity seeds, the larger weight per entity; then passage seeds."""
        fact_table = entity_seed_table(lq, ln, ls, self.passage_counts, self.config.linking_top_k)
        q, n, w = seeding.max_merge(fact_table, ner_table)
        pos = np.full(dense.shape[1], -1, np.int64)
        pos[cols] = np.arange(len(cols))
        sel = pos[q] >= 0
        q, n, w = pos[q[sel]], n[sel], w[sel]
        order = np.lexsort((n, -w, q))    # per column, best first (ties: lower node)
        return seeding.reset_matrix_from_seeds((q[order], n[order], w[order]), dense, cols, self.passage_nodes,
                                               self.graph.num_nodes, self._passage_weight())


def _names_of(store) -> Callable[[Sequence[str]], list[str]]:
    """Entity names from a lazy store; an entity deleted since the reader's view shows its id."""
    def names(keys: Sequence[str]) -> list[str]:
        found = store.texts_found(keys)
        return [found.get(k, k) for k in keys]
    return names


def encode_queries(encoder, queries: Sequence[str], config: HippoConfig) -> tuple[np.ndarray, np.ndarray]:
    """(fact-matching, passage-matching) query vectors, with the configured query instructions
    (one encoding when both instructions are the same)."""
    q_fact = encoder.encode(queries, instruction=config.query_instruction_fact)
    if config.query_instruction_passage == config.query_instruction_fact:
        return q_fact, q_fact
    return q_fact, encoder.encode(queries, instruction=config.query_instruction_passage)
