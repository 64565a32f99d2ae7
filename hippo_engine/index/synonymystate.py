"""The synonymy lists of an :class:`~hippo_engine.index.state.IndexState` kept up to date by each
change (:class:`SynonymyKeeper`); the kNN itself is :mod:`.synonymy` (pure functions).

Two ways, with the same result. A store that holds every vector (SQLite, PostgreSQL mirrored in
memory) updates the lists held in memory with the kNN over its matrix. A store whose vectors stay
in the database (a lean PostgreSQL writer) holds neither lists nor ids: the new entities (and the
sources a removal makes recompute) are scored against every stored vector, streamed block by
block; the rows found are named by one query; the lists the change reads (those of the removed
entities, those naming them, those of the entities found) are read from the table per source;
and :func:`.synonymy.update_synonymy` runs over just those ids, in id order as over the whole
store, so the lists, ties included, are the ones the in-memory way gives.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from hippo_engine.index.removal import ChangeQueries
from hippo_engine.index.synonymy import _after_removal, rows_of, streamed_pairs, update_synonymy
from hippo_engine.normalize import alnum_count
from hippo_engine.store import EmbeddingStore
from hippo_engine.store.base import IndexStore


class SynonymyKeeper:
    """Which entities act as synonymy queries, and the update of the lists inside a change's
    transaction.

    ``db``: the index store (the lists are written there); ``entities()``: the entity store;
    ``lists()``: the synonymy lists held in memory (read on first use; updated in place);
    ``held()``: those lists if they are held already, else None (a store without vectors reads
    the lists it needs from the table and updates the held ones, if any); ``threshold``,
    ``max_neighbors``, ``block_size``, ``min_alnum_chars``: the synonymy settings.
    """

    def __init__(self, db: IndexStore, entities: Callable[[], EmbeddingStore],
                 lists: Callable[[], dict[str, dict[str, float]]], *, threshold: float, max_neighbors: int,
                 block_size: int, min_alnum_chars: int,
                 held: Callable[[], dict[str, dict[str, float]] | None] = lambda: None):
        self.db = db
        self._entities = entities
        self._lists = lists
        self._held = held
        self.threshold = threshold
        self.max_neighbors = max_neighbors
        self.block_size = block_size
        self.min_alnum_chars = min_alnum_chars
        self._short_entities: set[str] | None = None   # entities too short to be synonymy queries

    def forget(self) -> None:
        """Drop the set of short entities (recomputed on the next update)."""
        self._short_entities = None

    def _eligible(self, ids: np.ndarray, added: Sequence[str], removed: Sequence[str]) -> np.ndarray:
        """Which entities (rows of ``ids``) act as synonymy queries. The short ones are kept in a
        set updated with each change, so only new entities' texts are looked at."""
        ents = self._entities()
        minc = self.min_alnum_chars
        if self._short_entities is None:
            self._short_entities = {e for e, text in ents.iter_texts() if alnum_count(text) < minc}
        else:
            self._short_entities.difference_update(removed)
            present = [e for e in added if e in ents]
            self._short_entities.update(e for e, text in zip(present, ents.texts(present), strict=True)
                                        if alnum_count(text) < minc)
        eligible = np.ones(len(ids), bool)
        eligible[rows_of(ids, self._short_entities)] = False
        return eligible

    def update(self, added: Sequence[str], removed: Sequence[str]) -> dict[str, tuple[dict | None, dict | None]]:
        """Update the synonymy lists; returns {source: (old list, new list)} of changed lists."""
        ents = self._entities()
        if not ents.holds_vectors:
            return self._update_streamed(ents, added, removed)
        eligible = self._eligible(ents.ids, added, removed)
        lists = self._lists()
        changed = update_synonymy(lists, ents.ids, ents.matrix, eligible, added, removed, threshold=self.threshold,
                                  max_neighbors=self.max_neighbors, block_size=self.block_size)
        return self._store(changed, lists, lists)

    def _store(self, changed: dict, old_lists: dict, held: dict | None) -> dict[str, tuple[dict | None, dict | None]]:
        """Write the ``changed`` lists; update ``held`` (the lists in memory, if any); the changes."""
        self.db.replace_synonymy_lists({k: (v or {}) for k, v in changed.items()})
        out = {}
        for k, v in changed.items():
            out[k] = (old_lists.get(k), v or None)
            if held is not None:
                if v:
                    held[k] = v
                else:
                    held.pop(k, None)
        return out

    def _update_streamed(self, ents, added: Sequence[str], removed: Sequence[str]
                         ) -> dict[str, tuple[dict | None, dict | None]]:
        """The update of a store whose vectors and ids stay in the database (see the module
        documentation): cost in proportion to the change, plus one pass over the entity vectors."""
        db, held = cast(ChangeQueries, self.db), self._held()
        gone = set(removed)
        lists = db.synonymy_lists(gone | db.synonymy_sources_naming(gone)) if gone else {}
        _, recompute = _after_removal(lists, gone, self.max_neighbors)
        queries = sorted(set(added) | recompute)
        q, k, s = np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0)
        if queries:
            fake = -1 - np.arange(len(queries), dtype=np.int64)    # no stored row: self pairs dropped by id below
            q, rows, s = streamed_pairs(fake, ents.vectors_of(queries), ents.blocks(), self.threshold)
            q = -1 - q
            names = ents.ids_at(rows.tolist())
            k = np.array([names[r] for r in rows.tolist()], dtype=object)
            keep = k != np.array(queries, dtype=object)[q]
            q, k, s = q[keep], k[keep], s[keep]
        ids = np.array(sorted(set(queries) | set(k.tolist())), dtype=object)
        texts = ents.texts(ids.tolist())
        eligible = np.array([alnum_count(t) >= self.min_alnum_chars for t in texts], bool)
        lists.update(db.synonymy_lists([e for e in ids.tolist() if e not in lists]))
        q_rows = rows_of(ids, queries)     # queries are sorted and all in ids: their rows, in order
        k_rows = np.searchsorted(ids, k).astype(np.int64) if len(k) else np.zeros(0, np.int64)
        found = (q_rows[q] if len(q) else np.zeros(0, np.int64), k_rows, s)

        def pairs(asked: np.ndarray):
            sel = np.isin(found[0], asked)
            return found[0][sel], found[1][sel], found[2][sel]
        changed = update_synonymy(lists, ids, None, eligible, added, gone, threshold=self.threshold,
                                  max_neighbors=self.max_neighbors, block_size=self.block_size, pairs=pairs)
        return self._store(changed, lists, held)


__all__ = ["SynonymyKeeper"]
