"""The configuration's sections: grouped, immutable settings with the paper's defaults, validated in one place.

Each of the nine sections (:class:`IndexConfig`, :class:`RetrievalConfig`, :class:`PPRConfig`,
:class:`LLMConfig`, :class:`EmbeddingConfig`, :class:`StorageConfig`, :class:`HiRAGConfig`,
:class:`GraphRAGConfig`, :class:`KBConfig`) is a frozen pydantic model, so a typo, a wrong type or an
out-of-range value fails when the object is built, and nothing can change it afterwards.
:class:`~hippo_engine.config.HippoConfig` (:mod:`.flat`) holds one of each.
"""
from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hippo_engine.dsn import redact_dsn
from hippo_engine.errors import ConfigError

LINKING_MODES = ("auto", "fact", "ner", "query", "ner_fact")
EXTRACTORS = ("openie", "ner", "nary")


class _Section(BaseModel):
    # strict: no silent coercion ("3" -> 3, 1 -> True); floats accept ints.
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", allow_inf_nan=False)


class IndexConfig(_Section):
    """How documents become the graph."""

    #: ``"openie"`` (LLM triples, the paper), ``"ner"`` (no LLM: spaCy NER, sentences as facts),
    #: ``"nary"`` (LLM n-ary facts) or ``"auto"``: resolved when the index is created
    #: (:func:`hippo_engine.auto.resolve_auto`: ``"ner"`` without an LLM server, ``"openie"`` with one).
    #: An index records its extractor and keeps it ("auto" on an existing index is the recorded one);
    #: mixing them is an error.
    extractor: Literal["auto", "openie", "ner", "nary"] = "auto"
    #: a document longer than this many tokens of the encoder's tokenizer is cut into passages
    #: (at sentence or word boundaries, each keeping the document's title line; see
    #: :mod:`hippo_engine.index.chunking`). 1500 leaves paragraph-sized documents whole (every
    #: passage of MuSiQue and 2Wiki: at most 387 and 1,436 word pieces) and bounds a passage for the
    #: reader (5 of them in about 7,500 tokens). None: never cut (the paper).
    chunk_size: int | None = Field(1500, gt=0)
    #: tokens a passage repeats of the one before it (when a document is cut)
    chunk_overlap: int = Field(0, ge=0)
    normalization: Literal["unicode", "reference"] = "unicode"
    #: passage vectors on a hyperedge index: ``"encode"`` (the passage text, like dense retrieval)
    #: or ``"sentence_mean"`` (the normalised mean of its sentences' vectors, which are encoded
    #: anyway: indexing costs about a third less; dense scores become a little weaker)
    passage_vectors: Literal["encode", "sentence_mean"] = "encode"
    #: sentence (fact) vectors on a hyperedge index: ``"encode"`` (each sentence encoded alone) or ``"pooled"``
    #: (mean-pooled from the token states of its passage's own forward pass, "late chunking": one forward per
    #: passage; a sentence past the encoder's truncation is encoded alone; :mod:`hippo_engine.models.spans`)
    sentence_vectors: Literal["encode", "pooled"] = "encode"
    synonymy_threshold: float = Field(0.8, ge=0.0, le=1.0)
    synonymy_max_neighbors: int = Field(100, gt=0)
    synonymy_min_alnum_chars: int = Field(3, ge=0)
    synonymy_block_size: int = Field(4096, gt=0)

    @model_validator(mode="after")
    def _overlap(self):
        if self.chunk_size is not None and self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        if self.sentence_vectors == "pooled" and self.passage_vectors == "sentence_mean":
            raise ValueError('sentence_vectors="pooled" pools sentences from the passage\'s own encoding: '
                             'it needs passage_vectors="encode"')
        return self


