"""Compatibility re-exports: ids, phrase normalisation, JSON repair and the fact types used to
live here. Each is defined once elsewhere: :mod:`hippo_engine.ids`, :mod:`hippo_engine.normalize`,
:mod:`hippo_engine.lenient_json`, :mod:`hippo_engine.datatypes` (and the graph's view of
hyperedges in :mod:`hippo_engine.index.facts`). New code imports from those modules."""
from __future__ import annotations

import json_repair  # noqa: F401 (re-exported: callers patched ``text.json_repair``)

from hippo_engine.datatypes import Hyperedge, Triple, hyperedge_triple
from hippo_engine.ids import fact_text, facts_by_id, hyperedges_by_id, mdhash_id
from hippo_engine.lenient_json import (
    MAX_JSON_DEPTH,
    MAX_REPAIR_CHARS,
    json_depth,
    json_events,
    parse_json_lenient,
)
from hippo_engine.normalize import alnum_count, normalize_phrase

__all__ = [
    "MAX_JSON_DEPTH", "MAX_REPAIR_CHARS", "Hyperedge", "Triple", "alnum_count", "fact_text", "facts_by_id",
    "hyperedge_triple", "hyperedges_by_id", "json_depth", "json_events", "mdhash_id", "normalize_phrase",
    "parse_json_lenient",
]


def __getattr__(name: str):
    """``hyperedge_graph_triples`` and ``WEIGHT_QUANTUM`` (now in :mod:`hippo_engine.index.facts`)."""
    if name in ("hyperedge_graph_triples", "WEIGHT_QUANTUM"):
        from hippo_engine.index import facts

        return getattr(facts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
