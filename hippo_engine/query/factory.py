"""The query side of one engine, built from the configuration: :class:`Searches`.

Every registered mode (:mod:`hippo_engine.modes`) gets its search object, built by its class's
``build(spec, parts)`` from one :class:`~hippo_engine.retrieve.search.SearchParts`: the collaborators a
search may use, each taking its own config section from there. ``Searches`` is the one place on the query
side that reads the whole ``HippoConfig``. Models are reached through zero-argument providers, so nothing
loads before it is used; a mode's class is imported when its search is first asked for, so a mode
registered after the engine was built (a plugin's) is served too.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from hippo_engine.config import HippoConfig
from hippo_engine.hirag.component import HiRAG
from hippo_engine.index.ner import NERExtractor
from hippo_engine.index.state import IndexState
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.modes import mode_spec
from hippo_engine.progress import Progress
from hippo_engine.qa.reader import ReaderSettings
from hippo_engine.qa.reading import Reader
from hippo_engine.query.current import CurrentRetriever
from hippo_engine.retrieve.facts.query_ner import QueryNER, QueryNERSettings
from hippo_engine.retrieve.filtering import Restrictor
from hippo_engine.retrieve.hipporag2_search import HippoRAG2Search
from hippo_engine.retrieve.retriever import Retriever
from hippo_engine.retrieve.search import QuerySearch, SearchParts

if TYPE_CHECKING:
    from hippo_engine.retrieve.facts.recognition import RecognitionFilter


class Searches:
    """Searches of every mode over one index (``index``: the ``IndexState``; ``hirag``: the ``HiRAG``
    component; ``encoder``/``llm``: providers; ``ner``: the spaCy NER of query entities;
    ``llm_name``: the LLM's name, for messages)."""

    def __init__(self, config: HippoConfig, index: IndexState, hirag: HiRAG, encoder: Callable[[], Encoder],
                 llm: Callable[[], LLMClient], ner: NERExtractor, llm_name: str):
        self.current = CurrentRetriever(config.retrieval, config.ppr, index, hirag,
                                        community_nodes=config.use_community_nodes,
                                        exact=config.postgres_search == "exact")
        query_ner = QueryNER(QueryNERSettings(config.query_ner, config.normalization, config.max_new_tokens,
                                              Progress.of(config)), lambda: index.extractor, llm, ner, encoder)
        #: metadata filters (``QueryParam.where``) of every mode, see :mod:`hippo_engine.retrieve.filtering`
        self.restrictor = Restrictor(index)
        self.reader = Reader(llm, ReaderSettings.of(config), llm_name)
        self.parts = SearchParts(config, index, hirag, encoder, llm, self.current.get, self.reader, self.restrictor,
                                 query_ner, lambda: index.extractor != "ner", llm_name)
        self._built: dict[str, QuerySearch] = {}

    def search(self, mode: str) -> QuerySearch:
        """The search object of ``mode`` (``ValueError`` for an unknown mode), built on first use."""
        spec = mode_spec(mode)
        if spec.name not in self._built:
            self._built[spec.name] = spec.search().build(spec, self.parts)
        return self._built[spec.name]

    @property
    def hipporag2(self) -> HippoRAG2Search:
        """The ``hipporag2`` search (explanations, the recognition filter)."""
        return cast(HippoRAG2Search, self.search("hipporag2"))

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