class RetrievalConfig(_Section):
    """HippoRAG 2 retrieval (paper section 3) and its ablation switches."""

    linking_top_k: int = Field(5, gt=0)
    retrieval_top_k: int = Field(200, gt=0)
    qa_top_k: int = Field(5, gt=0)
    passage_node_weight: float = Field(0.05, ge=0.0, le=1.0)
    #: how a query reaches the graph: ``"fact"`` (paper: its best facts' entities), ``"ner"``
    #: (query NER entities -> nearest entity nodes), ``"query"`` (query embedding -> entity
    #: nodes): the paper's ablations; ``"ner_fact"``: both NER entities and the best facts'
    #: entities (the LLM-free path). ``"auto"``: ``"ner_fact"`` on an ``extractor="ner"``
    #: index, ``"fact"`` otherwise.
    linking: Literal["auto", "fact", "ner", "query", "ner_fact"] = "auto"
    #: facts whose entities seed the walk in ``"ner_fact"`` linking when the filter is off
    #: (1: the best sentence; chosen on the MuSiQue training questions)
    ner_fact_top_k: int = Field(1, gt=0)
    #: who finds a query's entities for ``"ner"``/``"ner_fact"`` linking: ``"llm"`` (the NER
    #: prompt), ``"spacy"`` (no LLM), ``"auto"``: spaCy on an ``extractor="ner"`` index, else the LLM
    query_ner: Literal["auto", "llm", "spacy"] = "auto"
    use_passage_nodes: bool = True
    #: rank fusion: this many best passages by dense score go first, then the graph ranking
    #: (0: PPR mass alone, the paper). 1 lifts HippoRAG 2 to dense at Recall@1-2 on MuSiQue
    #: with the released OpenIE; it lowers R@1 on the "ner" path, so the default stays 0.
    dense_first: int = Field(0, ge=0)
    #: top-rank rule, an ablation switch (off by default): dense retrieval's best passage goes first when it is
    #: among the graph ranking's N best (0: off; it looks at N ranks whatever top_k is). The default's dense
    #: vote is the score's ``dense`` term instead (``dense_weight``)
    dense_agree: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    #: an LLM-free second walk conditioned on the first, on ``ner`` (hyperedge) indexes
    #: (``retrieve/second/second_hop.py``):
    #: "none" (one walk), "wide" (seeded from the query's two best sentences), "bridge" (activation through
    #: sentences), "reseed" (bridge entities of the first walk's top passages). With a second walk a passage's
    #: score is one sum (``retrieve/second/fusion.py``): the second walk's probability relative to its best, plus
    #: ``head_weight`` x the first walk's relative probability on the first walk's ``second_hop_head`` best
    #: passages, plus the dense term. ``"auto"`` (here, for ``second_hop_head``, ``dense_agree`` and
    #: ``dense_weight``, :func:`hippo_engine.auto.resolve_retrieval`): on an ``extractor="ner"`` index "wide",
    #: head 2, dense weight 1.5 (``reproduce/results/recall``); else "none" and dense weight 0 (the paper's walk)
    second_hop: Literal["auto", "none", "wide", "bridge", "reseed"] = "auto"
    second_hop_head: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    #: the weight of the first walk's head term in the score (with a second walk)
    head_weight: float = Field(2.0, ge=0.0)
    #: the dense term of the score: ``dense_weight x exp((cos - best cos) / dense_temperature)`` (0: none;
    #: with 0 and one walk, the score is the walk's PPR probability itself, the paper's)
    dense_weight: Annotated[float, Field(ge=0.0)] | Literal["auto"] = "auto"
    dense_temperature: float = Field(0.015, gt=0.0)
    #: how the second walk is solved: "solve" (a walk of its own, bit-identical to solving that reset alone;
    #: explanations add up to the score within the PPR tolerance) or "update" (the first walk's scores plus a
    #: forward push of the few seeds that changed, by linearity, residual threshold second_walk_r_max:
    #: ``retrieve/ppr/walk_update.py``; faster on large graphs, but the score's walk term divides by the walk's
    #: largest probability, so explanations then differ from the score by up to ~0.1%)
    second_walk_solver: Literal["update", "solve"] = "solve"
    second_walk_r_max: float = Field(1e-7, gt=0.0)
    #: the recognition filter (an LLM call per query): None = on, except on an
    #: ``extractor="ner"`` index, which makes no LLM call unless this is set to True
    use_filter: bool | None = None
    max_filtered_facts: int = Field(4, gt=0)
    filter_program_path: str | None = None
    query_instruction_fact: str | None = None
    query_instruction_passage: str | None = None
    #: where the passage prior's dense scores come from when PPR runs by push: "auto" (a lazy PostgreSQL
    #: reader with HNSW: the best passages from the index, the mean exactly, the tail passages that can
    #: reach the top scored one by one: retrieve/ppr/ann_prior.py; else a scan), "scan" (every passage scored)
    dense_prior: Literal["auto", "scan"] = "auto"
    #: passages the "auto" prior takes from the HNSW index (at least the top-k asked; HNSW's ef_search is as
    #: large): at 500k passages the index's best 100 held 0.92 of the scan's top 10 (a query 0 of 10), its
    #: best 400 0.997 (at least 9 of 10) for 9 ms (reproduce/results/pg_scale)
    dense_prior_head: int = Field(400, gt=0)
    query_batch_size: int = Field(64, gt=0)


