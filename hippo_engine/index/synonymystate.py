"""The synonymy lists of an :class:`~hippo_engine.index.state.IndexState` kept up to date by each
change (:class:`SynonymyKeeper`); the kNN itself is :mod:`.synonymy` (pure functions)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hippo_engine.index.synonymy import rows_of, streamed_pairs, update_synonymy
from hippo_engine.normalize import alnum_count
from hippo_engine.store import EmbeddingStore
from hippo_engine.store.base import IndexStore


class SynonymyKeeper:
    """Which entities act as synonymy queries, and the update of the lists inside a change's
    transaction.

    ``db``: the index store (the lists are written there); ``entities()``: the entity store;
    ``lists()``: the synonymy lists held in memory (updated in place); ``threshold``,
    ``max_neighbors``, ``block_size``, ``min_alnum_chars``: the synonymy settings.
    """

    def __init__(self, db: IndexStore, entities: Callable[[], EmbeddingStore],
                 lists: Callable[[], dict[str, dict[str, float]]], *, threshold: float, max_neighbors: int,
                 block_size: int, min_alnum_chars: int):
        self.db = db
        self._entities = entities
        self._lists = lists
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
        eligible = self._eligible(ents.ids, added, removed)
        threshold = self.threshold
        pairs = None
        if not ents.holds_vectors:     # a writer whose vectors stay in the database: stream them
            def streamed(rows):
                return streamed_pairs(rows, ents.vectors_of(list(ents.ids[rows])), ents.blocks(), threshold)
            pairs = streamed
        lists = self._lists()
        changed = update_synonymy(lists, ents.ids, None if pairs is not None else ents.matrix, eligible, added,
                                  removed, threshold=threshold, max_neighbors=self.max_neighbors,
                                  block_size=self.block_size, pairs=pairs)
        self.db.replace_synonymy_lists({k: (v or {}) for k, v in changed.items()})
        out = {}
        for k, v in changed.items():
            out[k] = (lists.get(k), v or None)
            if v:
                lists[k] = v
            else:
                lists.pop(k, None)
        return out


__all__ = ["SynonymyKeeper"]
