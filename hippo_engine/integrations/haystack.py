"""A HippoRAG memory in a Haystack ``Pipeline`` (extra ``haystack``: ``pip install "hippo-engine[haystack]"``).

- :class:`HippoRetriever`: ``run(query, top_k=None, where=None, mode=None)`` -> ``{"documents": [Document]}``,
  best first, each ``Document`` with ``id`` = the passage id, ``score`` and the ``hippo_*`` metadata
  (see :mod:`hippo_engine.integrations.common`); the number of documents is ``top_k``, as for Haystack's own
  retrievers;
- :class:`HippoWriter`: ``run(documents)`` -> ``{"documents_written": n}``: indexes each ``Document``'s
  ``content`` under its ``id`` with its ``meta`` as the document's metadata (``HippoRAG.index``).

Both take a ``HippoRAG`` or a save folder (plus ``rag_options``); built from a folder they serialise
with the pipeline (``Pipeline.dumps``/``loads``). Haystack's usage telemetry is off unless
``HAYSTACK_TELEMETRY_ENABLED`` is set (the engine works offline). An option a component does not take (in its
constructor or ``run``) is a ``TypeError`` naming it and the options it does take.
"""
# no ``from __future__ import annotations``: Haystack reads the run() annotations as types
import os
from pathlib import Path
from typing import Any

from hippo_engine.integrations.common import MemorySearch, missing_extra, refuse_unknown

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")   # read when haystack is first imported
try:
    from haystack import Document, component, default_from_dict, default_to_dict
except ImportError as _exc:
    raise missing_extra("haystack", _exc) from _exc

#: what another framework's spelling is called here
HINTS = {"k": "Haystack's number of documents is top_k", "similarity_top_k": "Haystack's number of documents is top_k",
         "filters": "filter by document metadata with where=, the engine's filter (see HippoRAG.retrieve)"}


def _folder(search: MemorySearch, given: Any) -> str:
    """The save folder to serialise (a component built from a HippoRAG object cannot be)."""
    if not isinstance(given, (str, Path)):
        raise TypeError("only a component built from a save folder can be serialised; pass the folder, "
                        "not a HippoRAG object")
    return str(search.rag.save_dir)


@component
class HippoRetriever:
    """Retrieves passages from a HippoRAG memory (see the module docstring)."""

    def __init__(self, memory: Any, mode: str | None = None, top_k: int = 5, where: dict | None = None,
                 explain: bool = False, rag_options: dict | None = None, **unknown: Any) -> None:
        refuse_unknown("the Haystack HippoRetriever", unknown,
                       ["memory", "mode", "top_k", "where", "explain", "rag_options"], HINTS)
        self._given, self._rag_options = memory, rag_options
        self.search = MemorySearch(memory, mode=mode, top_k=top_k, where=where, explain=explain,
                                   rag_options=rag_options)

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None, where: dict | None = None,
            mode: str | None = None, **unknown: Any) -> dict[str, list[Document]]:
        """The passages ``query`` retrieves (``top_k``, ``where``, ``mode`` override the component's)."""
        refuse_unknown("HippoRetriever.run()", unknown, ["query", "top_k", "where", "mode"], HINTS)
        hits = self.search.search(query, top_k=top_k, where=where, mode=mode)
        return {"documents": [Document(id=h.passage_id, content=h.text, score=h.score, meta=h.metadata())
                              for h in hits]}

    def to_dict(self) -> dict[str, Any]:
        """Serialise (only when built from a save folder)."""
        return default_to_dict(self, memory=_folder(self.search, self._given), rag_options=self._rag_options,
                               **self.search.options())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HippoRetriever":
        return default_from_dict(cls, data)


@component
class HippoWriter:
    """Indexes Haystack documents into a HippoRAG memory (see the module docstring)."""

    def __init__(self, memory: Any, rag_options: dict | None = None, **unknown: Any) -> None:
        refuse_unknown("the Haystack HippoWriter", unknown, ["memory", "rag_options"])
        self._given, self._rag_options = memory, rag_options
        self.search = MemorySearch(memory, rag_options=rag_options)

    @component.output_types(documents_written=int)
    def run(self, documents: list[Document], **unknown: Any) -> dict[str, int]:
        """Index ``documents``; ``documents_written``: how many were added or replaced."""
        refuse_unknown("HippoWriter.run()", unknown, ["documents"])
        texts, ids, metadata = [], [], []
        for doc in documents:
            if not isinstance(doc.content, str) or not doc.content.strip():
                raise ValueError(f"HippoWriter: document {doc.id!r} has no text content")
            texts.append(doc.content)
            ids.append(doc.id)
            metadata.append(dict(doc.meta or {}))
        if not texts:
            return {"documents_written": 0}
        report = self.search.index(texts, ids=ids, metadata=metadata)
        changed = report.get("documents", {})
        return {"documents_written": len(changed.get("added", [])) + len(changed.get("replaced", []))}

    def to_dict(self) -> dict[str, Any]:
        """Serialise (only when built from a save folder)."""
        return default_to_dict(self, memory=_folder(self.search, self._given), rag_options=self._rag_options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HippoWriter":
        return default_from_dict(cls, data)
