"""A HippoRAG memory as a LangChain retriever (extra ``langchain``: ``pip install "hippo-engine[langchain]"``).

:class:`HippoRetriever` is a ``langchain_core`` ``BaseRetriever``: ``retriever.invoke(query)`` returns
LangChain ``Document`` objects, best first, with ``id`` = the passage id and the ``hippo_*`` metadata
(score, rank, passage and document ids, and with ``explain=True`` the explanation; see
:mod:`hippo_engine.integrations.common`). ``invoke(query, top_k=..., where=..., mode=...)`` overrides the
retriever's options for one call. It composes with LCEL like any retriever
(``{"context": retriever | format_docs, ...} | prompt | model``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hippo_engine.integrations.common import MemorySearch, missing_extra

try:
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as _exc:
    raise missing_extra("langchain", _exc) from _exc


class HippoRetriever(BaseRetriever):
    """Retrieves passages from a HippoRAG memory (see the module docstring).

    ``memory``: a ``HippoRAG`` or a save folder (opened with ``rag_options``); ``mode``, ``top_k``,
    ``where``, ``explain``: as in :class:`~hippo_engine.integrations.common.MemorySearch`."""

    search: Any = None   # the MemorySearch (pydantic field: set by __init__)

    def __init__(self, memory: Any, *, mode: str | None = None, top_k: int = 5, where: dict | None = None,
                 explain: bool = False, rag_options: dict | None = None, **fields: Any) -> None:
        if isinstance(memory, Path):
            memory = str(memory)
        super().__init__(**fields)
        self.search = MemorySearch(memory, mode=mode, top_k=top_k, where=where, explain=explain,
                                   rag_options=rag_options)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, top_k: int | None = None,
                                where: dict | None = None, mode: str | None = None) -> list[Document]:
        """The passages ``query`` retrieves, as LangChain documents."""
        hits = self.search.search(query, top_k=top_k, where=where, mode=mode)
        return [Document(page_content=h.text, metadata=h.metadata(), id=h.passage_id) for h in hits]
