"""A query's ranked passages as every front door shows them: the one shaping of a
:class:`~hippo_engine.datatypes.QuerySolution` into :class:`RankedPassage` records (rank, passage id,
the documents holding it, score, text, title and, when asked, the documents' stored metadata).

The HTTP API and the MCP server send :meth:`RankedPassage.to_dict` (``hippo_engine.service.results``); the
framework adapters turn the records into their own document types (``hippo_engine.integrations.common``).
A base module: it imports nothing of the engine but :mod:`hippo_engine.datatypes` (numpy where scores are read).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hippo_engine.datatypes import QuerySolution

#: doc ids -> their stored metadata (``HippoRAG.document_metadata``)
MetadataLookup = Callable[[Sequence[str]], Mapping[str, dict]]


def finite(x: Any) -> float | None:
    """``x`` as a float, or None when it is not a finite number (JSON has no NaN or infinity)."""
    v = float(x)
    return v if math.isfinite(v) else None


def first_document_id(doc_ids: Sequence[str], passage_id: str) -> str:
    """The id to name a passage's document by (to delete it, say): the first document holding it, else (a
    passage indexed before document ids were recorded) the passage's own id."""
    return (list(doc_ids) or [passage_id])[0]


@dataclass
class RankedPassage:
    """One ranked passage: its 1-based ``rank``, its id (``id``), the ids of the documents holding it
    (``doc_ids``), its ``score`` (None: the solution has no score for it), its ``text`` (``"title\\ntext"``
    with a title) and, when looked up, the stored metadata of its documents (``documents``: doc id -> object)."""

    rank: int
    id: str
    doc_ids: list[str]
    score: float | None
    text: str
    documents: dict[str, dict] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """The passage's title line (its first line)."""
        return self.text.split("\n", 1)[0]

    @property
    def doc_id(self) -> str:
        """The first document holding the passage (:func:`first_document_id`)."""
        return first_document_id(self.doc_ids, self.id)

    def to_dict(self) -> dict[str, Any]:
        """As the HTTP API and the MCP server send it: ``{"id", "text", "score", "doc_ids", "rank"}`` (the score
        None when missing or not finite)."""
        return {"id": self.id, "text": self.text, "score": None if self.score is None else finite(self.score),
                "doc_ids": list(self.doc_ids), "rank": self.rank}


def ranked_passages(sol: QuerySolution, document_metadata: MetadataLookup | None = None) -> list[RankedPassage]:
    """The passages of ``sol``, best first. ``document_metadata`` (doc ids -> their metadata): fill each
    passage's ``documents`` (doc id -> its metadata; ``{}`` for a document without metadata, and for every
    document without ``document_metadata``)."""
    import numpy as np

    scores = [float(s) for s in np.asarray(sol.doc_scores, dtype=float).ravel()]
    all_ids = sorted({d for ids in sol.doc_ids for d in ids})
    stored = document_metadata(all_ids) if document_metadata and all_ids else {}
    out = []
    for i, text in enumerate(sol.docs):
        doc_ids = list(sol.doc_ids[i]) if i < len(sol.doc_ids) else []
        out.append(RankedPassage(rank=i + 1, id=sol.passage_ids[i] if i < len(sol.passage_ids) else "",
                                 doc_ids=doc_ids, score=scores[i] if i < len(scores) else None, text=text,
                                 documents={d: stored.get(d, {}) for d in doc_ids}))
    return out


__all__ = ["MetadataLookup", "RankedPassage", "finite", "first_document_id", "ranked_passages"]
