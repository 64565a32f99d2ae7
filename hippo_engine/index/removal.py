"""Which entities and facts a change adds or leaves without a passage, for
:class:`~hippo_engine.index.writer.IndexWriter`: from the facts held in memory (:func:`live_ids`)
or, for a lean writer, asked of the database (:func:`removed_in_sql`)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, cast

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.ids import entity_id, hyperedge_id, triple_id


class ChangeQueries(Protocol):
    """What a lean writer asks its index store (:class:`hippo_engine.store.postgres.changes.ChangeQueries`)."""

    def passage_facts(self, pids: Sequence[str]) -> tuple[dict[str, list[Triple]], dict[str, list[Hyperedge]]]: ...

    def facts_held_only_by(self, pids: Sequence[str]) -> set[str]: ...

    def entities_held_only_by(self, pids: Sequence[str], phrases: Iterable[str]) -> set[str]: ...

    def synonymy_lists(self, sources: Iterable[str]) -> dict[str, dict[str, float]]: ...

    def synonymy_sources_naming(self, entities: Iterable[str]) -> set[str]: ...


def removed_in_sql(db, stores: Mapping, gone: Sequence[str]
                   ) -> tuple[dict[str, list[Triple]], dict[str, list[Hyperedge]], list[str], list[str]]:
    """A lean writer's removal of the passages ``gone``: their facts (triples, hyperedges per
    passage) and the stored entities and facts no other passage holds (sorted), asked of the
    database ``db`` (a :class:`ChangeQueries`)."""
    q = cast(ChangeQueries, db)
    triples, hyper = q.passage_facts(gone)
    phrases = {ph for ts in triples.values() for t in ts for ph in (t[0], t[2])}
    phrases.update(e for hs in hyper.values() for h in hs for e in h.entities)
    dead_ents = sorted(stores["entity"].existing(q.entities_held_only_by(gone, sorted(phrases))))
    dead_facts = sorted(stores["fact"].existing(q.facts_held_only_by(gone)))
    return triples, hyper, dead_ents, dead_facts


def entity_ids(triples: Mapping[str, Sequence[Triple]], hyperedges: Mapping[str, Sequence[Hyperedge]]) -> list[str]:
    """The entity ids of the passages' facts (subjects and objects, hyperedges' entities)."""
    phrases = {ph for ts in triples.values() for t in ts for ph in (t[0], t[2])}
    phrases.update(e for hs in hyperedges.values() for h in hs for e in h.entities)
    return [entity_id(ph) for ph in phrases]


def fact_ids(triples: Mapping[str, Sequence[Triple]], hyperedges: Mapping[str, Sequence[Hyperedge]]) -> list[str]:
    """The fact ids of the passages' facts."""
    return [triple_id(t) for ts in triples.values() for t in ts] + \
        [hyperedge_id(h) for hs in hyperedges.values() for h in hs]


def live_ids(triples: Mapping[str, Sequence[Triple]], hyperedges: Mapping[str, Sequence[Hyperedge]],
              gone: set[str]) -> tuple[set[str], set[str]]:
    """The entity and fact ids of the passages other than ``gone``."""
    live_ents, live_facts = set(), set()
    for p, ts in triples.items():
        if p in gone:
            continue
        for t in ts:
            live_ents.add(entity_id(t[0]))
            live_ents.add(entity_id(t[2]))
            live_facts.add(triple_id(t))
    for p, hs in hyperedges.items():
        if p in gone:
            continue
        for h in hs:
            live_ents.update(entity_id(e) for e in h.entities)
            live_facts.add(hyperedge_id(h))
    return live_ents, live_facts


__all__ = ["ChangeQueries", "entity_ids", "fact_ids", "live_ids", "removed_in_sql"]