class PPRConfig(_Section):
    """Personalized PageRank: the walk's damping and how it is solved (:mod:`hippo_engine.retrieve.ppr`)."""

    damping: float = Field(0.5, gt=0.0, lt=1.0)
    ppr_backend: Literal["power", "igraph"] = "power"
    ppr_tol: float = Field(1e-6, gt=0.0)     # stop at an L1 change below this (per query)
    ppr_max_iter: int = Field(200, gt=0)
    # PPR kernel (retrieve.ppr.kernel): Chebyshev-accelerated iteration on a CSR matrix built once per
    # graph version, ppr_block_size queries per sparse x dense product; queries are scored and
    # seeded query_batch_size at a time.
    ppr_dtype: Literal["float32", "float64"] = "float32"
    ppr_method: Literal["chebyshev", "power"] = "chebyshev"
    ppr_block_size: int | None = Field(None, gt=0)   # None: fit a block's columns in ~2 MB
    #: PPR solver: "exact" (the kernel above), "push" (retrieve.ppr.push: forward push on the seeds and
    #: the prior's ppr_push_head best passages, residual threshold ppr_push_r_max x strength, the
    #: prior's mean exactly, the best passages refined by the walk's next steps; error bound in
    #: retrieve/ppr/push.py), "auto" (push from ppr_push_min_nodes graph nodes on, about 20k passages,
    #: where exact costs 45 ms of CPU per query and push 8 ms; measured in reproduce/results/ppr_scale)
    ppr_solver: Literal["exact", "push", "auto"] = "auto"
    ppr_push_r_max: float = Field(1e-5, gt=0.0)
    ppr_push_head: int = Field(100, ge=0)
    ppr_push_min_nodes: int = Field(200_000, gt=0)


_T = TypeVar("_T")
#: False while the package builds its built-in defaults (:func:`builtin_defaults`)
_READ_ENVIRONMENT: ContextVar[bool] = ContextVar("hippo_config_read_environment", default=True)


def builtin_defaults(make: Callable[[], _T]) -> _T:
    """``make()`` with the environment variables of :func:`_env_number` not read: the built-in defaults.
    The package builds its defaults (``_DEFAULTS`` of :mod:`.flat`) so while it is imported: a bad value
    then fails when a configuration is made, naming the variable, not on ``import hippo_engine``."""
    token = _READ_ENVIRONMENT.set(False)
    try:
        return make()
    finally:
        _READ_ENVIRONMENT.reset(token)


def _env_number(name: str, default: float, kind: type) -> Any:
    """``kind(os.environ[name])`` when set (must be > 0), else ``default``; ``default`` inside
    :func:`builtin_defaults`."""
    import os
    raw = os.environ.get(name, "").strip()
    if not raw or not _READ_ENVIRONMENT.get():
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise ConfigError(f"environment variable {name}: expected a positive "
                          f"{'integer' if kind is int else 'number'}, got {raw!r}")
    return value


class LLMConfig(_Section):
    """LLM clients: hosted (OpenAI-compatible URL) or local packaged models.

    ``timeout`` is the seconds one request may wait for its reply (default 600, or the
    environment variable ``HIPPO_LLM_TIMEOUT``). A request that times out is not sent again (the
    server may still be working on it), so keep it above the server's latency under load: a
    local server with few slots answers a queue of ``max_concurrency`` requests one after the
    other. ``max_concurrency`` (default 8, or ``HIPPO_LLM_CONCURRENCY``) is how many requests
    are in flight at once. ``max_retries``: re-sends of requests that failed before reaching
    the server, or with HTTP 408/409/429/5xx. ``api_key`` None: ``OPENAI_API_KEY``.
    """

    base_url: str | None = None
    api_key: str | None = Field(None, repr=False)   # a secret: never in a repr or an error message
    temperature: float = Field(0.0, ge=0.0)
    max_new_tokens: int = Field(2048, gt=0)
    max_concurrency: int = Field(default_factory=lambda: _env_number("HIPPO_LLM_CONCURRENCY", 8, int), gt=0)
    timeout: float = Field(default_factory=lambda: _env_number("HIPPO_LLM_TIMEOUT", 600.0, float), gt=0.0)
    max_retries: int = Field(5, ge=0)
    cache: bool = True
    #: local models: "llama_cpp" (GGUF via llama-cpp-python, extra ``fast``), "transformers",
    #: or "auto" (llama_cpp when installed)
    backend: Literal["auto", "transformers", "llama_cpp"] = "auto"
    threads: int | None = Field(None, gt=0)   # CPU threads of a local model (None: all usable)
    extra: dict = Field(default_factory=dict)    # free-form user settings; the engine reads none


