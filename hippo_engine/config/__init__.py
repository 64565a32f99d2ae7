"""Configuration: grouped, immutable sections with the paper's defaults, validated in one place.

``HippoConfig`` holds nine sections (``index``, ``retrieval``, ``ppr``, ``llm``, ``embedding``, ``storage``,
``hirag``, ``graphrag``, ``kb``); each is a frozen pydantic model, so a typo, a wrong type or an out-of-range value
fails when the object is built, and nothing can change it afterwards. Fields are also readable
flat (``config.damping`` is ``config.ppr.damping``), and ``HippoConfig(damping=0.3)`` /
``config.replace(use_filter=False)`` take flat field names, so keyword overrides such as
``HippoRAG(dir, use_filter=False)`` keep working.

Per-call options of a query live in :class:`QueryParam`, not in the configuration.
Defaults follow the HippoRAG 2 paper's setup.

The sections are defined in :mod:`.sections`, ``HippoConfig`` and the flat names in :mod:`.flat`;
every name is imported from here.
"""
from __future__ import annotations

from hippo_engine.config.flat import FLAT_FIELDS, HippoConfig
from hippo_engine.config.sections import (
    EXTRACTORS,
    LINKING_MODES,
    SECTIONS,
    EmbeddingConfig,
    GraphRAGConfig,
    HiRAGConfig,
    IndexConfig,
    KBConfig,
    LLMConfig,
    PPRConfig,
    RetrievalConfig,
    StorageConfig,
)
from hippo_engine.errors import ConfigError
from hippo_engine.modes import mode_names

# per-call options live in their own module; imported here so ``from hippo_engine.config import QueryParam`` works
from hippo_engine.query_param import QueryParam

__all__ = [
    "EXTRACTORS", "FLAT_FIELDS", "LINKING_MODES", "SECTIONS", "ConfigError", "EmbeddingConfig", "GraphRAGConfig",
    "HiRAGConfig", "HippoConfig", "IndexConfig", "KBConfig", "LLMConfig", "PPRConfig", "QueryParam",
    "RetrievalConfig", "StorageConfig",
]


def __getattr__(name: str):
    """``MODES``: every registered mode (:func:`hippo_engine.modes.mode_names`, read when asked)."""
    if name == "MODES":
        return mode_names()
    raise AttributeError(f"module 'hippo_engine.config' has no attribute {name!r}")
