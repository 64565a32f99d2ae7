"""Community persistence (HiRAG communities, steps 4-5).

Communities and reports live in the index's ``IndexStore`` (JSON texts, no pickle), with a
fourth embedding store ``community`` holding each community's report text and vector. The index version and the
clustering settings the communities were built from are recorded, so a stale set is detected
(:func:`communities_state`).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hippo_engine.hirag.clustering import Community, communities_by_level
from hippo_engine.hirag.reports import CommunityReport
from hippo_engine.store.base import IndexStore
from hippo_engine.store.embedding_store import EmbeddingStore

META_VERSION = "communities_version"
META_PARAMS = "communities_params"


# ============================================================================ persistence
def community_store(db: IndexStore, dim: int) -> EmbeddingStore:
    """The fourth embedding store: each community's report text and vector, keyed by community id."""
    return db.embedding_store("community", dim)


class CommunityDB:
    """The communities and community reports of an index (kept by its ``IndexStore``)."""

    def __init__(self, db: IndexStore):
        self.db = db

    def load_communities(self) -> list[Community]:
        """All stored communities, by (level, id)."""
        return [Community.from_json(json.loads(r)) for r in self.db.load_community_rows()]

    def load_reports(self) -> dict[str, CommunityReport]:
        """{member_key: report}."""
        return {k: CommunityReport.from_json(json.loads(r)) for k, r in self.db.load_report_rows()}

    def replace(self, comms: Sequence[Community], reports: Mapping[str, CommunityReport]) -> None:
        """Replace all communities; keep exactly the reports of the current member sets.
        Call inside ``db.transaction()``."""
        self.db.replace_communities(
            [(x.id, x.level, x.parent, json.dumps(x.to_json(), ensure_ascii=False)) for x in comms],
            [(x.key, json.dumps(reports[x.id].to_json(), ensure_ascii=False), reports[x.id].source)
             for x in comms if x.id in reports])


def clustering_params(config) -> str:
    """The clustering settings communities are built with, as JSON (recorded to detect stale sets)."""
    return json.dumps({"max_cluster_size": config.max_cluster_size, "seed": config.community_seed,
                       "min_size": config.community_min_size, "max_levels": config.community_max_levels},
                      sort_keys=True)


def communities_state(index, config) -> str:
    """``"missing"`` (never built), ``"stale"`` (index or clustering settings changed since) or
    ``"current"``."""
    v = index.db.get_meta(META_VERSION)
    if v is None:
        return "missing"
    if v != index.version or index.db.get_meta(META_PARAMS) != clustering_params(config):
        return "stale"
    return "current"


@dataclass
class CommunitySet:
    """Communities of one index version with their reports and report vectors."""

    communities: list[Community]
    reports: dict[str, CommunityReport]     # by community id
    store: EmbeddingStore

    @property
    def by_id(self) -> dict[str, Community]:
        """Communities by id."""
        return {c.id: c for c in self.communities}

    def matrix(self) -> np.ndarray:
        """Report vectors, rows in the order of ``communities``."""
        if not self.communities:
            return np.zeros((0, self.store.dim), np.float32)
        return self.store.matrix[[self.store.row(c.id) for c in self.communities]]

    def levels(self) -> dict[int, int]:
        """{level: number of communities}."""
        return communities_by_level(self.communities)


def load_communities(index) -> CommunitySet:
    """Read the stored communities, reports and vectors of ``index`` (no staleness check)."""
    cdb = CommunityDB(index.db)
    comms = cdb.load_communities()
    by_key = cdb.load_reports()
    reports = {c.id: by_key[c.key] for c in comms if c.key in by_key}
    dim = index.stores["passage"].dim
    return CommunitySet(comms, reports, community_store(index.db, dim))
