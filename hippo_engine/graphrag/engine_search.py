"""What the search objects that read one index version through a
:class:`~hippo_engine.hirag.context.HiRAGEngine` (the graphrag_* and kb_* modes) share: :class:`EngineSearch`.

It holds the retrieval section (query instructions, the default limit), the ``HiRAG`` component (its cached
engine and communities) and the encoder provider; the search bases (:mod:`hippo_engine.retrieve.search`) add
``where=``: a kb_* search keeps the allowed passages of its own ranking, a graphrag_* search (a context
search) the allowed passages of its contexts. Entities, relations and reports are not filtered.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hippo_engine.config import QueryParam, RetrievalConfig
from hippo_engine.datatypes import QuerySolution
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reading import context_solution
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.search import ContextSearch, SearchParts


class EngineSearch:
    """A mode searched on the ``HiRAG`` component's engine (with communities when its spec says so);
    mixed into a search base (``spec`` comes from there)."""

    spec: ModeSpec

    def __init__(self, retrieval: RetrievalConfig, hirag, encoder: Callable[[], object]):
        self.retrieval, self.hirag, self._encoder = retrieval, hirag, encoder

    def engine(self):
        """The ``HiRAGEngine`` of the current index version (communities loaded when needed;
        missing ones are built without LLM reports, or an error asks for ``build_communities()``)."""
        return self.hirag.engine(need_communities=self.spec.needs_communities)

    def encode(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(entity-matching, passage-matching) query vectors."""
        return encode_queries(self._encoder(), list(queries), self.retrieval)

    def limit(self, param: QueryParam) -> int:
        """Passages to return: ``param.top_k``, else ``retrieval_top_k``."""
        return param.top_k or self.retrieval.retrieval_top_k


class EngineContextSearch(EngineSearch, ContextSearch):
    """A mode whose reader reads a context assembled on the engine (the graphrag_* modes); its ranking is its
    contexts' passages."""

    def __init__(self, spec: ModeSpec, hirag, encoder: Callable[[], object], **context):
        ContextSearch.__init__(self, spec, **context)
        EngineSearch.__init__(self, context["retrieval"], hirag, encoder)

    @classmethod
    def engine_parts(cls, parts: SearchParts) -> dict:
        """The keyword arguments of this base taken from ``parts``."""
        return {"hirag": parts.hirag, "encoder": parts.encoder, **cls.context_parts(parts)}

    def rank(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        """The contexts' passage rankings."""
        return [context_solution(c) for c in self.own_contexts(queries, param)]


def passage_solution(eng, query: str, nodes: Sequence[int], scores: Sequence[float], limit: int,
                     allowed: frozenset[str] | None = None, seeds: Sequence = ()) -> QuerySolution:
    """A ``QuerySolution`` of ranked passage graph ``nodes`` (best first) with their ``scores``:
    those in ``allowed`` (passage ids; None: all), at most ``limit``."""
    keep = [(int(n), float(s)) for n, s in zip(nodes, scores, strict=True)
            if allowed is None or str(eng.node_ids[int(n)]) in allowed][:limit]
    return QuerySolution(question=query, docs=[eng.passage_text(n) for n, _ in keep],
                         doc_scores=np.array([s for _, s in keep], dtype=np.float64),
                         seed_entities=list(seeds), passage_ids=[str(eng.node_ids[n]) for n, _ in keep])


def passage_cosines(eng, q_pass: np.ndarray) -> np.ndarray:
    """Cosine of every passage node of the graph with ``q_pass`` (``-inf`` for other nodes)."""
    out = np.full(eng.graph.num_nodes, -np.inf)
    if len(eng.passage_mat):
        out[eng.passage_nodes] = eng.passage_mat @ q_pass
    return out


def community_passages(eng, ci: int) -> list[int]:
    """Graph nodes of community ``ci``'s representative passages (most members mentioned first)."""
    idx = eng.graph.index_of
    return [idx[p] for p in eng.communities[ci].passages if p in idx]
