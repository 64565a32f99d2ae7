"""Community persistence (HiRAG communities, steps 4-5).

Communities and reports live in the index's SQLite file: tables ``communities`` and
``community_reports`` (JSON columns, no pickle) and a fourth embedding store
``store_community`` holding each community's report text and vector. The index version and the
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
from hippo_engine.store import IndexDB, SQLiteEmbeddingStore

META_VERSION = "communities_version"
META_PARAMS = "communities_params"


# ============================================================================ persistence
class CommunityVectorStore(SQLiteEmbeddingStore):
    """The fourth embedding store: each community's report text and vector, keyed by community
    id, in table ``store_community`` of the index's SQLite file."""

    def __init__(self, db: IndexDB, dim: int):  # noqa: D107 - the parent's namespace check is bypassed
        self.db, self.namespace, self.dim = db, "community", dim
        self.table = "store_community"
        db.conn.execute("CREATE TABLE IF NOT EXISTS store_community (id TEXT PRIMARY KEY, content TEXT NOT NULL,"
                        " vec BLOB NOT NULL)")
        self.reload()


class CommunityDB:
    """The ``communities`` and ``community_reports`` tables of an index's SQLite file."""

    def __init__(self, db: IndexDB):
        self.db = db
        c = db.conn
        c.execute("CREATE TABLE IF NOT EXISTS communities (id TEXT PRIMARY KEY, level INTEGER NOT NULL,"
                  " parent TEXT, data TEXT NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS community_reports (member_key TEXT PRIMARY KEY, report TEXT NOT NULL,"
                  " source TEXT NOT NULL)")

    def load_communities(self) -> list[Community]:
        """All stored communities, by (level, id)."""
        rows = self.db.conn.execute("SELECT data FROM communities ORDER BY level, id").fetchall()
        return [Community.from_json(json.loads(r[0])) for r in rows]

    def load_reports(self) -> dict[str, CommunityReport]:
        """{member_key: report}."""
        return {k: CommunityReport.from_json(json.loads(r))
                for k, r in self.db.conn.execute("SELECT member_key, report FROM community_reports")}

    def replace(self, comms: Sequence[Community], reports: Mapping[str, CommunityReport]) -> None:
        """Replace all communities; keep exactly the reports of the current member sets.
        Call inside ``db.transaction()``."""
        c = self.db.conn
        c.execute("DELETE FROM communities")
        c.executemany("INSERT INTO communities VALUES (?, ?, ?, ?)",
                      [(x.id, x.level, x.parent, json.dumps(x.to_json(), ensure_ascii=False)) for x in comms])
        keep = {x.key for x in comms}
        stored = {r[0] for r in c.execute("SELECT member_key FROM community_reports")}
        c.executemany("DELETE FROM community_reports WHERE member_key=?", [(k,) for k in sorted(stored - keep)])
        c.executemany("INSERT OR REPLACE INTO community_reports VALUES (?, ?, ?)",
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
    store: CommunityVectorStore

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
    return CommunitySet(comms, reports, CommunityVectorStore(index.db, dim))
