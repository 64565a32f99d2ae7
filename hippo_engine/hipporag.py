"""``HippoRAG``: the thin facade that wires the index, retrieval, HiRAG and QA components.

Public API (reference-compatible where HippoRAG has the call): ``index``, ``delete``,
``retrieve``, ``retrieve_dpr``, ``qa``, ``rag_qa``; ``retrieve_context`` (a mode's assembled
context), ``build_communities``/``communities`` (HiRAG); ``encoder.encode(texts)``,
``graph.to_igraph()``, ``graph_stats()``, ``import_openie()``, ``close()``. Per-call options
are a :class:`~hippo_engine.config.QueryParam`. Documents may carry metadata
(``index(docs, metadata=[...])``, ``document_metadata(ids)``) and queries a filter over it
(``where={"user": "alice"}``: see :mod:`.store.metadata` and :mod:`.retrieve.filtering`).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import overload

import numpy as np

from hippo_engine.auto import choose_extractor, llm_configured
from hippo_engine.config import HippoConfig, QueryParam
from hippo_engine.datatypes import Explanation, HiContext, QuerySolution
from hippo_engine.hirag.component import HiRAG
from hippo_engine.index.documents import (
    DocumentBatch,
    DocumentSplitter,
    delete_documents,
    index_documents,
)
from hippo_engine.index.extractors import make_extractor
from hippo_engine.index.graph import GraphData
from hippo_engine.index.ner import NERExtractor
from hippo_engine.index.state import IndexState
from hippo_engine.inputs import check_document_ids, open_save_dir, positive_count
from hippo_engine.llm.base import LLMClient
from hippo_engine.llm.providers import Forwarded, Models
from hippo_engine.models.encoder import Encoder
from hippo_engine.progress import Progress
from hippo_engine.qa.reader import ReaderSettings
from hippo_engine.query import runner
from hippo_engine.query.factory import Searches
from hippo_engine.query.runner import QueryRunner, with_options
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.retriever import Retriever


class HippoRAG:
    """Long-term memory for LLM applications, HippoRAG 2 style.

    ``HippoRAG(save_dir)`` opens (or creates) an index in ``save_dir`` with the offline default
    models: all-MiniLM-L6-v2 for embeddings, spaCy's ``en_core_web_sm`` for entities, and the
    packaged Qwen2.5-Coder-0.5B-Instruct as the reader. A new index is built the best measured way
    for what is configured (``extractor="auto"``, :mod:`hippo_engine.auto`): without an LLM server no
    LLM call at all (``"ner"``); with ``llm_base_url=...`` (an OpenAI-compatible server) or an
    ``llm=`` client, the paper's LLM OpenIE and recognition filter (``"openie"``); an existing index
    keeps the extractor it records. Pass ``llm_model_name`` / ``embedding_model_name`` to use other
    models. Keyword overrides are ``HippoConfig`` field names: ``HippoRAG(dir, use_filter=False)``.
    ``storage="postgres"`` keeps the index in PostgreSQL + pgvector (an embedded server under
    ``save_dir``, started or joined here; the last user, in any process, stops it on ``close()``;
    ``dsn="postgresql://..."`` for a server of yours); the default is an SQLite file in ``save_dir``.
    ``executor=RayExecutor(address)`` (:mod:`hippo_engine.index.distributed`, the ``ray`` extra) runs
    ``index()``'s splitting, fact extraction and encodings on a Ray cluster; this process stays the writer.

    Models are loaded lazily, on first use: opening an index to read statistics costs nothing.
    Components: ``index_state`` (the ``IndexState``), ``hirag`` (the ``HiRAG`` component), ``searches``
    (``Searches``: a search object per mode, the ``Retriever`` of the index version), ``queries``
    (``QueryRunner``: what the query calls do, reader included) and ``models`` (made on first use).
    """

    def __init__(self, save_dir: str | Path, llm_model_name: str | None = None,
                 embedding_model_name: str | None = None, config: HippoConfig | None = None,
                 *, llm: LLMClient | None = None, encoder: Encoder | None = None, storage: str | None = None,
                 dsn: str | None = None, executor=None, **overrides):
        self.save_dir, config = open_save_dir(save_dir, config, storage, dsn, overrides)
        self.models = Models(config, self.save_dir, llm_model_name, embedding_model_name, llm, encoder)
        self.llm_model_name, self.embedding_model_name = self.models.llm_name, self.models.embedding_name
        progress = Progress.of(config)   # the bars of the components made here
        self.index_state = IndexState(self.save_dir, config, lambda: self.encoder, self.embedding_model_name,
                                      progress=progress)
        try:   # extractor="auto": the index's own, or for a new one the best for what is configured
            config = choose_extractor(config, self.index_state.extractor, len(self.index_state) > 0,
                                      llm_configured(config, llm), self.save_dir)
        except BaseException:
            self.index_state.close()
            raise
        self._config = self.models.config = self.index_state.config = config
        self.executor = executor   # None: index() works in this process; e.g. RayExecutor (index/distributed)
        self.ner = NERExtractor(progress=progress)   # spaCy, loaded on first use
        self.extractor = make_extractor(config.extractor, self.save_dir, self.llm_model_name, lambda: self.llm,
                                        max_new_tokens=config.max_new_tokens, progress=progress,
                                        ner=self.ner)
        self._wire()

    def _wire(self) -> None:
        """(Re)build the components that hold the configuration: HiRAG, the query side (the mode
        search objects of every mode, see :mod:`.query.factory`) and the query calls (:mod:`.query.runner`)."""
        cfg, reader = self._config, ReaderSettings.of(self._config)

        def encoder() -> Encoder:   # through the facade's properties: one source for every component
            return self.encoder

        def llm() -> LLMClient:
            return self.llm
        self.hirag = HiRAG(self.index_state, cfg.hirag, reader, encoder=encoder, llm=llm)
        self.searches = Searches(cfg, self.index_state, self.hirag, encoder, llm, self.ner, self.llm_model_name)
        self.queries = QueryRunner(self.searches, self.index_state, retrieval_top_k=cfg.retrieval_top_k)

    @property
    def config(self) -> HippoConfig:
        """The configuration (immutable; assign a changed copy to reconfigure retrieval)."""
        return self._config

    @config.setter
    def config(self, value: HippoConfig) -> None:
        self._config = self.models.config = value
        self._wire()

    # ------------------------------------------------------------------ models (see :mod:`.llm.providers`)
    _llm, _encoder = Forwarded("models", "llm_client"), Forwarded("models", "encoder_model")

    @property
    def llm(self) -> LLMClient:
        """The LLM client (OpenIE, filter, reader, community reports), made on first use."""
        return self.models.llm()

    @property
    def encoder(self) -> Encoder:
        """The text encoder (``encoder.encode(texts) -> (n, dim) float32``), made on first use."""
        return self.models.encoder()

    # ------------------------------------------------------------------ documents
    def _split(self, docs: Sequence[str], ids: Sequence[str] | None, what: str,
               metadata: Sequence[dict | None] | None = None) -> DocumentBatch:
        """Validate documents (ids, metadata) and split them into passages (:class:`.index.documents.DocumentSplitter`:
        the encoder is loaded for its tokenizer only when a document may be longer than ``chunk_size``)."""
        return DocumentSplitter.of(self.config.index, self.config.storage, lambda: self.encoder).split(
            docs, ids, what, metadata)

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

    def index(self, docs: Sequence[str], ids: Sequence[str] | None = None,
              metadata: Sequence[dict | None] | None = None) -> dict:
        """Add documents to the memory, with ``ids`` (unique non-empty strings, one per document)
        or, without, ids derived from their texts (:func:`.ids.document_id`). Re-indexing a
        document already present is a no-op; a known id with another text replaces that
        document (its passages no other document holds go). See :mod:`.index.documents`.
        ``metadata``: a JSON object (dict) per document (``{"user": "alice", "time": 17}``), stored
        with it and matched by queries' ``where`` filters; given again for a known id it replaces
        the stored one (``{}`` clears it; without ``metadata`` what is stored stays), written in the
        same transaction as the documents (an item ``None`` gives none for that document: a known
        one keeps what is stored); the report's ``documents.metadata_updated`` lists the ids whose
        metadata changed.

        A document longer than ``chunk_size`` tokens (default 1500) becomes several passages, each
        with the document's title line (:mod:`.index.chunking`). Facts come from the index's
        ``extractor``: LLM OpenIE (``"openie"``, the paper), spaCy sentences with their entities
        (``"ner"``, no LLM) or LLM n-ary facts (``"nary"``); see :mod:`.auto` for ``"auto"``.
        LLM results are saved as they come (a crash loses no LLM work). If the LLM fails for
        some passages, the documents of the others are indexed and ``OpenIEError`` is raised
        afterwards naming the failed ones; rerun to retry them. Returns a report with counts,
        per-stage timings and ``documents``: ids added and replaced, how many unchanged (a call
        that changes nothing returns ``{"added": 0}``).
        """
        if self.executor is not None:     # splitting, extraction and encoding elsewhere, one writer here
            report = self.executor.index(self, docs, ids, metadata)
        else:
            report = index_documents(self.index_state, self.extractor, self._split(docs, ids, "index", metadata),
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

    def document_metadata(self, ids: Sequence[str]) -> dict[str, dict]:
        """doc id -> its metadata (``{}``: none) for each of ``ids`` in the memory; unknown ids are left out."""
        return self.index_state.documents.metadata_of(check_document_ids(ids, None, "document_metadata"))

    # ------------------------------------------------------------------ components
    def documents(self, offset: int = 0, limit: int = 100) -> dict:
        """The index's documents, however they were added (Python, the command line, Ray, the service), in
        the order first indexed: ``{"documents": [{"id", "added", "updated"}], "total", "offset", "limit"}``
        (times: ISO 8601 UTC of the first and the latest indexing)."""
        from datetime import datetime, timezone
        for name, v in (("offset", offset), ("limit", limit)):
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "offset" else 1):
                raise ValueError(f"documents(): {name} must be an integer of at least {0 if name == 'offset' else 1}"
                                 f", got {v!r}")
        db = self.index_state.db

        def iso(t: float) -> str:
            return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        rows = [{"id": d, "added": iso(a), "updated": iso(u)} for d, a, u in db.document_page(offset, limit)]
        return {"documents": rows, "total": db.document_count(), "offset": offset, "limit": limit}

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

    # ------------------------------------------------------------------ retrieval
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None = None, gold_docs: None = None,
                 mode: str | None = None, *, param: QueryParam | None = None,
                 explain: bool | None = None, where: dict | None = None) -> runner.Solutions: ...
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None = None, *, gold_docs: runner.GoldDocs,
                 mode: str | None = None, param: QueryParam | None = None,
                 explain: bool | None = None, where: dict | None = None) -> runner.WithRecall: ...
    @overload
    def retrieve(self, queries: Sequence[str], num_to_retrieve: int | None, gold_docs: runner.GoldDocs,
                 mode: str | None = None, *, param: QueryParam | None = None,
                 explain: bool | None = None, where: dict | None = None) -> runner.WithRecall: ...

    def retrieve(self, queries, num_to_retrieve=None, gold_docs=None, mode=None, *, param=None, explain=None,
                 where=None):
        """Rank passages for each query: HippoRAG 2 retrieval by default.

        Returns a list of ``QuerySolution`` (passages best first with their scores, plus the
        candidate facts, kept facts, seed entities and whether the dense fallback fired), or
        ``(solutions, metrics)`` with Recall@k when ``gold_docs`` (a list of gold passage lists)
        is given. ``param`` (``QueryParam``) holds the per-call options; ``num_to_retrieve``
        (passages per query) and ``mode`` (``naive``, ``hi_local``, ``hi_global``, ``hi_bridge``,
        ``hi``; see ``hippo_engine.modes``) override its ``top_k`` and ``mode``. ``explain=True``
        (or ``QueryParam(explain=True)``) explains each solution without changing the ranking: its
        ``explanations`` in the ``hipporag2`` mode (see :meth:`explain`), its ``provenance`` (every
        item of the assembled context, with its section and why it was chosen) in the hi_* modes.
        ``where`` (or ``QueryParam(where=...)``): a metadata filter, applied before ranking: only
        passages of matching documents are ranked and shown, and nothing else of the other documents
        appears (see :mod:`.retrieve.filtering`).
        """
        param = with_options(param, mode=mode, top_k=positive_count(num_to_retrieve, "num_to_retrieve"),
                             explain=explain, where=where)
        return self.queries.retrieve(queries, param, gold_docs)

    def explain(self, query: str, passage_ids: Sequence[str] | None = None, top: int = 5, *,
                param: QueryParam | None = None, where: dict | None = None) -> list[Explanation]:
        """Why ``query``'s top ``top`` passages (or the passages ``passage_ids``) ranked where they did
        under HippoRAG 2: per passage an ``Explanation`` with each seed entity's exact term of its PPR
        score, the dense prior, the check |sum - score|, the most probable walks from the seeds with
        the facts on them, the candidate facts and the dense score and rank (see ``retrieve/explain/core.py``).
        ``where``: as in :meth:`retrieve` (passage ids outside the filter are refused)."""
        self.queries.check_queries([query], "explain")
        return self.searches.hipporag2.explain(query, with_options(param, where=where), passage_ids,
                                               positive_count(top, "top") or 5)

    def retrieve_dpr(self, queries: Sequence[str], num_to_retrieve: int | None = None,
                     gold_docs: runner.GoldDocs | None = None, *, param: QueryParam | None = None
                     ) -> runner.Solutions | runner.WithRecall:
        """Dense passage retrieval baseline (``mode="naive"``); same return shapes as ``retrieve``."""
        return self.retrieve(queries, num_to_retrieve, gold_docs, "naive", param=param)

    def retrieve_context(self, queries: Sequence[str] | Sequence[QuerySolution], mode: str | None = None, *,
                         num_to_retrieve: int | None = None, param: QueryParam | None = None,
                         where: dict | None = None) -> list[HiContext]:
        """Each query's assembled reader context in ``mode`` (``HiContext``: titled sections with
        token counts, the passage ranking, entities, communities, bridge path). No LLM call
        unless communities must be built. ``hipporag2`` and ``naive`` give the passages the
        reader would see; already-ranked ``QuerySolution``s are wrapped as they are in those modes.
        ``where``: as in :meth:`retrieve` (hi_* modes: see :mod:`.retrieve.filtering`)."""
        param = with_options(param, mode=mode, top_k=positive_count(num_to_retrieve, "num_to_retrieve"), where=where)
        return self.queries.contexts(queries, param)

    # ------------------------------------------------------------------ QA
    def qa(self, solutions: Sequence[QuerySolution], template=None, *,
           param: QueryParam | None = None) -> runner.QAResult:
        """Answer already-retrieved ``QuerySolution``s with the reader LLM over each one's top
        ``qa_top_k`` passages (``param.qa_top_k`` or the config's); sets ``solution.answer``.
        ``template``: a ``ReaderTemplate`` or its dict. Returns ``(solutions, responses, metadata)``."""
        return self.queries.qa(solutions, template, param)

    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: None = None,
               gold_answers: None = None, template=None, dense: bool = False, mode: str | None = None, *,
               param: QueryParam | None = None, where: dict | None = None) -> runner.QAResult: ...
    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: runner.GoldDocs,
               gold_answers: runner.GoldAnswers | None = None, template=None, dense: bool = False,
               mode: str | None = None, *, param: QueryParam | None = None,
               where: dict | None = None) -> runner.QAEvalResult: ...
    @overload
    def rag_qa(self, queries: Sequence[str] | Sequence[QuerySolution], gold_docs: runner.GoldDocs | None = None, *,
               gold_answers: runner.GoldAnswers, template=None, dense: bool = False, mode: str | None = None,
               param: QueryParam | None = None, where: dict | None = None) -> runner.QAEvalResult: ...

    def rag_qa(self, queries, gold_docs=None, gold_answers=None, template=None, dense=False, mode=None, *,
               param=None, where=None):
        """Retrieve (unless ``queries`` are already ``QuerySolution``s), read, and score.

        Returns ``(solutions, responses, metadata)``, or with gold docs or answers given
        ``(solutions, responses, metadata, retrieval_metrics, qa_metrics)``. ``dense=True``
        uses dense retrieval instead of HippoRAG 2 (the paper's baseline, same reader). In a
        hi_* ``mode`` the reader sees the mode's assembled context (see ``retrieve_context``)
        and ``metadata[i]["context_tokens"]`` holds its section sizes. ``where``: as in :meth:`retrieve`.
        """
        return self.queries.rag_qa(queries, gold_docs, gold_answers, template, dense,
                                   with_options(param, mode=mode, where=where))

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
        """Node and edge counts of the graph (edges counted once per node pair) and ``extractor``:
        how the index builds its facts (as recorded when it was created; for an empty index, the
        extractor its first documents will get)."""
        return {**self.index_state.graph.stats(), "extractor": self.index_state.extractor or self.extractor.name}

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
