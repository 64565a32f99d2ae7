"""``HippoRAG``: the thin facade over the index, retrieval and QA modules."""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hippo_engine.config import HippoConfig
from hippo_engine.index.chunking import chunk_text
from hippo_engine.index.openie import OpenIE, OpenIEError, OpenIEResult, load_openie_file, save_openie_file
from hippo_engine.index.pipeline import Index
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.text import mdhash_id

logger = logging.getLogger(__name__)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


class HippoRAG:
    """Long-term memory for LLM applications, HippoRAG 2 style.

    ``HippoRAG(save_dir)`` opens (or creates) an index in ``save_dir`` with the offline default
    models: the packaged Qwen2.5-Coder-0.5B-Instruct for OpenIE, filtering and reading, and
    all-MiniLM-L6-v2 for embeddings. Pass ``llm_model_name`` / ``embedding_model_name`` (and
    ``llm_base_url=...`` for an OpenAI-compatible server) to use others. Keyword overrides are
    ``HippoConfig`` field names: ``HippoRAG(dir, use_filter=False, damping=0.5)``.

    Models are loaded lazily, on first use: opening an index to read statistics costs nothing.
    """

    def __init__(self, save_dir: str | Path, llm_model_name: str | None = None,
                 embedding_model_name: str | None = None, config: HippoConfig | None = None,
                 *, llm: LLMClient | None = None, encoder: Encoder | None = None, **overrides):
        config = config or HippoConfig()
        if overrides:
            config = config.replace(**overrides)
        self.config = config
        self.save_dir = Path(save_dir)
        self.save_dir.mkdir(parents=True, exist_ok=True)
        from hippo_engine.models.assets import DEFAULT_EMBEDDER
        try:
            from hippo_engine.models.assets import DEFAULT_LLM
        except ImportError:  # pragma: no cover
            DEFAULT_LLM = "Qwen2.5-Coder-0.5B-Instruct"
        self.llm_model_name = llm_model_name or (llm.model_name if llm is not None else DEFAULT_LLM)
        self.embedding_model_name = embedding_model_name or (encoder.name if encoder is not None else DEFAULT_EMBEDDER)
        self._llm = llm
        self._encoder = encoder
        self.index_state = Index(self.save_dir, config, lambda: self.encoder, self.embedding_model_name)
        self.openie_path = self.save_dir / f"openie_results_ner_{_safe_name(self.llm_model_name)}.json"
        self._openie: dict[str, OpenIEResult] = load_openie_file(self.openie_path) if self.openie_path.exists() else {}
        self._retriever = None

    # ------------------------------------------------------------------ models
    @property
    def llm(self) -> LLMClient:
        if self._llm is None:
            from hippo_engine.llm.factory import make_llm
            self._llm = make_llm(self.llm_model_name, self.config, cache_dir=self.save_dir)
        return self._llm

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from hippo_engine.models.encoder import TransformersEncoder
            cfg = self.config
            self._encoder = TransformersEncoder(self.embedding_model_name, batch_size=cfg.embedding_batch_size,
                                                dtype=cfg.embedding_dtype, max_length=cfg.embedding_max_length,
                                                num_workers=cfg.embedding_num_workers)
        return self._encoder

    # ------------------------------------------------------------------ documents
    def _passages(self, docs: Sequence[str], *, what: str) -> dict[str, str]:
        """Validate documents and turn them into ``{chunk_id: passage}`` (chunked if asked)."""
        if isinstance(docs, str) or not isinstance(docs, (list, tuple)):
            raise TypeError(f"{what}() takes a list of strings, got {type(docs).__name__}")
        bad = [i for i, d in enumerate(docs) if not isinstance(d, str)]
        if bad:
            raise TypeError(f"{what}(): documents must be strings; items {bad[:10]} are not")
        blank = [i for i, d in enumerate(docs) if not d.strip()]
        if blank:
            logger.warning("%s(): skipping %d empty or whitespace-only document(s) at positions %s",
                           what, len(blank), blank[:10])
        out: dict[str, str] = {}
        tokenizer = None
        if self.config.chunk_size:
            tokenizer = getattr(self.encoder, "tokenizer", None)
        for d in docs:
            if not d.strip():
                continue
            pieces = (chunk_text(d, self.config.chunk_size, self.config.chunk_overlap, tokenizer)
                      if self.config.chunk_size else [d])
            for p in pieces:
                out.setdefault(mdhash_id(p, "chunk-"), p)
        dup = sum(1 for d in docs if d.strip()) - len(out) if not self.config.chunk_size else 0
        if dup > 0:
            logger.info("%s(): %d duplicate document(s) collapsed", what, dup)
        return out

    def import_openie(self, path: str | Path) -> int:
        """Seed OpenIE results from a file (reference or HippoRAG v1 format). Returns how many
        passages it covers. Passages indexed later use these results instead of the LLM."""
        loaded = load_openie_file(path)
        self._openie.update(loaded)
        save_openie_file(self.openie_path, self._openie.values())
        logger.info("imported OpenIE results for %d passages from %s", len(loaded), path)
        return len(loaded)

    def index(self, docs: Sequence[str]) -> dict:
        """Add documents to the memory. Re-indexing a document already present is a no-op.

        Passages with no OpenIE result yet go to the LLM (results are saved as they come, so a
        crash loses no LLM work). If the LLM fails for some passages, the others are indexed,
        and ``OpenIEError`` is raised afterwards naming the failed ones; rerun to retry them.
        Returns a report with counts and per-stage timings.
        """
        t0 = time.perf_counter()
        passages = self._passages(docs, what="index")
        if not passages:
            logger.warning("index(): nothing to index")
            return {"added": 0}
        new = {k: v for k, v in passages.items() if not self.index_state.has_passage(k)}
        if not new:
            return {"added": 0}
        missing = {k: v for k, v in new.items() if k not in self._openie}
        failed: dict[str, str] = {}
        t1 = time.perf_counter()
        if missing:
            logger.info("running OpenIE on %d passage(s) with %s", len(missing), self.llm_model_name)
            extractor = OpenIE(self.llm, max_new_tokens=self.config.max_new_tokens,
                               show_progress=self.config.show_progress)
            results, failed = extractor.run(missing)
            self._openie.update(results)
            save_openie_file(self.openie_path, self._openie.values())
        t2 = time.perf_counter()
        ok = {k: v for k, v in new.items() if k in self._openie}
        report = self.index_state.add(ok, {k: self._openie[k].triples for k in ok})
        self._retriever = None
        report["timings"] = {"openie": t2 - t1, **self.index_state.timings, "total": time.perf_counter() - t0}
        report["openie_llm_passages"] = len(missing)
        if failed:
            raise OpenIEError(f"OpenIE failed for {len(failed)} of {len(new)} new passage(s); the other "
                              f"{len(ok)} were indexed. Run index() again to retry. First error: "
                              f"{next(iter(failed.values()))}", failed)
        return report

    def delete(self, docs: Sequence[str]) -> dict:
        """Remove documents; the index becomes exactly as if they had never been added."""
        passages = self._passages(docs, what="delete")
        report = self.index_state.remove(passages)
        if report["removed"] < len(passages):
            logger.warning("delete(): %d of %d document(s) were not in the index",
                           len(passages) - report["removed"], len(passages))
        self._retriever = None
        return report

    # ------------------------------------------------------------------ retrieval
    def _get_retriever(self):
        if self._retriever is None and self.config.use_community_nodes:
            from hippo_engine.hirag.modes import community_retriever  # HiRAG summary nodes (hirag.py)
            self._retriever = community_retriever(self)
        if self._retriever is None:
            from hippo_engine.retrieve.retriever import Retriever
            st = self.index_state.stores
            self._retriever = Retriever(self.config, self.index_state.graph, st["passage"].ids, st["passage"].matrix,
                                        st["fact"].ids, st["fact"].matrix, st["entity"].ids, st["entity"].matrix,
                                        st["entity"].text, self.index_state.passage_triples)
        return self._retriever

    def _encode_queries(self, queries: list[str]):
        cfg = self.config
        q_fact = self.encoder.encode(queries, instruction=cfg.query_instruction_fact)
        if cfg.query_instruction_passage == cfg.query_instruction_fact:
            return q_fact, q_fact
        return q_fact, self.encoder.encode(queries, instruction=cfg.query_instruction_passage)

    @property
    def recognition_filter(self):
        if getattr(self, "_filter", None) is None:
            from hippo_engine.retrieve.recognition import RecognitionFilter
            self._filter = RecognitionFilter(self.llm, self.config.filter_program_path,
                                             self.config.max_filtered_facts)
        return self._filter

    def _check_queries(self, queries, what: str) -> list[str]:
        if isinstance(queries, str) or not isinstance(queries, (list, tuple)):
            raise TypeError(f"{what}() takes a list of query strings")
        bad = [i for i, q in enumerate(queries) if not isinstance(q, str) or not q.strip()]
        if bad:
            raise ValueError(f"{what}(): queries must be non-empty strings; items {bad[:10]} are not")
        if len(self.index_state) == 0:
            raise RuntimeError(f"{what}(): the index in {self.save_dir} is empty; call index(docs) first")
        return list(queries)

    def _with_metrics(self, solutions, gold_docs, what):
        if gold_docs is None:
            return solutions
        from hippo_engine.evaluation.metrics import recall_at_k
        if len(gold_docs) != len(solutions):
            raise ValueError(f"{what}(): {len(gold_docs)} gold doc lists for {len(solutions)} queries")
        for s, g in zip(solutions, gold_docs, strict=False):
            s.gold_docs = list(g)
        k_list = [k for k in (1, 2, 5, 10, 20, 30, 50, 100, 150, 200) if k <= max(self.config.retrieval_top_k, 1)]
        metrics = recall_at_k([s.docs for s in solutions], [list(g) for g in gold_docs], ks=k_list)
        logger.info("%s recall: %s", what, {k: round(v, 4) for k, v in metrics.items()})
        return solutions, metrics

    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None = None, gold_docs=None,
                 mode: str = "hipporag2", only_need_context: bool = False):
        """HippoRAG 2 retrieval for each query (spec section 2).

        Returns a list of ``QuerySolution`` (passages best first with their PPR scores, plus the
        candidate facts, kept facts, seed entities and whether the dense fallback fired), or
        ``(solutions, metrics)`` with Recall@k when ``gold_docs`` (a list of gold passage lists)
        is given. ``mode`` picks another retriever (``naive``, ``hi_local``, ``hi_global``,
        ``hi_bridge``, ``hi``; see ``hippo_engine.hirag.modes``); ``only_need_context=True`` returns
        each query's assembled context (``hirag.HiContext``) instead.
        """
        if mode != "hipporag2" or only_need_context:
            from hippo_engine.hirag.modes import retrieve_mode
            return retrieve_mode(self, queries, mode, num_to_retrieve=num_to_retrieve, gold_docs=gold_docs,
                                 only_need_context=only_need_context)
        from hippo_engine.qa.reader import QuerySolution
        queries = self._check_queries(queries, "retrieve")
        cfg = self.config
        k = num_to_retrieve or cfg.retrieval_top_k
        t0 = time.perf_counter()
        r = self._get_retriever()
        q_fact, q_pass = self._encode_queries(queries)
        ner_vectors = None
        if cfg.linking == "ner":
            ner_vectors = [self.encoder.encode(ents) if ents else None for ents in self._query_ner(queries)]
        filter_fn = None
        if cfg.use_filter and cfg.linking == "fact":
            filter_fn = lambda q, cands: self.recognition_filter.filter(q, cands)[0]  # noqa: E731
        results, timings = r.search(queries, q_fact, q_pass, k, filter_fn, ner_vectors)
        sols = []
        for q, res in zip(queries, results, strict=False):
            sol = QuerySolution(question=q, docs=[], doc_scores=[], candidate_facts=res.candidate_facts,
                                kept_facts=res.kept_facts, seed_entities=res.seed_entities,
                                used_fallback=res.used_fallback)
            self._fill(sol, res.order, res.scores)
            sols.append(sol)
        logger.info("retrieve: %d queries in %.2fs (encoding %.2fs, filter %.2fs, PPR %.2fs, scoring+seeding "
                    "%.2fs); dense fallback for %d", len(queries), time.perf_counter() - t0,
                    time.perf_counter() - t0 - timings["total"], timings["filter"], timings["ppr"],
                    timings["scoring"] + timings["seeding"], sum(s.used_fallback for s in sols))
        return self._with_metrics(sols, gold_docs, "retrieve")

    def _fill(self, sol, order, scores) -> None:
        st = self.index_state.stores["passage"]
        ids = st.ids
        sol.docs = [st.text(ids[i]) for i in order]
        sol.doc_scores = np.asarray(scores, dtype=np.float64)

    def _query_ner(self, queries: list[str]) -> list[list[str]]:
        from hippo_engine.index.openie import ner_messages, parse_ner
        from hippo_engine.text import normalize_phrase
        out = self.llm.generate_many([ner_messages(q) for q in queries], max_new_tokens=self.config.max_new_tokens)
        ents = []
        for res in out:
            names = parse_ner(res.text) if not isinstance(res, Exception) else []
            ents.append([n for n in (normalize_phrase(e, self.config.normalization) for e in names) if n])
        return ents

    def retrieve_dpr(self, queries: Sequence[str], num_to_retrieve: int | None = None, gold_docs=None):
        """Dense passage retrieval baseline; same signature and return shape as ``retrieve``."""
        from hippo_engine.qa.reader import QuerySolution
        queries = self._check_queries(queries, "retrieve_dpr")
        k = num_to_retrieve or self.config.retrieval_top_k
        r = self._get_retriever()
        _, q_pass = self._encode_queries(queries)
        dense = r.dense_scores(q_pass)
        sols = []
        for j, q in enumerate(queries):
            sol = QuerySolution(question=q, docs=[], doc_scores=[])
            order, scores = r.dense_rank(dense[:, j], k)
            self._fill(sol, order, scores)
            sols.append(sol)
        return self._with_metrics(sols, gold_docs, "retrieve_dpr")

    # ------------------------------------------------------------------ QA
    def qa(self, solutions, template=None):
        """Answer already-retrieved ``QuerySolution``s with the reader LLM.
        Returns ``(solutions, responses, metadata)``."""
        from hippo_engine.qa.reader import answer_questions
        responses, metadata = answer_questions(self.llm, solutions, self.config.qa_top_k,
                                               show_progress=self.config.show_progress, template=template,
                                               max_new_tokens=self.config.max_new_tokens,
                                               temperature=self.config.temperature)
        return solutions, responses, metadata

    def rag_qa(self, queries, gold_docs=None, gold_answers=None, template=None, dense: bool = False,
               mode: str = "hipporag2", only_need_context: bool = False):
        """Retrieve (unless ``queries`` are already ``QuerySolution``s), read, and score.

        Returns ``(solutions, responses, metadata)``, or with gold given
        ``(solutions, responses, metadata, retrieval_metrics, qa_metrics)``. ``dense=True``
        uses dense retrieval instead of HippoRAG 2 (the paper's baseline, same reader).
        ``mode``: another retriever whose assembled context the reader sees (see
        ``hippo_engine.hirag.modes``); ``only_need_context=True`` returns the contexts, no answers.
        """
        if mode != "hipporag2" or only_need_context:
            from hippo_engine.hirag.modes import rag_qa_mode
            return rag_qa_mode(self, queries, mode, gold_docs=gold_docs, gold_answers=gold_answers,
                               template=template, dense=dense, only_need_context=only_need_context)
        from hippo_engine.qa.reader import QuerySolution
        retrieval_metrics: dict = {}
        if queries and all(isinstance(q, QuerySolution) for q in queries):
            solutions = list(queries)
            if gold_docs is not None:
                from hippo_engine.evaluation.metrics import recall_at_k
                for s, g in zip(solutions, gold_docs, strict=False):
                    s.gold_docs = list(g)
                retrieval_metrics = recall_at_k([s.docs for s in solutions], [list(g) for g in gold_docs])
        else:
            fn = self.retrieve_dpr if dense else self.retrieve
            out = fn(queries, gold_docs=gold_docs)
            solutions, retrieval_metrics = out if gold_docs is not None else (out, {})
        solutions, responses, metadata = self.qa(solutions, template=template)
        if gold_docs is None and gold_answers is None:
            return solutions, responses, metadata
        qa_metrics = self._score_answers(solutions, gold_answers, "rag_qa")
        return solutions, responses, metadata, retrieval_metrics, qa_metrics

    @staticmethod
    def _score_answers(solutions, gold_answers, what: str) -> dict:
        """Attach gold answers to the solutions and return EM/F1 ({} when none given)."""
        if gold_answers is None:
            return {}
        from hippo_engine.evaluation.metrics import qa_metrics as score_answers
        if len(gold_answers) != len(solutions):
            raise ValueError(f"{what}(): {len(gold_answers)} gold answer lists for {len(solutions)} queries")
        for s, g in zip(solutions, gold_answers, strict=False):
            s.gold_answers = [g] if isinstance(g, str) else list(g)
        metrics = score_answers([s.answer or "" for s in solutions], [s.gold_answers for s in solutions])
        logger.info("%s: %s", what, metrics)
        return metrics

    # ------------------------------------------------------------------ communities (HiRAG)
    def build_communities(self, max_llm_reports: int | None = None) -> dict:
        """Cluster the entity graph hierarchically (Leiden) and write a report per community;
        after an insert or delete only communities whose member set changed get new reports.
        At most ``max_llm_reports`` reports go to the LLM (None: all), the rest list their
        members. Returns counts per level and report statistics. See ``hippo_engine.hirag.communities``."""
        from hippo_engine.hirag.modes import build_communities
        return build_communities(self, max_llm_reports=max_llm_reports)

    @property
    def communities(self):
        """The stored ``communities.CommunitySet`` (None before ``build_communities``)."""
        from hippo_engine.hirag.modes import get_community_set
        return get_community_set(self, build=False)

    # ------------------------------------------------------------------ inspection
    def graph_stats(self) -> dict:
        """Node and edge counts of the graph (edges counted once per node pair)."""
        return self.index_state.graph.stats()

    @property
    def graph(self):
        """The graph as ``GraphData`` (``.to_igraph()`` gives an ``igraph.Graph``)."""
        return self.index_state.graph

    def close(self) -> None:
        self.index_state.close()

    def __enter__(self) -> HippoRAG:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
