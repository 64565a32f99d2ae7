"""A HippoRAG memory as a LangChain retriever (extra ``langchain``: ``pip install "hippo-engine[langchain]"``).

:class:`HippoRetriever` is a ``langchain_core`` ``BaseRetriever``: ``retriever.invoke(query)`` returns
LangChain ``Document`` objects, best first, with ``id`` = the passage id and the ``hippo_*`` metadata
(score, rank, passage and document ids, and with ``explain=True`` the explanation; see
:mod:`hippo_engine.integrations.common`). The number of passages is LangChain's ``k``, as for its own
retrievers (``HippoRetriever(memory, k=3)``, ``invoke(query, k=2)``; ``top_k``, the engine's name, is
accepted too, not both). ``invoke(query, k=..., where=..., mode=...)`` overrides the retriever's options for
one call; an unknown option is a ``TypeError``. It composes with LCEL like any retriever
(``{"context": retriever | format_docs, ...} | prompt | model``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hippo_engine.integrations.common import MemorySearch, missing_extra, passage_count, refuse_unknown

try:
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as _exc:
    raise missing_extra("langchain", _exc) from _exc

#: what another spelling is called here
HINTS = {"search_kwargs": "give k=, where=, mode= directly", "similarity_top_k": "LangChain's number of documents is k",
         "filter": "filter by document metadata with where=, the engine's filter (see HippoRAG.retrieve)"}
_OPTIONS = ["memory", "k", "top_k", "mode", "where", "explain", "rag_options"]


class HippoRetriever(BaseRetriever):
    """Retrieves passages from a HippoRAG memory (see the module docstring).

    ``memory``: a ``HippoRAG`` or a save folder (opened with ``rag_options``); ``k`` (or ``top_k``; default 5):
    passages per query; ``mode``, ``where``, ``explain``: as in
    :class:`~hippo_engine.integrations.common.MemorySearch`."""

    search: Any = None   # the MemorySearch (pydantic field: set by __init__)
    k: int = 5           # LangChain's name for the number of documents (read by tools that inspect retrievers)

    def __init__(self, memory: Any, *, k: int | None = None, top_k: int | None = None, mode: str | None = None,
                 where: dict | None = None, explain: bool = False, rag_options: dict | None = None,
                 **fields: Any) -> None:
        if isinstance(memory, Path):
            memory = str(memory)
        n = passage_count("k", k, top_k, 5) or 5
        base = set(BaseRetriever.model_fields)       # LangChain's own fields (name, tags, metadata)
        refuse_unknown("the LangChain HippoRetriever", {f: v for f, v in fields.items() if f not in base},
                       [*_OPTIONS, *sorted(base)], HINTS)
        super().__init__(**fields)
        self.k = n
        self.search = MemorySearch(memory, mode=mode, top_k=n, where=where, explain=explain,
                                   rag_options=rag_options)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None,
                                top_k: int | None = None, where: dict | None = None,
                                mode: str | None = None, **unknown: Any) -> list[Document]:
        """The passages ``query`` retrieves, as LangChain documents."""
        refuse_unknown("HippoRetriever.invoke()", unknown, ["k", "top_k", "where", "mode"], HINTS)
        hits = self.search.search(query, top_k=passage_count("k", k, top_k, None), where=where, mode=mode)
        return [Document(page_content=h.text, metadata=h.metadata(), id=h.passage_id) for h in hits]

