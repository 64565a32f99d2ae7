"""The query side of one engine, built from the configuration: :class:`Searches`.

As MS GraphRAG's ``query/factory.py``: each search object gets its own config section and
injected collaborators, and the facade only dispatches. ``Searches`` is the one place that reads
the whole ``HippoConfig`` on the query side: it hands each search its section (the retrieval
section; query NER its :class:`~.query_ner.QueryNERSettings`) and builds the mode table
(``table``: a :class:`~hippo_engine.hirag.modes.ModeTable` of
:class:`~hippo_engine.retrieve.search.QuerySearch` objects) and the
:class:`~.current.CurrentRetriever` they rank with. Models are reached through zero-argument
providers, so nothing loads before it is used.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hippo_engine.config import HippoConfig
from hippo_engine.graphrag.factory import peer_searches
from hippo_engine.hirag.modes import HI_MODES, ModeTable
from hippo_engine.hirag.search import HiRAGSearch
from hippo_engine.index.ner import NERExtractor
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.retrieve.current import CurrentRetriever
from hippo_engine.retrieve.filtering import Restrictor
from hippo_engine.retrieve.hipporag2_search import HippoRAG2Search
from hippo_engine.retrieve.query_ner import QueryNER, QueryNERSettings
from hippo_engine.retrieve.retriever import Retriever
from hippo_engine.retrieve.search import DenseSearch, QuerySearch

if TYPE_CHECKING:
    from hippo_engine.hirag.component import HiRAG
    from hippo_engine.index.state import IndexState
    from hippo_engine.retrieve.recognition import RecognitionFilter


class Searches:
    """Searches of every mode over one index (``index``: the ``IndexState``; ``hirag``: the ``HiRAG``
    component; ``encoder``/``llm``: providers; ``ner``: the spaCy NER of query entities;
    ``llm_name``: the LLM's name, for messages)."""

    def __init__(self, config: HippoConfig, index: IndexState, hirag: HiRAG, encoder: Callable[[], Encoder],
                 llm: Callable[[], LLMClient], ner: NERExtractor, llm_name: str):
        rc = config.retrieval
        self.current = CurrentRetriever(rc, index, hirag, community_nodes=config.use_community_nodes,
                                        exact=config.postgres_search == "exact")
        query_ner = QueryNER(QueryNERSettings(config.query_ner, config.normalization, config.max_new_tokens,
                                              config.show_progress), lambda: index.extractor, llm, ner, encoder)
        wrap, retriever = hirag.passage_contexts, self.current.get
        #: metadata filters (``QueryParam.where``) of every mode, see :mod:`.filtering`
        self.restrictor = Restrictor(index)
        self.hipporag2 = HippoRAG2Search(rc, retriever, encoder, query_ner, llm, lambda: index.extractor != "ner",
                                         wrap, llm_name=llm_name, show_progress=config.show_progress,
                                         restrictor=self.restrictor)
        self.table: ModeTable[QuerySearch] = ModeTable({
            "hipporag2": self.hipporag2,
            "naive": DenseSearch(rc, retriever, encoder, hirag.ranked_contexts, wrap, self.restrictor),
            **{m: HiRAGSearch(m, rc, hirag, encoder, wrap) for m in HI_MODES},
            **peer_searches(config, hirag, encoder, llm, self.restrictor)})

    def search(self, mode: str) -> QuerySearch:
        """The search object of ``mode`` (``ValueError`` for an unknown mode)."""
        return self.table.handler(mode)

    def invalidate(self) -> None:
        """Forget the retriever (the index changed)."""
        self.current.invalidate()

    @property
    def retriever(self) -> Retriever:
        """The ``Retriever`` of the index's current version (see :class:`.current.CurrentRetriever`)."""
        return self.current.get()

    @property
    def recognition_filter(self) -> RecognitionFilter:
        """The recognition filter (``RecognitionFilter``) on the engine's LLM, made on first use."""
        return self.hipporag2.recognition_filter