class EmbeddingConfig(_Section):
    """The text encoder."""

    batch_size: int = Field(64, gt=0)
    dtype: Literal["float32", "bfloat16"] = "float32"
    max_length: int | None = Field(None, gt=0)
    num_workers: int | None = Field(None, gt=0)   # parallel forward passes (None: one per CPU)


class StorageConfig(_Section):
    """Where and how vectors are kept."""

    #: vectors on disk as float32 or float16 (half the bytes, ~3 significant digits)
    embedding_storage_dtype: Literal["float32", "float16"] = "float32"
    embedding_mmap: bool = False      # memory-map <save_dir>/vectors/*.npy on load
    #: seconds a writer waits for another writer of the same index before failing
    write_lock_timeout: float = Field(600.0, ge=0.0)
    show_progress: bool = True
    #: where the index lives, a backend registered in :mod:`hippo_engine.store.registry`: "sqlite"
    #: (``<save_dir>/index.sqlite`` + numpy, the default) or "postgres" (PostgreSQL + pgvector: an
    #: embedded server under ``<save_dir>/postgres``, or the server of ``postgres_dsn``); the name
    #: is checked against the registered backends when the storage is opened (the registry's)
    storage_backend: str = "sqlite"
    postgres_dsn: str | None = None
    #: the PostgreSQL schema holding this index (None: ``hippo`` on the embedded server; on a
    #: ``postgres_dsn`` server ``hippo_<save_dir name>``); one schema per index
    postgres_schema: str | None = Field(None, pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: how retrieval reads a PostgreSQL index: "hnsw" (the default: facts and entities are searched
    #: in the database, top-k by pgvector's HNSW index and rescored exactly; the query process
    #: holds only the passage vectors, the fact ids and the graph), "exact" (the same, with exact
    #: scans in the database: the rankings of the SQLite backend, slower on large indexes) or
    #: "memory" (every vector mirrored in RAM, as the SQLite backend does; writers too, else they
    #: hold only ids and stream vectors from the database).
    postgres_search: Literal["hnsw", "exact", "memory"] = "hnsw"
    #: with ``postgres_search="hnsw"``: pgvector's ``ef_search`` for the search that finds the lowest fact
    #: score of a query (the minimum of HippoRAG 2's min-max normalisation: the best rows for the negated
    #: query). Only its single lowest row matters, so it needs far fewer index pages than the top search
    #: (``ef_search`` 100): at 1M passages 20 halved the query's p50 (341 -> 171 ms) with the same candidate
    #: facts and the same agreement with exact PPR (reproduce/results/pg_scale/1m/STATUS.md)
    postgres_floor_ef_search: int = Field(20, ge=1, le=1000)
    #: the FalkorDB server of a ``falkordb`` index: a ``falkordb://[:password@]host:port[/graph]`` URL of a
    #: running server, or the data folder of an embedded one (started or joined); None: an embedded server
    #: under ``<save_dir>/falkordb``. The graph: the URL's, else ``hippo`` on the index's own embedded
    #: server, else one per index folder (``hippo_<save_dir name>_<hash>``)
    falkordb_server: str | None = None

    def __repr_args__(self):
        """The DSN's and the FalkorDB URL's passwords are masked in reprs."""
        for name, value in super().__repr_args__():
            yield name, (_shown(name, value) if name in ("postgres_dsn", "falkordb_server") else value)

    @field_validator("postgres_dsn")
    @classmethod
    def _dsn(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("postgresql://", "postgres://")) and "=" not in v:
            raise ValueError("postgres_dsn must be a postgresql:// URL or a key=value connection string")
        return v


class HiRAGConfig(_Section):
    """Hierarchical communities (HiRAG): off by default, retrieval is then exactly HippoRAG 2."""

    use_community_nodes: bool = False       # community nodes in the PPR graph, seeded per query
    max_cluster_size: int = Field(10, gt=0)  # larger communities are split one level down
    community_seed: int = Field(0, ge=0)     # Leiden random seed
    community_min_size: int = Field(2, ge=0)
    community_max_levels: int = Field(8, gt=0)
    community_entity_weight: float = Field(1.0, ge=0.0)
    community_parent_weight: float = Field(1.0, ge=0.0)
    community_seed_weight: float = Field(0.05, ge=0.0)
    community_seed_top_k: int = Field(5, gt=0)
    community_report_context_tokens: int = Field(3000, gt=0)
    community_report_max_new_tokens: int = Field(768, gt=0)
    community_auto_update: bool = True      # rebuild stale communities (after index/delete) on use
    #: LLM reports a build made on use (by a query, with community_auto_update) may write; the
    #: rest list their members. 0 (default): a query never sends reports to the LLM as a side
    #: effect; None: no cap. ``build_communities()`` is the explicit way to write them.
    community_auto_llm_reports: int | None = Field(0, ge=0)
    hi_top_k: int = Field(20, gt=0)          # entities retrieved per query
    hi_top_m: int = Field(10, gt=0)          # key entities per retrieved community (bridge)
    hi_level: int = Field(2, ge=0)           # communities up to this level are used
    hi_text_unit_tokens: int = Field(20000, gt=0)
    hi_local_context_tokens: int = Field(20000, gt=0)
    hi_bridge_tokens: int = Field(12500, gt=0)
    hi_report_tokens: int = Field(12500, gt=0)


class GraphRAGConfig(_Section):
    """The GraphRAG query modes (``graphrag_local``, ``graphrag_global``; see :mod:`hippo_engine.graphrag`).
    Budgets are tokens of the encoder's tokenizer (else words); nano-graphrag's defaults."""

    graphrag_top_k: int = Field(20, gt=0)                 # entities found by vector search (local)
    graphrag_level: int = Field(2, ge=0)                  # communities up to this level
    graphrag_text_unit_tokens: int = Field(4000, gt=0)    # local: the text units (sources)
    graphrag_local_context_tokens: int = Field(4800, gt=0)  # local: entities + relations
    graphrag_report_tokens: int = Field(3200, gt=0)       # local: reports; global: one map batch
    graphrag_global_max_batches: int = Field(4, gt=0)     # global: at most this many map calls
    graphrag_global_min_rating: float = Field(0.0, ge=0.0)  # global: reports rated lower are skipped
    graphrag_reduce_tokens: int = Field(4000, gt=0)       # global: the rated points the reduce reads
    graphrag_map_max_new_tokens: int = Field(512, gt=0)
    graphrag_response_type: str = "a short answer: a few words, no explanation"


class KBConfig(_Section):
    """The graph knowledge-base query modes (``kb_vector``, ``kb_graph``, ``kb_hybrid``,
    ``kb_global``; AgentScope's Neo4j design, see :mod:`hippo_engine.kb`)."""

    kb_score_threshold: float = Field(0.0, ge=-1.0, le=1.0)  # cosine below this is dropped
    kb_seed_entities: int = Field(5, gt=0)      # graph: entities found by vector search
    kb_hops: int = Field(2, ge=0)               # graph: traversal depth from the seeds
    kb_communities: int = Field(3, gt=0)        # global: communities nearest the query
    kb_rrf_k: int = Field(60, gt=0)             # hybrid: reciprocal-rank fusion constant


SECTIONS: dict[str, type[_Section]] = {
    "index": IndexConfig, "retrieval": RetrievalConfig, "ppr": PPRConfig, "llm": LLMConfig,
    "embedding": EmbeddingConfig, "storage": StorageConfig, "hirag": HiRAGConfig,
    "graphrag": GraphRAGConfig, "kb": KBConfig,
}


def _shown(field: str, value: Any) -> Any:
    """``value`` as a repr or an error message may show it: the API key masked, the DSN with its
    password masked (``field``: the section's field name)."""
    if value is None or not isinstance(value, str):
        return value
    if field == "api_key":
        return "***"
    if field in ("postgres_dsn", "falkordb_server"):
        return redact_dsn(value)
    return value
