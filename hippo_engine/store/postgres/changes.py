"""What a lean writer asks the database about one change (:class:`ChangeQueries`, a mixin of
:class:`~hippo_engine.store.postgres.db.PostgresIndexStore`).

A writer whose stores hold no ids (:class:`~hippo_engine.store.postgres.writer.PostgresWriteStore`)
does not read every fact and synonymy list to remove passages: it asks for the facts of the
passages removed, for the facts and entities no other passage holds (by the indexes on
``fact_id``, ``subj``, ``obj`` and the hyperedges' entity lists), and for the synonymy lists of
given sources or naming given entities (by the primary key and the index on ``dst``). Each answer
costs in proportion to the change, not to the index.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id
from hippo_engine.store.base import IndexStore, StoreError, Triple

#: keys per ``= ANY(...)`` parameter
KEYS_PER_QUERY = 50_000


def _chunks(keys: Iterable[str]) -> list[list[str]]:
    keys = list(dict.fromkeys(keys))
    return [keys[i:i + KEYS_PER_QUERY] for i in range(0, len(keys), KEYS_PER_QUERY)]


class ChangeQueries(IndexStore):
    """Queries of one change (needs ``conn``, ``q`` and ``location`` of the store it is mixed into)."""

    q: str
    conn: Any

    def passage_facts(self, pids: Sequence[str]) -> tuple[dict[str, list[Triple]], dict[str, list[Hyperedge]]]:
        """The stored triples and hyperedges of the passages ``pids`` (passage id -> its facts in
        stored order; passages without any are left out)."""
        triples: dict[str, list[Triple]] = {}
        hyper: dict[str, list[Hyperedge]] = {}
        for part in _chunks(pids):
            for pid, s, p, o in self.conn.execute(
                    f"SELECT passage_id, subj, pred, obj FROM {self.q}.passage_triples WHERE passage_id = ANY(%s) "
                    "ORDER BY passage_id, pos", (part,)):
                triples.setdefault(pid, []).append((s, p, o))
            for pid, text, ents in self.conn.execute(
                    f"SELECT passage_id, text, entities FROM {self.q}.passage_hyperedges WHERE passage_id = ANY(%s) "
                    "ORDER BY passage_id, pos", (part,)):
                hyper.setdefault(pid, []).append(Hyperedge(text, self._entities(pid, ents)))
        return triples, hyper

    def _entities(self, pid: str, ents: str) -> tuple[str, ...]:
        try:
            return tuple(json.loads(ents))
        except ValueError as e:
            raise StoreError(f"{self.location}: unreadable entity list of a fact of passage {pid}: {e}") from e

    def facts_held_only_by(self, pids: Sequence[str]) -> set[str]:
        """The fact ids of the passages ``pids`` that no other passage states."""
        gone = list(dict.fromkeys(pids))
        if not gone:
            return set()
        q = self.q
        rows = self.conn.execute(
            f"SELECT f FROM (SELECT fact_id AS f FROM {q}.passage_triples WHERE passage_id = ANY(%(g)s) UNION "
            f"SELECT fact_id FROM {q}.passage_hyperedges WHERE passage_id = ANY(%(g)s)) c "
            f"WHERE NOT EXISTS (SELECT 1 FROM {q}.passage_triples t WHERE t.fact_id = c.f AND "
            "t.passage_id <> ALL(%(g)s)) "
            f"AND NOT EXISTS (SELECT 1 FROM {q}.passage_hyperedges h WHERE h.fact_id = c.f AND "
            "h.passage_id <> ALL(%(g)s))", {"g": gone})
        return {r[0] for r in rows}

    def entities_held_only_by(self, pids: Sequence[str], phrases: Iterable[str]) -> set[str]:
        """The entity ids of those ``phrases`` (the entities of the passages ``pids``) that no other
        passage names: as a triple's subject or object, or in a hyperedge's entity list."""
        gone = list(dict.fromkeys(pids))
        dead: set[str] = set()
        q = self.q
        for part in _chunks(phrases):
            rows = self.conn.execute(
                "SELECT ph FROM unnest(%(p)s::text[]) AS ph WHERE "
                f"NOT EXISTS (SELECT 1 FROM {q}.passage_triples t WHERE t.subj = ph AND t.passage_id <> ALL(%(g)s)) "
                f"AND NOT EXISTS (SELECT 1 FROM {q}.passage_triples t WHERE t.obj = ph AND "
                "t.passage_id <> ALL(%(g)s)) "
                f"AND NOT EXISTS (SELECT 1 FROM {q}.passage_hyperedges h WHERE h.entities::jsonb @> "
                "jsonb_build_array(ph) AND h.passage_id <> ALL(%(g)s))", {"p": part, "g": gone})
            dead.update(entity_id(r[0]) for r in rows)
        return dead

    def synonymy_lists(self, sources: Iterable[str]) -> dict[str, dict[str, float]]:
        """The stored synonymy lists of ``sources`` (those without one are left out)."""
        out: dict[str, dict[str, float]] = {}
        for part in _chunks(sources):
            for s, d, w in self.conn.execute(
                    f"SELECT src, dst, score FROM {self.q}.synonymy WHERE src = ANY(%s) ORDER BY src, dst", (part,)):
                out.setdefault(s, {})[d] = w
        return out

    def synonymy_sources_naming(self, entities: Iterable[str]) -> set[str]:
        """The sources whose synonymy list names one of ``entities``."""
        out: set[str] = set()
        for part in _chunks(entities):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT DISTINCT src FROM {self.q}.synonymy WHERE dst = ANY(%s)", (part,)))
        return out


__all__ = ["ChangeQueries"]
