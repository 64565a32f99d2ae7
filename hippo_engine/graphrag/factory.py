"""The search objects of the GraphRAG and knowledge-base modes, each built from its own config
section (``graphrag``, ``kb``) with its context builder injected: :func:`peer_searches`, which the
mode table (:class:`~hippo_engine.retrieve.searches.Searches`) registers."""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import HippoConfig
from hippo_engine.graphrag.global_context import GlobalContextBuilder
from hippo_engine.graphrag.global_search import GraphRAGGlobalSearch
from hippo_engine.graphrag.local import GraphRAGLocalSearch
from hippo_engine.graphrag.local_context import LocalContextBuilder
from hippo_engine.kb.base import KBSearch
from hippo_engine.kb.global_search import KBGlobalSearch
from hippo_engine.kb.graph import KBGraphSearch
from hippo_engine.kb.hybrid import KBHybridSearch
from hippo_engine.kb.vector import KBVectorSearch
from hippo_engine.llm.base import LLMClient

KB_SEARCHES: dict[str, type[KBSearch]] = {
    "kb_vector": KBVectorSearch, "kb_graph": KBGraphSearch, "kb_hybrid": KBHybridSearch, "kb_global": KBGlobalSearch}


def peer_searches(config: HippoConfig, hirag, encoder: Callable[[], object], llm: Callable[[], LLMClient],
                  restrictor) -> dict:
    """mode -> search object of ``graphrag_local``, ``graphrag_global`` and the kb_* modes."""
    rc, gc = config.retrieval, config.graphrag
    wrap = hirag.passage_contexts
    out: dict = {
        "graphrag_local": GraphRAGLocalSearch(rc, LocalContextBuilder(gc), hirag, encoder, wrap, restrictor),
        "graphrag_global": GraphRAGGlobalSearch(rc, gc, GlobalContextBuilder(gc), hirag, encoder, llm, wrap,
                                                restrictor),
    }
    for mode, cls in KB_SEARCHES.items():
        out[mode] = cls(mode, rc, config.kb, hirag, encoder, hirag.ranked_contexts, wrap, restrictor)
    return out
