"""What one graph search hands back per query (:class:`RawResult`) and the recognition filter's
signature (:data:`FilterMany`): small shared types that the ``Retriever``, its explanations
(:mod:`.trace`, :mod:`.explain`) and the searches read, kept below all of them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hippo_engine.datatypes import Triple

#: ``filter_many(questions, candidate fact lists) -> kept fact lists`` (the recognition filter)
FilterMany = Callable[[list[str], list[list[Triple]]], list[list[Triple]]]


@dataclass
class RawResult:
    """One query's ranking as passage store rows, plus what the graph search used."""

    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # passage rows, best first (top k)
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    candidate_facts: list = field(default_factory=list)
    kept_facts: list = field(default_factory=list)
    seed_entities: list = field(default_factory=list)   # [(phrase, weight)]
    used_fallback: bool = False
    #: what an explanation needs (``search(..., explain=True)`` only): see :func:`.trace.keep_trace`
    trace: dict | None = None


__all__ = ["FilterMany", "RawResult"]
