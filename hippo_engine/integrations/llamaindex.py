"""A HippoRAG memory as a LlamaIndex retriever (extra ``llamaindex``: ``pip install "hippo-engine[llamaindex]"``).

:class:`HippoRetriever` is a ``llama_index.core`` ``BaseRetriever``: ``retriever.retrieve(query)`` returns
``NodeWithScore`` objects, best first, each a ``TextNode`` with ``id_`` = the passage id, the score, and
the ``hippo_*`` metadata (see :mod:`hippo_engine.integrations.common`). The metadata is kept out of the
text LlamaIndex shows an LLM or an embedder (``excluded_llm_metadata_keys`` /
``excluded_embed_metadata_keys``), so a query engine's prompt holds the passages as ranked. Use it
where LlamaIndex takes a retriever: ``RetrieverQueryEngine.from_args(retriever, llm=...)``. The number of
passages is LlamaIndex's ``similarity_top_k``, as for its own retrievers (``top_k``, the engine's name, is
accepted too, not both). An option it does not take is a ``TypeError`` naming it and the options it takes.
"""
from __future__ import annotations

import inspect
from typing import Any

from hippo_engine.integrations.common import MemorySearch, missing_extra, passage_count, refuse_unknown

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as _exc:
    raise missing_extra("llamaindex", _exc) from _exc

#: what another spelling is called here
HINTS = {"k": "LlamaIndex's number of passages is similarity_top_k",
         "filters": "filter by document metadata with where=, the engine's filter (see HippoRAG.retrieve)"}


class HippoRetriever(BaseRetriever):
    """Retrieves passages from a HippoRAG memory (see the module docstring).

    ``memory``: a ``HippoRAG`` or a save folder (opened with ``rag_options``); ``similarity_top_k`` (or
    ``top_k``; default 5): passages per query; ``mode``, ``where``, ``explain``: as in
    :class:`~hippo_engine.integrations.common.MemorySearch`; other keyword arguments go to LlamaIndex's
    ``BaseRetriever`` (``callback_manager``, ``verbose``)."""

    def __init__(self, memory: Any, *, similarity_top_k: int | None = None, top_k: int | None = None,
                 mode: str | None = None, where: dict | None = None, explain: bool = False,
                 rag_options: dict | None = None, **kwargs: Any) -> None:
        base = [p for p in inspect.signature(BaseRetriever.__init__).parameters if p != "self"]
        refuse_unknown("the LlamaIndex HippoRetriever", {k: v for k, v in kwargs.items() if k not in base},
                       ["memory", "similarity_top_k", "top_k", "mode", "where", "explain", "rag_options", *base], HINTS)
        #: LlamaIndex's name for the number of passages per query
        self.similarity_top_k = passage_count("similarity_top_k", similarity_top_k, top_k, 5) or 5
        self.search = MemorySearch(memory, mode=mode, top_k=self.similarity_top_k, where=where, explain=explain,
                                   rag_options=rag_options)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The passages the bundle's query string retrieves, as scored text nodes."""
        out = []
        for hit in self.search.search(query_bundle.query_str):
            meta = hit.metadata()
            node = TextNode(id_=hit.passage_id, text=hit.text, metadata=meta,
                                    excluded_llm_metadata_keys=list(meta), excluded_embed_metadata_keys=list(meta))
            out.append(NodeWithScore(node=node, score=hit.score))
        return out
