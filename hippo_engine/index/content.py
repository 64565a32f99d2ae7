"""What an :class:`~hippo_engine.index.state.IndexState` reads from its store on demand: each
passage's facts, the synonymy lists and the passage ids, and the fact caches built from them
(:class:`ContentCache`).

Nothing here is read when an index is opened: a process that only queries a large PostgreSQL
index never loads the facts into Python (the graph comes from ``graph.npz``, facts from the
database, a batch of ids at a time). When something is read, it is read in one snapshot and
only if the store still holds the version the index has loaded; if another writer moved it on,
the whole in-memory state is reloaded (the ``reload`` the cache is built with), so what is held
always belongs together.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.ids import facts_by_id, hyperedge_id, hyperedges_by_id, triple_id
from hippo_engine.store.base import IndexStore

logger = logging.getLogger(__name__)

#: what a lazy reader keeps of each store (see ``LazyPostgresStore``)
READER_KEEP = {"passage": "ids+matrix", "fact": "ids", "entity": "count"}


#: what a loaded cache holds: facts per passage, hyperedges per passage, synonymy lists, passage ids
_Held = tuple[dict[str, list[Triple]], dict[str, list[Hyperedge]], dict[str, dict[str, float]], list[str]]


def stored_version(db: IndexStore) -> str:
    """The index version the store holds now (``"0"`` for a new index)."""
    return db.get_meta("version") or "0"


class ContentCache:
    """The facts, synonymy lists and passage ids of the loaded version, read on first use.

    ``db``: the index store; ``loaded_version()``: the version the state holds in memory;
    ``reload()``: reload the whole state, content included (called when the store moved on).
    """

    def __init__(self, db: IndexStore, loaded_version: Callable[[], str], reload: Callable[[], None]):
        self.db = db
        self._loaded_version = loaded_version
        self._reload = reload
        self.forget()

    def forget(self) -> None:
        """Drop everything held (read again on first use)."""
        self._passage_triples: dict[str, list[Triple]] | None = None
        self._passage_hyperedges: dict[str, list[Hyperedge]] | None = None
        self._synonymy: dict[str, dict[str, float]] | None = None
        self.pids: list[str] | None = None
        self._fact_triples: dict[str, Triple] | None = None
        self._fact_hyperedges: dict[str, Hyperedge] | None = None

    def read(self) -> None:
        """Read facts, synonymy and passage ids (the caller holds a snapshot of the loaded version)."""
        self._passage_triples = self.db.load_passage_triples()
        self._passage_hyperedges = self.db.load_passage_hyperedges()
        self._synonymy = self.db.load_synonymy()
        self.pids = self.db.passage_ids()

    def load(self) -> None:
        """Read the content if it is not held, provided the store still holds the loaded version
        (else the whole state is reloaded, content included)."""
        if self._passage_triples is not None:
            return
        with self.db.snapshot():
            current = stored_version(self.db) == self._loaded_version()
            if current:
                self.read()
        if not current:     # another writer moved the index on: reload everything, together
            logger.info("index %s changed on disk (version %s -> %s): reloading", self.db.location,
                        self._loaded_version(), stored_version(self.db))
            self._reload()

    def _held(self) -> _Held:
        """What :meth:`load` holds, read on first use."""
        self.load()
        triples, hyper, syn, pids = self._passage_triples, self._passage_hyperedges, self._synonymy, self.pids
        if triples is None or hyper is None or syn is None or pids is None:  # pragma: no cover - load reads all
            raise RuntimeError(f"the content of index {self.db.location} could not be read")
        return triples, hyper, syn, pids

    @property
    def passage_triples(self) -> dict[str, list[Triple]]:
        """passage id -> its normalised triples (read on first use)."""
        return self._held()[0]

    @property
    def passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        """passage id -> its hyperedges (read on first use)."""
        return self._held()[1]

    @property
    def synonymy(self) -> dict[str, dict[str, float]]:
        """entity id -> {neighbour entity id: cosine} (read on first use)."""
        return self._held()[2]

    @property
    def loaded(self) -> bool:
        """Whether the facts and synonymy lists are held in memory."""
        return self._passage_triples is not None

    def passage_ids(self) -> list[str]:
        """The passage ids of the loaded version."""
        return list(self._held()[3])

    @property
    def fact_triples(self) -> dict[str, Triple]:
        """fact id -> its normalised triple (kept up to date by changes)."""
        if self._fact_triples is None:
            self._fact_triples = facts_by_id(self.passage_triples)
        return self._fact_triples

    @property
    def fact_hyperedges(self) -> dict[str, Hyperedge]:
        """fact id -> hyperedge (sentence / n-ary fact and its entities), kept up to date."""
        if self._fact_hyperedges is None:
            self._fact_hyperedges = hyperedges_by_id(self.passage_hyperedges)
        return self._fact_hyperedges

    # ------------------------------------------------------------------ what a change updates
    def note_removed(self, gone: Sequence[str], dead_facts: Sequence[str]) -> None:
        """Drop the removed passages and facts from what is held in memory."""
        gone_set = set(gone)
        triples, hyper, _, pids = self._held()
        self._passage_triples = {p: t for p, t in triples.items() if p not in gone_set}
        self._passage_hyperedges = {p: h for p, h in hyper.items() if p not in gone_set}
        self.pids = [p for p in pids if p not in gone_set]
        for cache in (self._fact_triples, self._fact_hyperedges):
            if cache is not None:
                for f in dead_facts:
                    cache.pop(f, None)

    def note_added(self, new_ids: Sequence[str], norm: Mapping[str, list[Triple]],
                   hyper: Mapping[str, list[Hyperedge]]) -> None:
        """Take the new passages' facts into what is held in memory."""
        if self.loaded:    # (read before the change, or inside it: then it holds them already)
            triples, held_hyper, _, pids = self._held()
            for p in new_ids:
                if norm[p]:
                    triples[p] = norm[p]
                if hyper[p]:
                    held_hyper[p] = hyper[p]
            self.pids = sorted(set(pids).union(new_ids))
        if self._fact_triples is not None:
            for p in new_ids:
                for t in norm[p]:
                    self._fact_triples.setdefault(triple_id(t), t)
        if self._fact_hyperedges is not None:
            for p in new_ids:
                for h in hyper[p]:
                    self._fact_hyperedges.setdefault(hyperedge_id(h), h)


__all__ = ["READER_KEEP", "ContentCache", "stored_version"]
