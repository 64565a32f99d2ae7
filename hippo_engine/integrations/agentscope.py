"""A HippoRAG memory as an AgentScope knowledge base (extra ``agentscope``: ``pip install "hippo-engine[agentscope]"``).

:class:`HippoKnowledgeBase` subclasses ``agentscope.rag.KnowledgeBase`` and answers its operations from
the memory instead of an embedding model and a vector store:

- ``await kb.search(queries, top_k, score_threshold)``: each query retrieved in the knowledge base's
  ``mode`` (any mode of ``HippoRAG.retrieve``), merged by passage (best score kept), best first; each
  ``VectorSearchResult`` has the passage's first document id, a ``Chunk`` with the passage text, the
  document's title as ``source`` and the ``hippo_*`` metadata (see :mod:`hippo_engine.integrations.common`);
- ``await kb.insert_document(chunks, document_id, document_metadata)``: the chunks' text becomes one
  document of the memory (``HippoRAG.index``), which cuts and links it itself;
- ``delete_document``, ``list_documents``, ``list_chunks`` (a document's passages);
- ``kb.add_documents(texts, ids, metadata)``: the synchronous way in, straight to ``HippoRAG.index``.

Give it to an agent as any knowledge base: ``Agent(..., middlewares=[RAGMiddleware([kb])])``. The memory's
calls are blocking; the coroutines run them in a worker thread, one at a time. An option the knowledge base
does not take (in its constructor or ``search``) is a ``TypeError`` naming it and the options it does take.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from hippo_engine.integrations.common import Hit, MemorySearch, missing_extra, refuse_unknown

try:
    from agentscope.message import TextBlock
    from agentscope.rag import Chunk, DocumentSummary, KnowledgeBase, VectorSearchResult
except ImportError as _exc:
    raise missing_extra("agentscope", _exc) from _exc

#: what another spelling is called here (AgentScope gives the number of chunks with each search)
HINTS = {"top_k": "AgentScope gives top_k with each search: await kb.search(queries, top_k=...)",
         "k": "the number of chunks is search()'s top_k",
         "similarity_top_k": "the number of chunks is search()'s top_k",
         "metadata_filter": "filter by document metadata with where=, the engine's filter (see HippoRAG.retrieve)",
         "embedding_model": "the memory embeds with its own model", "vector_store": "the memory is the store"}

DESCRIPTION = ("Long-term memory (HippoRAG): passages linked through a knowledge graph of their entities; "
               "good for questions that join facts from several documents.")


class HippoKnowledgeBase(KnowledgeBase):
    """An AgentScope knowledge base backed by a HippoRAG memory (see the module docstring).

    ``memory``: a ``HippoRAG`` or a save folder (opened with ``rag_options``); ``mode``, ``where``,
    ``explain``: as in :class:`~hippo_engine.integrations.common.MemorySearch` (``top_k`` comes with each
    search, as AgentScope passes it)."""

    def __init__(self, memory: Any, *, name: str = "hippo-memory", description: str = DESCRIPTION,
                 mode: str | None = None, where: dict | None = None, explain: bool = False,
                 rag_options: dict | None = None, **unknown: Any) -> None:
        refuse_unknown("HippoKnowledgeBase", unknown,
                       ["memory", "name", "description", "mode", "where", "explain", "rag_options"], HINTS)
        self.memory = MemorySearch(memory, mode=mode, where=where, explain=explain, rag_options=rag_options)
        super().__init__(name=name, description=description, embedding_model=None,  # type: ignore[arg-type]
                         vector_store=None,  # type: ignore[arg-type]
                         collection=str(self.memory.rag.save_dir))
        self._lock = threading.Lock()     # not an asyncio lock: any event loop may call

    async def _run(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` in a worker thread, one memory call at a time."""
        def locked():
            with self._lock:
                return fn(*args, **kwargs)
        return await asyncio.to_thread(locked)

    async def ensure_collection(self) -> None:
        """Nothing to create: the memory's folder is its collection."""

    # ------------------------------------------------------------------ search
    async def search(self, queries: list, top_k: int = 5, score_threshold: float | None = None,
                     **unknown: Any) -> list:
        """The passages the text queries retrieve (non-text blocks are skipped), merged and best first."""
        refuse_unknown("HippoKnowledgeBase.search()", unknown, ["queries", "top_k", "score_threshold"],
                       {k: v for k, v in HINTS.items() if k != "top_k"})
        texts = [q if isinstance(q, str) else q.text for q in queries if isinstance(q, (str, TextBlock))]
        best: dict[str, Hit] = {}
        for text in (t for t in texts if t.strip()):
            for hit in await self._run(self.memory.search, text, top_k=top_k):
                if score_threshold is not None and hit.score < score_threshold:
                    continue
                if hit.passage_id not in best or hit.score > best[hit.passage_id].score:
                    best[hit.passage_id] = hit
        ranked = sorted(best.values(), key=lambda h: h.score, reverse=True)[:top_k]
        return [await self._result(h) for h in ranked]

    async def _result(self, hit: Hit) -> Any:
        """The ``VectorSearchResult`` of one hit (``chunk_index``: the passage's place in its document)."""
        doc_id = hit.doc_ids[0] if hit.doc_ids else hit.passage_id
        held, _ = await self._run(self.memory.rag.index_state.documents.stored_documents, [doc_id])
        pids = held.get(doc_id, [hit.passage_id])
        index = pids.index(hit.passage_id) if hit.passage_id in pids else 0
        chunk = Chunk(content=TextBlock(text=hit.text), source=hit.title, chunk_index=index,
                           total_chunks=max(len(pids), 1), metadata=hit.metadata())
        return VectorSearchResult(score=hit.score, document_id=doc_id, chunk=chunk)

    # ------------------------------------------------------------------ documents
    def add_documents(self, texts: Sequence[str], ids: Sequence[str] | None = None,
                      metadata: Sequence[Mapping[str, Any]] | None = None) -> dict:
        """Index documents (``"title\\ntext"`` each) now; returns ``HippoRAG.index``'s report."""
        return self.memory.index(texts, ids=ids, metadata=metadata)

    async def insert_document(self, chunks: list, document_id: str | None = None,
                              document_metadata: dict | None = None) -> str:
        """Index the chunks' text as one document, its title line the first chunk's ``source`` (unless the
        text already starts with that line); the metadata: ``document_metadata`` and the first chunk's."""
        parts = [c.content.text for c in chunks if isinstance(c.content, TextBlock) and c.content.text.strip()]
        if not parts:
            raise ValueError("insert_document: the chunks hold no text (only text chunks can be indexed)")
        source = chunks[0].source
        titled = parts[0].split("\n", 1)[0].strip() == source.strip()     # already "title\ntext"
        text = "\n".join(parts if titled else [source, *parts])
        meta = {**(document_metadata or {}), **chunks[0].metadata}
        report = await self._run(self.memory.index, [text], ids=[document_id] if document_id else None,
                                 metadata=[meta])
        changed = report.get("documents", {})
        written = changed.get("added", []) + changed.get("replaced", [])
        return document_id or (written[0] if written else self._doc_id_of(text))

    @staticmethod
    def _doc_id_of(text: str) -> str:
        from hippo_engine.ids import document_id
        return document_id(text)

    async def delete_document(self, document_id: str) -> None:
        """Remove one document (``HippoRAG.delete``; an unknown id is not an error)."""
        await self._run(self.memory.rag.delete, ids=[document_id])

    async def list_documents(self) -> list:
        """One ``DocumentSummary`` per document of the memory."""
        def summaries() -> list:
            docs = self.memory.rag.index_state.all_documents()
            meta = self.memory.rag.document_metadata(list(docs))
            passages = self.memory.rag.index_state.stores["passage"]
            return [DocumentSummary(document_id=d, source=_title(passages, pids), chunk_count=len(pids),
                                         metadata=meta.get(d, {})) for d, pids in sorted(docs.items())]
        return await self._run(summaries)

    async def list_chunks(self, document_id: str, *, offset: int = 0, limit: int = 30) -> list:
        """A document's passages as chunks, in order (``offset``, ``limit`` as AgentScope's)."""
        def chunks() -> list:
            pids = self.memory.rag.index_state.all_documents().get(document_id, [])
            passages = self.memory.rag.index_state.stores["passage"]
            return [Chunk(content=TextBlock(text=passages.text(p)), source=_title(passages, pids),
                               chunk_index=i, total_chunks=len(pids), metadata={"hippo_passage_id": p})
                    for i, p in enumerate(pids) if offset <= i < offset + limit]
        return await self._run(chunks)


def _title(passages: Any, pids: Sequence[str]) -> str:
    """A document's title: its first passage's first line."""
    return passages.text(pids[0]).split("\n", 1)[0] if pids else ""
