"""The one typed configuration object of hippo-engine.

Defaults follow the HippoRAG 2 paper (spec section 4). Every field is validated when the
object is built, so a typo or an out-of-range value fails early with a clear message.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

LINKING_MODES = ("fact", "ner", "query")
NORMALIZATIONS = ("unicode", "reference")
EMBEDDING_DTYPES = ("float32", "bfloat16")
PPR_BACKENDS = ("power", "igraph")
LLM_BACKENDS = ("auto", "transformers", "llama_cpp")


class ConfigError(ValueError):
    """Raised when a configuration value is invalid."""


@dataclass
class HippoConfig:
    """All knobs of the engine, with the paper's defaults.

    Retrieval (paper section 3 / spec section 2)
        linking_top_k: candidate facts scored against the query, and entity seeds kept (5).
        retrieval_top_k: passages returned by ``retrieve`` (200).
        qa_top_k: passages the reader sees (5).
        damping: Personalized PageRank damping factor (0.5).
        passage_node_weight: weight of the dense-retrieval passage seeds (0.05).
        linking: how the query is linked to the graph: ``"fact"`` (paper), ``"ner"`` (query
            NER entities matched to entity nodes) or ``"query"`` (query embedding matched to
            entity nodes). The last two are the paper's ablations.
        use_passage_nodes: seed passages with their dense scores (ablation switch).
        use_filter: run the recognition-memory LLM filter over the candidate facts.
        max_filtered_facts: at most this many facts survive the filter (4).
    """

    # --- retrieval -------------------------------------------------------------------
    linking_top_k: int = 5
    retrieval_top_k: int = 200
    qa_top_k: int = 5
    damping: float = 0.5
    passage_node_weight: float = 0.05
    linking: str = "fact"
    use_passage_nodes: bool = True
    use_filter: bool = True
    max_filtered_facts: int = 4
    filter_program_path: Optional[str] = None
    ppr_backend: str = "power"
    ppr_tol: float = 1e-6                   # stop at an L1 change below this (per query)
    ppr_max_iter: int = 200

    # --- graph -----------------------------------------------------------------------
    synonymy_threshold: float = 0.8
    synonymy_max_neighbors: int = 100
    synonymy_min_alnum_chars: int = 3
    synonymy_block_size: int = 4096
    normalization: str = "unicode"

    # --- LLM -------------------------------------------------------------------------
    llm_base_url: Optional[str] = None
    llm_api_key: Optional[str] = None
    temperature: float = 0.0
    max_new_tokens: int = 2048
    llm_max_concurrency: int = 8
    llm_timeout: float = 120.0
    llm_max_retries: int = 5
    llm_cache: bool = True
    # Local models: "llama_cpp" runs a GGUF with llama-cpp-python (optional extra ``fast``),
    # "transformers" de-quantises it into torch; "auto" takes llama_cpp when it is installed.
    llm_backend: str = "auto"
    llm_threads: Optional[int] = None       # CPU threads of a local model (None: all usable)

    # --- embedding -------------------------------------------------------------------
    embedding_batch_size: int = 64
    embedding_dtype: str = "float32"
    embedding_max_length: Optional[int] = None
    embedding_num_workers: Optional[int] = None   # parallel forward passes (None: one per usable CPU)
    query_instruction_fact: Optional[str] = None
    query_instruction_passage: Optional[str] = None

    # --- indexing --------------------------------------------------------------------
    chunk_size: Optional[int] = None
    chunk_overlap: int = 0

    # --- communities (HiRAG) --------------------------------------------------------
    # Hierarchical Leiden communities of the entity graph, their LLM reports, community
    # summary nodes in the PPR graph and HiRAG's retrieval modes (hippo_engine.communities,
    # hippo_engine.hirag). Off by default: retrieval is then exactly HippoRAG 2.
    use_community_nodes: bool = False       # add community nodes to the PPR graph and seed them
    max_cluster_size: int = 10              # communities larger than this are split one level down
    community_seed: int = 0                 # Leiden random seed (results are deterministic per seed)
    community_min_size: int = 2             # smaller communities (singletons) are not recorded
    community_max_levels: int = 8           # safety cap on the hierarchy depth
    community_entity_weight: float = 1.0    # edge weight community node <-> member entity
    community_parent_weight: float = 1.0    # edge weight community node <-> parent community
    community_seed_weight: float = 0.05     # reset weight x min-max(query . report vector)
    community_seed_top_k: int = 5           # community nodes seeded per query
    community_report_context_tokens: int = 3000   # context budget of one report prompt
    community_report_max_new_tokens: int = 768    # reply budget of one report
    community_auto_update: bool = True      # rebuild stale communities (after index/delete) on use
    hi_top_k: int = 20                      # HiRAG: entities retrieved per query
    hi_top_m: int = 10                      # HiRAG: key entities per retrieved community (bridge)
    hi_level: int = 2                       # HiRAG: communities up to this level are used
    hi_text_unit_tokens: int = 20000        # HiRAG token budgets per context section
    hi_local_context_tokens: int = 20000
    hi_bridge_tokens: int = 12500
    hi_report_tokens: int = 12500

    # --- storage and performance (see reproduce/bench.py) ---------------------------
    # Embedding vectors on disk as "float32" or "float16" (half the bytes, ~3 significant
    # digits); embedding_mmap memory-maps them on load from <save_dir>/vectors/*.npy.
    embedding_storage_dtype: str = "float32"
    embedding_mmap: bool = False
    # Personalized PageRank kernel (hippo_engine.ppr): Chebyshev-accelerated iteration on a
    # float32 CSR matrix built once per graph version, ppr_block_size queries per sparse x
    # dense product; queries are scored and seeded query_batch_size at a time.
    ppr_dtype: str = "float32"              # "float32" | "float64"
    ppr_method: str = "chebyshev"           # "chebyshev" | "power"
    ppr_block_size: Optional[int] = None    # None: fit the columns of a block in ~2 MB of cache
    query_batch_size: int = 64

    # --- misc ------------------------------------------------------------------------
    show_progress: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------------------
    def validate(self) -> None:
        def positive_int(name: str, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")

        def unit_interval(name: str, open_low: bool = False) -> None:
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ConfigError(f"{name} must be a number, got {v!r}")
            if not (0.0 <= v <= 1.0) or (open_low and v == 0.0):
                raise ConfigError(f"{name} must lie in {'(0, 1]' if open_low else '[0, 1]'}, got {v!r}")

        def choice(name: str, options: tuple) -> None:
            v = getattr(self, name)
            if v not in options:
                raise ConfigError(f"{name} must be one of {', '.join(map(repr, options))}; got {v!r}")

        for n in ("linking_top_k", "retrieval_top_k", "qa_top_k", "max_filtered_facts",
                  "synonymy_max_neighbors", "synonymy_block_size", "max_new_tokens",
                  "llm_max_concurrency", "embedding_batch_size", "ppr_max_iter"):
            positive_int(n)
        positive_int("embedding_max_length", allow_none=True)
        positive_int("chunk_size", allow_none=True)
        if not isinstance(self.synonymy_min_alnum_chars, int) or self.synonymy_min_alnum_chars < 0:
            raise ConfigError("synonymy_min_alnum_chars must be an integer >= 0")
        if not isinstance(self.llm_max_retries, int) or self.llm_max_retries < 0:
            raise ConfigError("llm_max_retries must be an integer >= 0")
        if not isinstance(self.chunk_overlap, int) or self.chunk_overlap < 0:
            raise ConfigError("chunk_overlap must be an integer >= 0")
        if self.chunk_size is not None and self.chunk_overlap >= self.chunk_size:
            raise ConfigError("chunk_overlap must be smaller than chunk_size")
        unit_interval("damping", open_low=True)
        if self.damping >= 1.0:
            raise ConfigError("damping must be < 1 (with 1 the walk never resets)")
        unit_interval("passage_node_weight")
        unit_interval("synonymy_threshold")
        if not (isinstance(self.ppr_tol, float) and self.ppr_tol > 0):
            raise ConfigError("ppr_tol must be a positive float")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError("temperature must be >= 0")
        if not isinstance(self.llm_timeout, (int, float)) or self.llm_timeout <= 0:
            raise ConfigError("llm_timeout must be > 0 seconds")
        choice("linking", LINKING_MODES)
        choice("normalization", NORMALIZATIONS)
        choice("embedding_dtype", EMBEDDING_DTYPES)
        choice("ppr_backend", PPR_BACKENDS)
        choice("llm_backend", LLM_BACKENDS)
        choice("embedding_storage_dtype", ("float32", "float16"))
        if not isinstance(self.embedding_mmap, bool):
            raise ConfigError(f"embedding_mmap must be True or False, got {self.embedding_mmap!r}")
        positive_int("llm_threads", allow_none=True)
        positive_int("embedding_num_workers", allow_none=True)
        positive_int("query_batch_size")
        positive_int("ppr_block_size", allow_none=True)
        choice("ppr_dtype", ("float32", "float64"))
        choice("ppr_method", ("chebyshev", "power"))
        for b in ("use_passage_nodes", "use_filter", "llm_cache", "show_progress"):
            if not isinstance(getattr(self, b), bool):
                raise ConfigError(f"{b} must be True or False, got {getattr(self, b)!r}")
        # --- communities (HiRAG) ---
        for n in ("max_cluster_size", "community_seed_top_k", "community_report_context_tokens",
                  "community_report_max_new_tokens", "community_max_levels", "hi_top_k", "hi_top_m",
                  "hi_text_unit_tokens", "hi_local_context_tokens", "hi_bridge_tokens", "hi_report_tokens"):
            positive_int(n)
        for n in ("community_seed", "community_min_size", "hi_level"):
            v = getattr(self, n)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{n} must be an integer >= 0, got {v!r}")
        for n in ("community_entity_weight", "community_parent_weight", "community_seed_weight"):
            v = getattr(self, n)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (v >= 0) or v == float("inf"):
                raise ConfigError(f"{n} must be a finite number >= 0, got {v!r}")
        for b in ("use_community_nodes", "community_auto_update"):
            if not isinstance(getattr(self, b), bool):
                raise ConfigError(f"{b} must be True or False, got {getattr(self, b)!r}")

    def replace(self, **overrides: Any) -> "HippoConfig":
        """A copy with some fields changed (validated). Unknown names raise ConfigError."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown HippoConfig field(s): {', '.join(unknown)}; "
                              f"known fields: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
