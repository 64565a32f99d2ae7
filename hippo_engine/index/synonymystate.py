"""The synonymy lists of an :class:`~hippo_engine.index.pipeline.Index` kept up to date by each
change (:class:`SynonymyState`); the kNN itself is :mod:`.synonymy` (pure functions)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.index.synonymy import rows_of, streamed_pairs, update_synonymy
from hippo_engine.normalize import alnum_count


class SynonymyState:
    """Mixin of ``Index``: which entities act as synonymy queries, and the update of the lists
    inside a change's transaction."""

    def _eligible(self, ids: np.ndarray, added: Sequence[str], removed: Sequence[str]) -> np.ndarray:
        """Which entities (rows of ``ids``) act as synonymy queries. The short ones are kept in a
        set updated with each change, so only new entities' texts are looked at."""
        ents = self.stores["entity"]
        minc = self.config.synonymy_min_alnum_chars
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

    def _update_synonymy(self, added: Sequence[str], removed: Sequence[str]
                         ) -> dict[str, tuple[dict | None, dict | None]]:
        """Update the synonymy lists; returns {source: (old list, new list)} of changed lists."""
        cfg = self.config
        ents = self.stores["entity"]
        eligible = self._eligible(ents.ids, added, removed)
        pairs = None
        if not ents.holds_vectors:     # a writer whose vectors stay in the database: stream them
            def pairs(rows):
                return streamed_pairs(rows, ents.vectors_of(list(ents.ids[rows])), ents.blocks(),
                                      cfg.synonymy_threshold)
        changed = update_synonymy(self.synonymy, ents.ids, None if pairs else ents.matrix, eligible, added,
                                  removed, threshold=cfg.synonymy_threshold, max_neighbors=cfg.synonymy_max_neighbors,
                                  block_size=cfg.synonymy_block_size, pairs=pairs)
        self.db.replace_synonymy_lists({k: (v or {}) for k, v in changed.items()})
        out = {}
        for k, v in changed.items():
            out[k] = (self.synonymy.get(k), v or None)
            if v:
                self.synonymy[k] = v
            else:
                self.synonymy.pop(k, None)
        return out
