"""``HippoRAG``: the thin facade that wires the index, retrieval, HiRAG and QA components.

Public API (reference-compatible where HippoRAG has the call): ``index``, ``delete``,
``retrieve``, ``retrieve_dpr``, ``qa``, ``rag_qa``; ``retrieve_context`` (a mode's assembled
context), ``build_communities``/``communities`` (HiRAG); ``encoder.encode(texts)``,
``graph.to_igraph()``, ``graph_stats()``, ``import_openie()``, ``close()``. Per-call options
are a :class:`~hippo_engine.config.QueryParam`.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import overload

import numpy as np

from hippo_engine.config import HippoConfig, QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.hirag.component import HiRAG
from hippo_engine.index.documents import (
    DocumentBatch,
    attach_ids,
    delete_documents,
    index_documents,
    split_documents,
)
from hippo_engine.index.extractors import make_extractor
from hippo_engine.index.graph import GraphData
from hippo_engine.index.ner import NERExtractor
from hippo_engine.index.state import IndexState
from hippo_engine.inputs import check_queries, positive_count
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.progress import announce, loading, plural
from hippo_engine.qa.evaluate import answer_metrics, retrieval_metrics
from hippo_engine.qa.reader import answer_questions
from hippo_engine.retrieve.retriever import Retriever, encode_queries
from hippo_engine.retrieve.searches import Searches
from hippo_engine.store.registry import get_backend

logger = logging.getLogger(__name__)

GoldDocs = Sequence[Sequence[str]]
GoldAnswers = Sequence[str | Sequence[str]]
Solutions = list[QuerySolution]
WithRecall = tuple[Solutions, dict[str, float]]
QAResult = tuple[Solutions, list[str], list[dict]]
QAEvalResult = tuple[Solutions, list[str], list[dict], dict, dict]


class HippoRAG:
    """Long-term memory for LLM applications, HippoRAG 2 style.

    ``HippoRAG(save_dir)`` opens (or creates) an index in ``save_dir`` with the offline default
    models: the packaged Qwen2.5-Coder-0.5B-Instruct for OpenIE, filtering and reading, and
    all-MiniLM-L6-v2 for embeddings. Pass ``llm_model_name`` / ``embedding_model_name`` (and
    ``llm_base_url=...`` for an OpenAI-compatible server) to use others. Keyword overrides are
    ``HippoConfig`` field names: ``HippoRAG(dir, use_filter=False, damping=0.5)``.
    ``storage="postgres"`` keeps the index in PostgreSQL + pgvector (an embedded server under
    ``save_dir``, started or joined here; the last user, in any process, stops it on ``close()``;
    ``dsn="postgresql://..."`` for a server
    of yours); the default is an SQLite file in ``save_dir``.

    Models are loaded lazily, on first use: opening an index to read statistics costs nothing.
    Components: ``index_state`` (the ``IndexState``), ``hirag`` (the ``HiRAG`` component), ``searches``
    (``Searches``: a search object per mode, the ``Retriever`` of the index version) and
    the reader (``qa``).
    """

    def __init__(self, save_dir: str | Path, llm_model_name: str | None = None,
                 embedding_model_name: str | None = None, config: HippoConfig | None = None,
                 *, llm: LLMClient | None = None, encoder: Encoder | None = None, storage: str | None = None,
                 dsn: str | None = None, **overrides):
        config = config or HippoConfig()
        if storage is not None or dsn is not None:   # storage="postgres" (embedded), dsn= (a server)
            overrides = {**overrides, "storage_backend": storage or "postgres", "postgres_dsn": dsn}
        if overrides:
            config = config.replace(**overrides)
        self._config = config
        if not isinstance(save_dir, (str, Path)) or not str(save_dir):
            raise TypeError(f"HippoRAG(save_dir): a directory path is needed, got {save_dir!r}")
        self.save_dir = Path(save_dir)
        if self.save_dir.exists() and not self.save_dir.is_dir():
            raise NotADirectoryError(f"HippoRAG(save_dir): {self.save_dir} exists and is not a directory")
        self.save_dir.mkdir(parents=True, exist_ok=True)
        if storage is None and dsn is None and "storage_backend" not in overrides:   # the backend the folder recorded
            from hippo_engine.store.opening import with_recorded_backend
            self._config = config = with_recorded_backend(self.save_dir, config)
        from hippo_engine.models.assets import DEFAULT_EMBEDDER
        try:
            from hippo_engine.models.assets import DEFAULT_LLM
        except ImportError:  # pragma: no cover
            DEFAULT_LLM = "Qwen2.5-Coder-0.5B-Instruct"
        self.llm_model_name = llm_model_name or (llm.model_name if llm is not None else DEFAULT_LLM)
        self.embedding_model_name = embedding_model_name or (encoder.name if encoder is not None else DEFAULT_EMBEDDER)
        self._llm = llm
        self._encoder = encoder
        self.index_state = IndexState(self.save_dir, config, lambda: self.encoder, self.embedding_model_name)
        self.ner = NERExtractor(show_progress=config.show_progress)   # spaCy, loaded on first use
        self.extractor = make_extractor(config.extractor, self.save_dir, self.llm_model_name, lambda: self.llm,
                                        max_new_tokens=config.max_new_tokens, show_progress=config.show_progress,
                                        ner=self.ner)
        self._wire()

    def _wire(self) -> None:
        """(Re)build the components that hold the configuration: HiRAG and the query side (the
        mode table of search objects, see :mod:`.retrieve.searches`)."""
        self.hirag = HiRAG(self.index_state, self._config, encoder=lambda: self.encoder, llm=lambda: self.llm)
        self.searches = Searches(self._config, self.index_state, self.hirag, lambda: self.encoder, lambda: self.llm,
                                 self.ner, self.llm_model_name)

    @property
    def config(self) -> HippoConfig:
        """The configuration (immutable; assign a changed copy to reconfigure retrieval)."""
        return self._config

    @config.setter
    def config(self, value: HippoConfig) -> None:
        self._config = value
        self._wire()

    # ------------------------------------------------------------------ models
    @property
    def llm(self) -> LLMClient:
        """The LLM client (OpenIE, filter, reader, community reports), made on first use."""
        if self._llm is None:
            from hippo_engine.llm.factory import make_llm
            self._llm = make_llm(self.llm_model_name, self.config, cache_dir=self.save_dir)
        return self._llm

    @property
    def encoder(self) -> Encoder:
        """The text encoder (``encoder.encode(texts) -> (n, dim) float32``), made on first use."""
        if self._encoder is None:
            from hippo_engine.models.encoder import TransformersEncoder
            cfg = self.config
            with loading(f"embedding model {self.embedding_model_name}", cfg.show_progress):
                self._encoder = TransformersEncoder(self.embedding_model_name, batch_size=cfg.embedding_batch_size,
                                                    dtype=cfg.embedding_dtype, max_length=cfg.embedding_max_length,
                                                    num_workers=cfg.embedding_num_workers)
        return self._encoder

    # ------------------------------------------------------------------ documents
    def _split(self, docs: Sequence[str], ids: Sequence[str] | None, what: str) -> DocumentBatch:
        """Validate documents (and ids) and split them into passages (chunked if asked)."""
        cfg = self.config
        tokenizer = getattr(self.encoder, "tokenizer", None) if cfg.chunk_size else None
        return split_documents(docs, ids, what, cfg.chunk_size, cfg.chunk_overlap, tokenizer,
                               no_nul=not get_backend(cfg.storage_backend).accepts_nul)

    @property
    def openie_path(self) -> Path | None:
        """The OpenIE results file of this index (``extractor="openie"``; None otherwise)."""
        return getattr(self.extractor, "path", None) if self.extractor.name == "openie" else None

    def import_openie(self, path: str | Path) -> int:
        """Seed OpenIE results from a file (reference or HippoRAG v1 format). Returns how many
        passages it covers. Passages indexed later use these results instead of the LLM."""
        if self.extractor.name != "openie":
            raise ValueError(f"import_openie(): this memory extracts facts with extractor="
                             f"{self.extractor.name!r}; OpenIE files apply to extractor='openie'")
        return self.extractor.import_file(path)

    def index(self, docs: Sequence[str], ids: Sequence[str] | None = None) -> dict:
        """Add documents to the memory, with ``ids`` (unique non-empty strings, one per document)
        or, without, ids derived from their texts (:func:`.ids.document_id`). Re-indexing a
        document already present is a no-op; a known id with another text replaces that
        document (its passages no other document holds go). See :mod:`.index.documents`.

        Facts come from the configured ``extractor``: LLM OpenIE (``"openie"``, the paper),
        spaCy sentences with their entities (``"ner"``, no LLM) or LLM n-ary facts (``"nary"``).
        LLM results are saved as they come (a crash loses no LLM work). If the LLM fails for
        some passages, the documents of the others are indexed and ``OpenIEError`` is raised
        afterwards naming the failed ones; rerun to retry them. Returns a report with counts,
        per-stage timings and ``documents``: ids added and replaced, how many unchanged (a call
        that changes nothing returns ``{"added": 0}``).
        """
        report = index_documents(self.index_state, self.extractor, self._split(docs, ids, "index"),
                                 self.llm_model_name)
        self.searches.invalidate()
        return report

    def delete(self, docs: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> dict:
        """Remove documents, given by text (``docs``) or by id (``ids``), exactly one of them;
        the index becomes exactly as if they had never been added. A passage another document
        still holds stays. Unknown documents are logged and listed in the report's
        ``documents`` (``unknown`` ids, ``unknown_docs`` positions), not an error."""
        if (docs is None) == (ids is None):
            raise TypeError("delete(): give exactly one of docs= (document texts) or ids= (document ids)")
        batch = self._split(docs, None, "delete") if docs is not None else None
        report = delete_documents(self.index_state, batch, ids)
        self.searches.invalidate()
        return report

    # ------------------------------------------------------------------ components
    @property
    def retriever(self) -> Retriever:
        """The ``Retriever`` of the current index (and communities, with ``use_community_nodes``);
        rebuilt after an index change. Public for benchmarks and research on the ranking itself."""
        return self.searches.retriever

    @property
    def recognition_filter(self):
        """The recognition filter (``RecognitionFilter``) on the engine's LLM, made on first use."""
        return self.searches.recognition_filter

    def encode_queries(self, queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The queries encoded for fact scoring and for passage scoring (one array each)."""
        return encode_queries(self.encoder, queries, self.config)

    def _check_queries(self, queries, what: str) -> list[str]:
        queries = check_queries(queries, what)
        if len(self.index_state) == 0:
            raise RuntimeError(f"{what}(): the index in {self.save_dir} is empty; call index(docs) first")
        return list(queries)

    @staticmethod
    def _param(param: QueryParam | None, **given) -> QueryParam:
        """``param`` (default ``QueryParam()``) with the keyword options that were given."""
        param = param or QueryParam()
        changes = {k: v for k, v in given.items() if v is not None}
        return dataclasses.replace(param, **changes) if changes else param

    def _with_gold(self, solutions: Solutions, gold_docs: GoldDocs | None, what: str):
        if gold_docs is None:
            return solutions
        return solutions, retrieval_metrics(solutions, gold_docs, what, self.config.retrieval_top_k)

    # ------------------------------------------------------------------ retrieval
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None = None, gold_docs: None = None,
                 mode: str | None = None, *, param: QueryParam | None = None) -> Solutions: ...
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None = None, *, gold_docs: GoldDocs,
                 mode: str | None = None, param: QueryParam | None = None) -> WithRecall: ...
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None, gold_docs: GoldDocs,
                 mode: str | None = None, *, param: QueryParam | None = None) -> WithRecall: ...

    def retrieve(self, queries, num_to_retrieve=None, gold_docs=None, mode=None, *, param=None):
        """Rank passages for each query: HippoRAG 2 retrieval by default.

        Returns a list of ``QuerySolution`` (passages best first with their scores, plus the
        candidate facts, kept facts, seed entities and whether the dense fallback fired), or
        ``(solutions, metrics)`` with Recall@k when ``gold_docs`` (a list of gold passage lists)
        is given. ``param`` (``QueryParam``) holds the per-call options; ``num_to_retrieve``
        (passages per query) and ``mode`` (``naive``, ``hi_local``, ``hi_global``, ``hi_bridge``,
        ``hi``; see ``hippo_engine.hirag.modes``) override its ``top_k`` and ``mode``.
        """
        param = self._param(param, mode=mode, top_k=positive_count(num_to_retrieve, "num_to_retrieve"))
        queries = self._check_queries(queries, "retrieve")
        solutions = self.searches.search(param.mode).retrieve(queries, param)
        attach_ids(solutions, self.index_state)
        return self._with_gold(solutions, gold_docs, "retrieve" if param.mode == "hipporag2" else
                               f"retrieve[{param.mode}]")

    def retrieve_dpr(self, queries: Sequence[str], num_to_retrieve: int | None = None,
                     gold_docs: GoldDocs | None = None, *, param: QueryParam | None = None
                     ) -> Solutions | WithRecall:
        """Dense passage retrieval baseline (``mode="naive"``); same return shapes as ``retrieve``."""
        return self.retrieve(queries, num_to_retrieve, gold_docs, "naive", param=param)

    def retrieve_context(self, queries: Sequence[str] | Sequence[QuerySolution], mode: str | None = None, *,
                         num_to_retrieve: int | None = None, param: QueryParam | None = None) -> list[HiContext]:
        """Each query's assembled reader context in ``mode`` (``HiContext``: titled sections with
        token counts, the passage ranking, entities, communities, bridge path). No LLM call
        unless communities must be built. ``hipporag2`` and ``naive`` give the passages the
        reader would see; already-ranked ``QuerySolution``s are wrapped as they are in those modes."""
        param = self._param(param, mode=mode, top_k=positive_count(num_to_retrieve, "num_to_retrieve"))
        return self._contexts(queries, param, "retrieve_context")

    def _contexts(self, queries, param: QueryParam, what: str) -> list[HiContext]:
        search = self.searches.search(param.mode)
        given = bool(queries) and all(isinstance(q, QuerySolution) for q in queries)
        if given and not search.reads_context:
            return search.wrap(queries)
        if given:   # hi_* modes retrieve in their own way
            queries = [q.question for q in queries]
        return search.contexts(self._check_queries(queries, what), param)

    # ------------------------------------------------------------------ QA
    def qa(self, solutions: Sequence[QuerySolution], template=None, *, param: QueryParam | None = None) -> QAResult:
        """Answer already-retrieved ``QuerySolution``s with the reader LLM over each one's top
        ``qa_top_k`` passages (``param.qa_top_k`` or the config's); sets ``solution.answer``.
        ``template``: a ``ReaderTemplate`` or its dict. Returns ``(solutions, responses, metadata)``."""
        cfg = self.config
        k = (param.qa_top_k if param is not None else None) or cfg.qa_top_k
        announce(f"reader: {plural(len(solutions), 'LLM call')} ({self.llm_model_name!r}, top {k} passages each)")
        responses, metadata = answer_questions(self.llm, solutions, k, show_progress=cfg.show_progress,
                                               template=template, max_new_tokens=cfg.max_new_tokens,
                                               temperature=cfg.temperature)
        return list(solutions), responses, metadata

    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: None = None,
               gold_answers: None = None, template=None, dense: bool = False, mode: str | None = None, *,
               param: QueryParam | None = None) -> QAResult: ...
    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: GoldDocs,
               gold_answers: GoldAnswers | None = None, template=None, dense: bool = False, mode: str | None = None,
               *, param: QueryParam | None = None) -> QAEvalResult: ...
    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: GoldDocs | None = None, *,
               gold_answers: GoldAnswers, template=None, dense: bool = False, mode: str | None = None,
               param: QueryParam | None = None) -> QAEvalResult: ...

    def rag_qa(self, queries, gold_docs=None, gold_answers=None, template=None, dense=False, mode=None, *,
               param=None):
        """Retrieve (unless ``queries`` are already ``QuerySolution``s), read, and score.

        Returns ``(solutions, responses, metadata)``, or with gold docs or answers given
        ``(solutions, responses, metadata, retrieval_metrics, qa_metrics)``. ``dense=True``
        uses dense retrieval instead of HippoRAG 2 (the paper's baseline, same reader). In a
        hi_* ``mode`` the reader sees the mode's assembled context (see ``retrieve_context``)
        and ``metadata[i]["context_tokens"]`` holds its section sizes.
        """
        cfg = self.config
        param = self._param(param, mode=mode)
        if dense and param.mode == "hipporag2":
            param = dataclasses.replace(param, mode="naive")
        given = bool(queries) and all(isinstance(q, QuerySolution) for q in queries)
        retrieval: dict = {}
        if self.searches.search(param.mode).reads_context:
            solutions, responses, metadata = self.hirag.answer(self._contexts(queries, param, "rag_qa"), template)
            attach_ids(solutions, self.index_state)
            if gold_docs is not None:
                retrieval = retrieval_metrics(solutions, gold_docs, f"rag_qa[{param.mode}]", cfg.retrieval_top_k)
        else:
            if given:
                solutions = list(queries)
                if gold_docs is not None:
                    retrieval = retrieval_metrics(solutions, gold_docs, "rag_qa")
            else:
                out = self.retrieve(queries, gold_docs=gold_docs, param=param)
                solutions, retrieval = out if gold_docs is not None else (out, {})
            solutions, responses, metadata = self.qa(solutions, template=template, param=param)
        if gold_docs is None and gold_answers is None:
            return solutions, responses, metadata
        return solutions, responses, metadata, retrieval, answer_metrics(solutions, gold_answers, "rag_qa")

    # ------------------------------------------------------------------ communities (HiRAG)
    def build_communities(self, max_llm_reports: int | None = None) -> dict:
        """Cluster the entity graph hierarchically (Leiden) and write a report per community;
        after an insert or delete only communities whose member set changed get new reports.
        At most ``max_llm_reports`` reports go to the LLM (None: all), the rest list their
        members. Returns counts per level and report statistics. See ``hippo_engine.hirag``."""
        return self.hirag.build_communities(max_llm_reports=max_llm_reports)

    @property
    def communities(self):
        """The stored ``CommunitySet`` (None before ``build_communities``)."""
        return self.hirag.communities(build=False)

    # ------------------------------------------------------------------ inspection
    def graph_stats(self) -> dict:
        """Node and edge counts of the graph (edges counted once per node pair)."""
        return self.index_state.graph.stats()

    @property
    def graph(self) -> GraphData:
        """The graph as ``GraphData`` (``.to_igraph()`` gives an ``igraph.Graph``)."""
        return self.index_state.graph

    def close(self) -> None:
        """Close the index's database and leave the embedded PostgreSQL server; the last user, in
        any process, stops it (the object is unusable afterwards)."""
        self.index_state.close()

    def __enter__(self) -> HippoRAG:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
