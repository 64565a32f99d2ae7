"""Retrieval modes and their dispatch table.

========== =========================================================== ======================
mode       context sections                                             passages (ranking)
========== =========================================================== ======================
hipporag2  passages (the reader's ``qa_top_k``)                         HippoRAG 2 PPR
naive      passages                                                     dense
hi_local   entities, relations, passages                                text units of top entities
hi_global  community reports, passages                                  text units of top entities
hi_bridge  reasoning path, passages                                     text units, then path passages
hi         reports, reasoning path, entities, passages                  text units, then path passages
graphrag_l reports, entities, relations, passages                       text units of top entities
graphrag_g reports (map batches; answered by map-reduce)                communities' passages
kb_*       passages                                                     vector / graph / fused / communities
========== =========================================================== ======================
(``graphrag_l``/``graphrag_g``: ``graphrag_local``/``graphrag_global``, :mod:`hippo_engine.graphrag`;
``kb_*``: ``kb_vector``, ``kb_graph``, ``kb_hybrid``, ``kb_global``, :mod:`hippo_engine.kb`.)

``hipporag2`` and ``naive`` answer with the standard reader over ``qa_top_k`` passages; the hi_*
modes show the reader their assembled context (:mod:`~hippo_engine.hirag.context`).
``MODE_SPECS`` says what each mode needs; a :class:`ModeTable` maps every mode to its handler
(``HippoRAG`` keeps one for retrieval).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from hippo_engine.config import MODES
from hippo_engine.datatypes import QuerySolution
from hippo_engine.hirag.context import (  # noqa: F401 - re-exported
    MODE_SECTIONS,
    HiContext,
    HiRAGEngine,
    dedupe,
    pack_by_tokens,
    token_counter,
)
from hippo_engine.ids import chunk_id

H = TypeVar("H")


@dataclass(frozen=True)
class ModeSpec:
    """What a mode is made of: its context ``sections``, whether it ``needs_communities``, and
    whether the reader sees the assembled context (``reads_context``) or the top passages."""

    name: str
    sections: tuple[str, ...]
    needs_communities: bool
    reads_context: bool


MODE_SPECS: dict[str, ModeSpec] = {
    m: ModeSpec(m, MODE_SECTIONS[m],
                needs_communities=m in ("hi_global", "hi_bridge", "hi", "graphrag_local", "graphrag_global",
                                        "kb_global"),
                reads_context=m not in ("hipporag2", "naive") and not m.startswith("kb_")) for m in MODES}
#: the HiRAG modes (:class:`~hippo_engine.hirag.search.HiRAGSearch`)
HI_MODES = tuple(m for m in MODES if m == "hi" or m.startswith("hi_"))


def check_mode(mode: str) -> str:
    """Return ``mode`` if known, else raise ``ValueError`` naming the modes."""
    if mode not in MODE_SPECS:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    return mode


class ModeTable(Generic[H]):
    """A handler for every mode (``dict`` mode -> handler, e.g. a search object); for function
    handlers ``table(mode, *args)`` calls the mode's handler as ``handler(mode, *args)``. Built
    with a handler for each of ``MODES``, no more, no less."""

    def __init__(self, handlers: Mapping[str, H]):
        missing = [m for m in MODES if m not in handlers]
        unknown = [m for m in handlers if m not in MODE_SPECS]
        if missing or unknown:
            raise ValueError(f"a mode table needs a handler for each of {MODES}; missing {missing}, "
                             f"unknown {unknown}")
        self.handlers: dict[str, H] = dict(handlers)

    def handler(self, mode: str) -> H:
        """The handler of ``mode`` (``ValueError`` for an unknown mode)."""
        return self.handlers[check_mode(mode)]

    def __call__(self, mode: str, *args, **kwargs):
        handler = self.handler(mode)
        if not callable(handler):
            raise TypeError(f"the handler of {mode!r} is a {type(handler).__name__}, not a function")
        return handler(mode, *args, **kwargs)


def solution_from_context(ctx: HiContext, provenance: bool = False) -> QuerySolution:
    """A ``QuerySolution`` for a mode's context: its passage ranking, scored ``n/n, ..., 1/n``, with
    the passages' ids (``doc_ids`` are filled by the facade, which knows the documents);
    ``provenance``: with the context's items and their reasons (``QuerySolution.provenance``)."""
    n = len(ctx.passages)
    scores = np.arange(n, 0, -1, dtype=np.float64) / max(n, 1)
    return QuerySolution(question=ctx.query, docs=list(ctx.passages), doc_scores=scores,
                         seed_entities=list(ctx.entities),
                         passage_ids=[chunk_id(p) for p in ctx.passages],
                         provenance=list(ctx.provenance) if provenance else [])
