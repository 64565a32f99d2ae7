"""The retrieval modes: one :class:`ModeSpec` per mode, registered once, read by every layer and door.

A mode is its search class plus one registration line (:func:`register_mode`; the built-in ones below).
The spec says what the mode is made of and needs; everything else is derived from the registry: the mode
names a ``QueryParam`` accepts, the CLI's ``--mode`` choices, the HTTP schemas' enum and the web page's list
(``GET /modes``), the MCP ``recall`` tool's choices, which modes rank inside one database snapshot, which the
``explain`` command serves, and each context's sections. A built-in search class is named by its import path
(:func:`search_at`) and loaded when the factory (:mod:`hippo_engine.query.factory`) first builds it, so
reading the registry imports no model or numeric library (the CLI's ``--help`` stays fast) and this module,
on the ground floor, imports nothing of the engine.

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
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModeSpec:
    """One retrieval mode.

    ``name``: the mode's name; ``search``: gives its search class (:func:`search_at` names one by import
    path, loaded on first use; a class of one's own: ``lambda: MySearch``); ``summary``: one line for help
    texts and the web page; ``sections``: its context's sections, in order; ``reads_context``: the reader
    reads the assembled context (else the top passages); ``needs_communities``: it reads communities (built
    on first use); ``snapshot``: its ranking only reads the index, so it runs inside one database snapshot;
    ``explainable``: the ``explain`` command and ``HippoRAG.explain`` serve it; ``config_section``: the
    configuration section it is built from.
    """

    name: str
    search: Callable[[], Any] = field(repr=False, compare=False)
    summary: str = ""
    sections: tuple[str, ...] = ("passages",)
    reads_context: bool = False
    needs_communities: bool = False
    snapshot: bool = False
    explainable: bool = False
    config_section: str = "retrieval"

    def describe(self) -> dict:
        """The spec as JSON-ready data (what the doors show: all but the search class)."""
        out = asdict(self)
        del out["search"]
        out["sections"] = list(self.sections)
        return out


def search_at(path: str) -> Callable[[], Any]:
    """A loader of the search class at ``path`` (``"package.module:Class"``), imported when first called."""
    module, _, name = path.partition(":")

    def load() -> Any:
        return getattr(importlib.import_module(module), name)
    load.__qualname__ = f"search_at({path!r})"
    return load


_MODES: dict[str, ModeSpec] = {}


def register_mode(spec: ModeSpec) -> ModeSpec:
    """Add a mode (``ValueError`` for a name already registered or not an identifier-like word)."""
    if not spec.name or not spec.name.replace("_", "").isalnum():
        raise ValueError(f"a mode name is letters, digits and underscores; got {spec.name!r}")
    if spec.name in _MODES:
        raise ValueError(f"mode {spec.name!r} is registered already")
    _MODES[spec.name] = spec
    return spec


def unregister_mode(name: str) -> None:
    """Remove a registered mode (a test's own mode, for example); unknown names are ignored."""
    _MODES.pop(name, None)


def mode_names() -> tuple[str, ...]:
    """Every registered mode, in registration order."""
    return tuple(_MODES)


def mode_specs() -> tuple[ModeSpec, ...]:
    """Every registered mode's spec, in registration order."""
    return tuple(_MODES.values())


def check_mode(mode: str) -> str:
    """``mode`` if registered, else ``ValueError`` naming the modes."""
    if mode not in _MODES:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(_MODES)}")
    return mode


def mode_spec(mode: str) -> ModeSpec:
    """The spec of ``mode`` (``ValueError`` for an unknown one)."""
    return _MODES[check_mode(mode)]


_HI = search_at("hippo_engine.hirag.search:HiRAGSearch")
_KB = "hippo_engine.kb"

for _spec in (
    ModeSpec("hipporag2", search_at("hippo_engine.retrieve.hipporag2_search:HippoRAG2Search"),
             "HippoRAG 2: fact scoring, recognition filter and Personalized PageRank", snapshot=True,
             explainable=True),
    ModeSpec("naive", search_at("hippo_engine.retrieve.search:DenseSearch"), "dense passage retrieval",
             snapshot=True),
    ModeSpec("hi_local", _HI, "HiRAG local: entities, relations and their text units",
             ("entities", "relations", "passages"), reads_context=True, explainable=True),
    ModeSpec("hi_global", _HI, "HiRAG global: community reports and text units", ("reports", "passages"),
             reads_context=True, explainable=True, needs_communities=True),
    ModeSpec("hi_bridge", _HI, "HiRAG bridge: a reasoning path between communities", ("bridge", "passages"),
             reads_context=True, explainable=True, needs_communities=True),
    ModeSpec("hi", _HI, "HiRAG: reports, reasoning path, entities and text units",
             ("reports", "bridge", "entities", "passages"), reads_context=True, explainable=True,
             needs_communities=True),
    ModeSpec("graphrag_local", search_at("hippo_engine.graphrag.local:GraphRAGLocalSearch"),
             "GraphRAG local: reports, entities, relations and text units of the query's entities",
             ("reports", "entities", "relations", "passages"), reads_context=True, config_section="graphrag",
             needs_communities=True),
    ModeSpec("graphrag_global", search_at("hippo_engine.graphrag.global_search:GraphRAGGlobalSearch"),
             "GraphRAG global: map-reduce over community reports", ("reports",), reads_context=True,
             config_section="graphrag", needs_communities=True),
    ModeSpec("kb_vector", search_at(f"{_KB}.vector:KBVectorSearch"), "knowledge base: passages by vector",
             config_section="kb"),
    ModeSpec("kb_graph", search_at(f"{_KB}.graph:KBGraphSearch"),
             "knowledge base: passages of matched entities' neighbours", config_section="kb"),
    ModeSpec("kb_hybrid", search_at(f"{_KB}.hybrid:KBHybridSearch"),
             "knowledge base: vector and graph rankings fused", config_section="kb"),
    ModeSpec("kb_global", search_at(f"{_KB}.global_search:KBGlobalSearch"),
             "knowledge base: passages of matched communities", config_section="kb", needs_communities=True),
):
    register_mode(_spec)
