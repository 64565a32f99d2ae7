"""``HiRAG``: the HiRAG component the ``HippoRAG`` facade owns.

It keeps the communities of one index (building, rebuilding when stale, loading), gives the
retriever its community nodes and seeds (``use_community_nodes=True``), and assembles the
contexts of the modes. It is built from explicit dependencies (the ``IndexState``, its config section,
and zero-argument providers of the encoder and the LLM, called only when needed) and never calls
back into the facade.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from hippo_engine.config import HiRAGConfig
from hippo_engine.datatypes import HiContext
from hippo_engine.hirag.communities import build_communities
from hippo_engine.hirag.context import HiRAGEngine, passage_context, token_counter
from hippo_engine.hirag.report_context import TokenCounter
from hippo_engine.hirag.report_store import META_VERSION, CommunitySet, communities_state, load_communities
from hippo_engine.hirag.seeds import CommunitySeeds, augment_graph
from hippo_engine.index.graph import GraphData
from hippo_engine.index.state import IndexState
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.encoder import Encoder
from hippo_engine.modes import mode_spec
from hippo_engine.progress import Progress
from hippo_engine.qa.reader import ReaderSettings

logger = logging.getLogger(__name__)


class HiRAG:
    """Communities, community seeds and mode contexts over one ``IndexState``.

    ``config``: the HiRAG section; ``reader``: the reader's settings (contexts read by the LLM,
    the LLM's settings for reports). ``encoder``/``llm``: zero-argument providers (models load
    lazily). ``generation`` counts the community builds made through this object; a retriever
    built before the last build is stale.
    """

    def __init__(self, index: IndexState, config: HiRAGConfig, reader: ReaderSettings, encoder: Callable[[], Encoder],
                 llm: Callable[[], LLMClient]):
        self.index = index
        self.config = config
        self.reader = reader
        self._encoder = encoder
        self._llm = llm
        self.generation = 0
        self._engine: tuple[tuple, HiRAGEngine] | None = None

    def token_counter(self) -> TokenCounter:
        """Token counter of the section budgets (the encoder's tokenizer, else words)."""
        return token_counter(self._encoder())

    # ------------------------------------------------------------------ communities
    def build_communities(self, max_llm_reports: int | None = None, progress: Progress | None = None,
                          upgrade_listings: bool = True) -> dict:
        """Compute (or update) the communities, reports and report vectors; see
        :func:`hippo_engine.hirag.communities.build_communities` (``progress``: the reader's when
        None). Returns its summary."""
        summary = build_communities(self.index, self.config, self._llm, count=self.token_counter(),
                                    max_llm_reports=max_llm_reports, progress=progress or self.reader.progress,
                                    upgrade_listings=upgrade_listings, temperature=self.reader.temperature)
        self.generation += 1
        self._engine = None
        return summary

    def state(self) -> str:
        """``"missing"``, ``"stale"`` or ``"current"`` (see ``store.communities_state``)."""
        return communities_state(self.index, self.config)

    def communities(self, build: bool = True) -> CommunitySet | None:
        """The communities of the index. Missing or stale ones are (re)built first when ``build``
        and ``community_auto_update`` allow it, writing at most ``community_auto_llm_reports``
        reports with the LLM (default 0: member listings, said in a warning); a stale set is
        otherwise used with a warning; missing ones give None when not built."""
        state = self.state()
        if state != "current":
            if build and self.config.community_auto_update:
                cap = self.config.community_auto_llm_reports
                logger.warning("communities are %s: building them now (clustering%s); call build_communities() "
                               "to write LLM reports explicitly", state,
                               ", no LLM reports (community_auto_llm_reports=0)" if cap == 0 else
                               f", at most {cap if cap is not None else 'every'} LLM report(s)")
                self.build_communities(max_llm_reports=cap, upgrade_listings=False)
            elif state == "missing":
                return None
            else:
                logger.warning("communities are stale (the index changed); call build_communities() to update them")
        return load_communities(self.index)

    def seeded_graph(self, graph: GraphData) -> tuple[GraphData, list[CommunitySeeds]]:
        """``graph`` with a node per community (``seeds.augment_graph``) and the seed source of
        those nodes, for a ``Retriever`` (communities built if needed)."""
        cset = self.communities()
        if cset is None:
            raise RuntimeError("use_community_nodes=True but no communities exist and community_auto_update is off; "
                               "call build_communities() first")
        cfg = self.config
        aug = augment_graph(graph, cset.communities, cfg.community_entity_weight, cfg.community_parent_weight)
        nodes = np.arange(graph.num_nodes, aug.num_nodes, dtype=np.int64)
        return aug, [CommunitySeeds(nodes, cset.matrix(), cfg.community_seed_weight, cfg.community_seed_top_k)]

    # ------------------------------------------------------------------ contexts
    def engine(self, need_communities: bool) -> HiRAGEngine:
        """The (cached) context builder of the current index, with its communities when needed."""
        cset = self.communities() if need_communities else None
        if need_communities and cset is None:
            raise RuntimeError("this mode needs communities; call build_communities() first "
                               "(or set community_auto_update=True)")
        key = (self.index.version, self.index.db.get_meta(META_VERSION) if need_communities else None)
        if self._engine is not None and self._engine[0] == key:
            return self._engine[1]
        eng = HiRAGEngine(self.index, self.config, cset, self.token_counter())
        self._engine = (key, eng)
        return eng

    def contexts(self, queries: Sequence[str], mode: str, q_fact: np.ndarray, q_pass: np.ndarray,
                 limit: int, explain: bool = False) -> list[HiContext]:
        """The assembled context of each query in a hi_* ``mode``, from its encoded vectors; at
        most ``limit`` passages ranked. ``explain``: with each item's section and reason
        (``HiContext.provenance``); the contexts are the same either way."""
        spec = mode_spec(mode)
        if not spec.reads_context:
            raise ValueError(f"{mode} contexts wrap ranked solutions: use passage_contexts() or ranked_contexts()")
        t0 = time.perf_counter()
        eng = self.engine(need_communities=spec.needs_communities)
        out = [eng.context(q, mode, q_fact[j], q_pass[j], limit, explain) for j, q in enumerate(queries)]
        logger.info("%s: %d contexts in %.2fs", mode, len(out), time.perf_counter() - t0)
        return out

    def passage_contexts(self, solutions: Sequence, mode: str = "hipporag2") -> list[HiContext]:
        """Contexts of already-ranked ``QuerySolution``s: the reader's ``qa_top_k`` passages."""
        count = self.token_counter()
        return [passage_context(s.question, mode, s.docs, self.reader.qa_top_k, count,
                                self.config.hi_text_unit_tokens, s.seed_entities) for s in solutions]

    def ranked_contexts(self, solutions: Sequence, mode: str = "naive") -> list[HiContext]:
        """Contexts of a mode's own ranking (``naive``): every ranked passage that fits the
        passage budget (``hi_text_unit_tokens``)."""
        count = self.token_counter()
        return [passage_context(s.question, mode, s.docs, len(s.docs), count, self.config.hi_text_unit_tokens)
                for s in solutions]
