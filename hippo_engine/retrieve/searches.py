"""The query side of one engine, built from the configuration: :class:`Searches`.

As MS GraphRAG's ``query/factory.py``: each search object gets its own config section and
injected collaborators, and the facade only dispatches. ``Searches`` holds the mode table
(``table``: a :class:`~hippo_engine.hirag.modes.ModeTable` of
:class:`~hippo_engine.retrieve.search.QuerySearch` objects), the ``Retriever`` of the index's
current version (rebuilt when the index or the communities change) and the recognition filter.
Models are reached through zero-argument providers, so nothing loads before it is used.
"""
from __future__ import annotations

from collections.abc import Callable

from hippo_engine.config import HippoConfig
from hippo_engine.hirag.modes import HI_MODES, ModeTable
from hippo_engine.hirag.search import HiRAGSearch
from hippo_engine.retrieve.hipporag2_search import HippoRAG2Search
from hippo_engine.retrieve.query_ner import query_entity_vectors
from hippo_engine.retrieve.retriever import Retriever
from hippo_engine.retrieve.search import DenseSearch, QuerySearch


class Searches:
    """Searches of every mode over one index (``index``: the ``Index``; ``hirag``: the ``HiRAG``
    component; ``encoder``/``llm``: providers; ``ner``: the spaCy NER of query entities;
    ``llm_name``: the LLM's name, for messages)."""

    def __init__(self, config: HippoConfig, index, hirag, encoder: Callable[[], object], llm: Callable[[], object],
                 ner, llm_name: str):
        self.config, self.index, self.hirag = config, index, hirag
        self._encoder, self._llm, self._ner = encoder, llm, ner
        self._retriever: Retriever | None = None
        self._retriever_key: tuple | None = None
        self._filter = None
        rc, retriever, wrap = config.retrieval, (lambda: self.retriever), hirag.passage_contexts
        self.table: ModeTable[QuerySearch] = ModeTable({
            "hipporag2": HippoRAG2Search(rc, retriever, encoder, self.query_ner, lambda: self.recognition_filter,
                                         lambda: index.extractor != "ner", wrap, llm_name=llm_name),
            "naive": DenseSearch(rc, retriever, encoder, hirag.ranked_contexts, wrap),
            **{m: HiRAGSearch(m, rc, hirag, encoder, wrap) for m in HI_MODES}})

    def search(self, mode: str) -> QuerySearch:
        """The search object of ``mode`` (``ValueError`` for an unknown mode)."""
        return self.table.handler(mode)

    def invalidate(self) -> None:
        """Forget the retriever (the index changed)."""
        self._retriever = None

    @property
    def retriever(self) -> Retriever:
        """The ``Retriever`` of the index's current version (with community nodes when
        ``use_community_nodes``); rebuilt after an index or community change."""
        state = self.index
        state.refresh()                    # another process wrote a newer version: reload
        _ = state.reader_stores            # vectors first: loading them may reload a newer state
        key = (state.loaded_version, self.hirag.generation)
        if self._retriever is None or self._retriever_key != key:
            graph, sources = state.graph, []
            if self.config.use_community_nodes:
                graph, sources = self.hirag.seeded_graph(graph)
            self._retriever = Retriever.from_index(self.config.retrieval, state, graph, sources,
                                                   exact=self.config.postgres_search == "exact")
            self._retriever_key = key
        return self._retriever

    @property
    def recognition_filter(self):
        """The recognition filter (``RecognitionFilter``) on the engine's LLM, made on first use."""
        if self._filter is None:
            from hippo_engine.retrieve.recognition import RecognitionFilter  # imports dspy: only when used
            cfg = self.config
            self._filter = RecognitionFilter(self._llm(), cfg.filter_program_path, cfg.max_filtered_facts,
                                             show_progress=cfg.show_progress)
        return self._filter

    def query_ner(self, queries: list[str], failed: dict) -> list:
        """Each query's NER entity vectors (linkings that ``needs_ner``); failed LLM calls noted
        in ``failed``."""
        return query_entity_vectors(queries, self.config, self.index.extractor, self._llm, self._ner,
                                    self._encoder(), failed)
