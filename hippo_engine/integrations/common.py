"""What every framework adapter shares: the memory to search, how to search it, and the metadata each
result carries.

:class:`MemorySearch` holds a :class:`~hippo_engine.HippoRAG` (or opens one from a save folder) and the
search options (``mode``, ``top_k``, ``where``, ``explain``); :meth:`MemorySearch.search` returns
:class:`Hit` objects, which each adapter turns into its framework's document type. Any mode string is
passed through to :meth:`HippoRAG.retrieve`, which rejects an unknown one with a ``ValueError`` naming
the modes.

Metadata keys (the same in every framework): ``hippo_passage_id``, ``hippo_doc_ids``, ``hippo_score``,
``hippo_rank`` (1-based), ``hippo_mode``, ``hippo_documents`` (doc id -> its stored metadata) and, with
``explain=True``, ``hippo_explanation`` (an ``Explanation.to_dict()`` in the ``hipporag2`` mode, the
passage's ``ContextItem.to_dict()`` in the modes that assemble a context).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hippo_engine.results import ranked_passages

if TYPE_CHECKING:
    from hippo_engine.datatypes import QuerySolution
    from hippo_engine.hipporag import HippoRAG

#: the mode used when none is given (``QueryParam``'s default)
DEFAULT_MODE = "hipporag2"
#: the prefix of every metadata key the adapters add
PREFIX = "hippo_"


def missing_extra(extra: str, exc: ImportError) -> ImportError:
    """The ``ImportError`` an adapter raises when its framework is not installed: it names the extra."""
    return ImportError(f"hippo_engine.integrations.{extra} needs the {extra!r} extra: "
                       f'pip install "hippo-engine[{extra}]" ({exc})')


def passage_count(name: str, value: int | None, top_k: int | None, default: int | None) -> int | None:
    """The number of passages a framework asked for by its own ``name`` (``value``) or by the engine's ``top_k``:
    one of them (equal if both are given: else a ``TypeError``), ``default`` when neither is given."""
    if value is not None and top_k is not None and value != top_k:
        raise TypeError(f"give {name} or top_k, not both ({name}={value}, top_k={top_k})")
    return value if value is not None else top_k if top_k is not None else default


def refuse_unknown(where: str, unknown: Mapping[str, Any], takes: Sequence[str],
                   hints: Mapping[str, str] | None = None) -> None:
    """Raise a ``TypeError`` when ``unknown`` (the keyword arguments a call did not name) is not empty: it names
    each option, what ``where`` (e.g. ``"the Haystack HippoRetriever"``) takes instead, and a ``hints`` line for
    an option that is another framework's spelling (``{"k": "the number of documents is top_k"}``)."""
    if not unknown:
        return
    told = [f"{name!r}" + (f" ({hints[name]})" if hints and name in hints else "") for name in unknown]
    raise TypeError(f"{where} has no option {', '.join(told)}; its options: {', '.join(takes)}")


@dataclass
class Hit:
    """One retrieved passage: its ``text`` (``"title\\ntext"``), ``score``, 1-based ``rank``, ``passage_id``,
    the ids of the documents holding it (``doc_ids``) with their stored metadata (``documents``), the
    ``mode`` that ranked it and, when asked, its ``explanation`` (a JSON-ready dict)."""

    text: str
    score: float
    rank: int
    passage_id: str
    doc_ids: list[str]
    mode: str
    documents: dict[str, dict] = field(default_factory=dict)
    explanation: dict[str, Any] | None = None

    def metadata(self) -> dict[str, Any]:
        """The metadata an adapter puts on its framework's document (keys start with ``hippo_``)."""
        meta: dict[str, Any] = {f"{PREFIX}passage_id": self.passage_id, f"{PREFIX}doc_ids": list(self.doc_ids),
                                f"{PREFIX}score": self.score, f"{PREFIX}rank": self.rank, f"{PREFIX}mode": self.mode,
                                f"{PREFIX}documents": {k: dict(v) for k, v in self.documents.items()}}
        if self.explanation is not None:
            meta[f"{PREFIX}explanation"] = self.explanation
        return meta

    @property
    def title(self) -> str:
        """The passage's title line (its first line)."""
        return self.text.split("\n", 1)[0]


class MemorySearch:
    """A memory and how to search it.

    ``memory``: a :class:`~hippo_engine.HippoRAG`, or a save folder opened with ``HippoRAG(memory,
    **rag_options)``. ``mode``: a retrieval mode (``None``: ``hipporag2``);
    ``top_k``: passages per query; ``where``: a metadata filter (see ``HippoRAG.retrieve``);
    ``explain``: attach each passage's explanation. Each :meth:`search` may override them.
    """

    def __init__(self, memory: HippoRAG | str | Path, *, mode: str | None = None, top_k: int = 5,
                 where: Mapping[str, Any] | None = None, explain: bool = False,
                 rag_options: Mapping[str, Any] | None = None) -> None:
        from hippo_engine.hipporag import HippoRAG

        if isinstance(memory, (str, Path)):
            memory = HippoRAG(memory, **dict(rag_options or {}))
        elif rag_options:
            raise TypeError("rag_options apply only when memory is a save folder, not a HippoRAG")
        if not isinstance(memory, HippoRAG):
            raise TypeError(f"memory must be a HippoRAG or a save folder, not {type(memory).__name__}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, not {top_k!r}")
        self.rag, self.mode, self.top_k = memory, mode, top_k
        self.where = None if where is None else dict(where)
        self.explain = bool(explain)

    def options(self) -> dict[str, Any]:
        """The search options, as given (for serialisation)."""
        return {"mode": self.mode, "top_k": self.top_k, "where": self.where, "explain": self.explain}

    def search(self, query: str, *, mode: str | None = None, top_k: int | None = None,
               where: Mapping[str, Any] | None = None, explain: bool | None = None) -> list[Hit]:
        """The passages ``query`` retrieves, best first (options default to the instance's)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("the query must be a non-empty string")
        explain = self.explain if explain is None else bool(explain)
        where = self.where if where is None else dict(where)
        mode = mode or self.mode or DEFAULT_MODE
        (sol,) = self.rag.retrieve([query], top_k or self.top_k, mode=mode, explain=explain or None, where=where)
        return hits_of(sol, mode, explain, self.rag.document_metadata)

    def index(self, texts: Sequence[str], ids: Sequence[str] | None = None,
              metadata: Sequence[Mapping[str, Any]] | None = None) -> dict:
        """Add documents to the memory (``HippoRAG.index``); returns its report."""
        return self.rag.index(list(texts), ids=None if ids is None else list(ids),
                              metadata=None if metadata is None else [dict(m) for m in metadata])


def hits_of(sol: QuerySolution, mode: str, explain: bool, document_metadata=None) -> list[Hit]:
    """The :class:`Hit` objects of one solution (``document_metadata``: doc ids -> their metadata), from
    :func:`hippo_engine.results.ranked_passages`."""
    explanations = _explanations(sol) if explain else {}
    return [Hit(text=p.text, score=0.0 if p.score is None else p.score, rank=p.rank, passage_id=p.id,
                doc_ids=p.doc_ids, mode=mode, documents=p.documents, explanation=explanations.get(p.id))
            for p in ranked_passages(sol, document_metadata)]


def _explanations(sol: QuerySolution) -> dict[str, dict[str, Any]]:
    """passage id -> its explanation: the ``Explanation`` (hipporag2) or the passage's context item."""
    found = {e.passage_id: e.to_dict() for e in sol.explanations}
    for item in sol.provenance:
        if item.kind == "passage" and item.id not in found:
            found[item.id] = item.to_dict()
    return found
