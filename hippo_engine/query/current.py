"""The ``Retriever`` of an index's current version: :class:`CurrentRetriever`.

A ``Retriever`` holds the matrices and the PPR kernel of one index version. It is built on first
use (:meth:`.Retriever.from_index`, on the views :mod:`.views` chooses) and rebuilt when the index
reaches a newer version (this process wrote, or another one did) or the communities were rebuilt
(with ``use_community_nodes``, its graph holds a node per community).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hippo_engine.config import PPRConfig, RetrievalConfig
from hippo_engine.retrieve.facts.seeding import SeedSource
from hippo_engine.retrieve.retriever import Retriever

if TYPE_CHECKING:
    from hippo_engine.hirag.component import HiRAG
    from hippo_engine.index.state import IndexState


class CurrentRetriever:
    """The retriever of ``index``'s current version with the retrieval and PPR sections ``config`` and ``ppr``
    (``hirag``: the communities, whose nodes join the graph when ``community_nodes``; ``exact``: exact
    database scans on a lazy PostgreSQL reader)."""

    def __init__(self, config: RetrievalConfig, ppr: PPRConfig, index: IndexState, hirag: HiRAG, *,
                 community_nodes: bool, exact: bool):
        self.config, self.ppr, self.index, self.hirag = config, ppr, index, hirag
        self.community_nodes, self.exact = community_nodes, exact
        self._retriever: Retriever | None = None
        self._key: tuple | None = None

    def invalidate(self) -> None:
        """Forget the retriever (the index changed)."""
        self._retriever = None

    def get(self) -> Retriever:
        """The ``Retriever`` of the index's current version, rebuilt after an index or community change."""
        state = self.index
        state.refresh()                    # another process wrote a newer version: reload
        _ = state.reader_stores            # vectors first: loading them may reload a newer state
        key = (state.loaded_version, self.hirag.generation)
        if self._retriever is None or self._key != key:
            graph = state.graph
            sources: tuple[SeedSource, ...] = ()
            if self.community_nodes:
                graph, seeds = self.hirag.seeded_graph(graph)
                sources = tuple(seeds)
            self._retriever = Retriever.from_index(self.config, state, graph, sources, exact=self.exact,
                                                     ppr=self.ppr)
            self._key = key
        return self._retriever
