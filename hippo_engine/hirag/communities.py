"""HiRAG communities of the entity graph and their LLM-written reports: the pipeline.

:func:`build_communities` clusters the entity graph (:mod:`~hippo_engine.hirag.clustering`),
writes a report per community (:mod:`~hippo_engine.hirag.reports`, prompts built by
:mod:`~hippo_engine.hirag.report_context`), embeds the report texts and stores everything
(:mod:`~hippo_engine.hirag.report_store`). **Incremental reuse**: reports are keyed by the member-set
hash; after an insert or delete the communities are recomputed, and only communities whose
member set is new get a new report; all others reuse the stored one (and its vector).

The stages' public names are re-exported here.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hippo_engine.config import HiRAGConfig
from hippo_engine.hirag.clustering import (  # noqa: F401 - re-exported
    COMMUNITY_PREFIX,
    Community,
    cluster_entities,
    communities_by_level,
    community_id,
    entity_edges,
    entity_igraph,
    hierarchical_leiden,
    member_key,
    seeded_igraph_rng,
)
from hippo_engine.hirag.report_context import (  # noqa: F401 - re-exported
    ReportInputs,
    TokenCounter,
    community_context,
    whitespace_tokens,
)
from hippo_engine.hirag.report_store import (  # noqa: F401 - re-exported
    META_PARAMS,
    META_VERSION,
    CommunityDB,
    CommunitySet,
    clustering_params,
    communities_state,
    community_store,
    load_communities,
)
from hippo_engine.hirag.reports import (  # noqa: F401 - re-exported
    SOURCE_LLM,
    CommunityReport,
    ReportStats,
    listing_report,
    parse_report,
    report_messages,
    write_reports,
)
from hippo_engine.llm.base import LLMClient
from hippo_engine.progress import QUIET, Progress

logger = logging.getLogger(__name__)


def build_communities(index, config: HiRAGConfig, llm: LLMClient | Callable[[], LLMClient] | None, *,
                      count: TokenCounter = whitespace_tokens, max_llm_reports: int | None = None,
                      progress: Progress = QUIET, upgrade_listings: bool = True,
                      temperature: float | None = 0.0) -> dict:
    """(Re)compute the communities of ``index`` and bring reports and vectors up to date.

    Only communities whose member set has no stored LLM report are sent to the LLM (at most
    ``max_llm_reports``); everything else is reused. A stored member listing (a report the LLM
    was not asked for, or failed on) is asked again when ``upgrade_listings`` and the build may ask
    the LLM at all; builds made on use pass False so they never spend LLM calls on what an earlier
    build chose not to. Writes everything in one transaction. Returns a summary: communities per
    level, report statistics (LLM calls, tokens, seconds, reused, fallbacks) and timings.
    """
    t0 = time.perf_counter()
    graph = index.graph
    comms = cluster_entities(graph, config.max_cluster_size, config.community_seed, config.community_min_size,
                             config.community_max_levels)
    t1 = time.perf_counter()
    cdb = CommunityDB(index.db)
    existing = cdb.load_reports()
    if upgrade_listings and max_llm_reports != 0:
        existing = {k: r for k, r in existing.items() if r.source == SOURCE_LLM}
    stores = index.stores
    inputs = ReportInputs(graph, stores["entity"].text, stores["passage"].text, index.passage_triples)
    reports, stats = write_reports(comms, inputs, llm, existing, budget=config.community_report_context_tokens,
                                   count=count, max_new_tokens=config.community_report_max_new_tokens,
                                   temperature=temperature, max_llm_reports=max_llm_reports,
                                   progress=progress)
    t2 = time.perf_counter()
    vstore = community_store(index.db, stores["passage"].dim)
    texts = {c.id: reports[c.id].text() for c in comms}
    need = [c.id for c in comms if c.id not in vstore or vstore.text(c.id) != texts[c.id]]
    vecs = index.encoder.encode([texts[i] for i in need], show_progress=progress.show,
                                desc="Embedding community reports") if need else np.zeros((0, vstore.dim), np.float32)
    t3 = time.perf_counter()
    live = {c.id for c in comms}
    try:
        with index.db.transaction():
            cdb.replace(comms, reports)
            vstore.delete([i for i in vstore.ids if i not in live])
            vstore.upsert(need, [texts[i] for i in need], vecs)
            index.db.set_meta(META_VERSION, index.version)
            index.db.set_meta(META_PARAMS, clustering_params(config))
    except BaseException:
        # the transaction rolled back: drop the in-memory changes too (every embedding_store() has
        # reload(), but store/vectors.py declares it on the backends' classes, not on EmbeddingStore)
        vstore.reload()
        raise
    summary: dict[str, Any] = {"communities": len(comms), "levels": communities_by_level(comms),
               "reports": stats.to_dict(), "embedded": len(need),
               "timings": {"cluster": t1 - t0, "reports": t2 - t1, "embed": t3 - t2, "total": time.perf_counter() - t0}}
    logger.info("communities: %d (%s per level); %d report(s) by the LLM (%d calls), %d reused, %d fallback, "
                "%d listing; %.1fs", len(comms), summary["levels"], stats.written, stats.llm_calls, stats.reused,
                stats.fallbacks, stats.listings, summary["timings"]["total"])
    return summary
