"""The last step of a ranking: passage store rows -> a ``QuerySolution`` (:class:`PassageTexts`).

The passage store of the index version (its ``ids`` by row, and ``texts``; a lazy PostgreSQL
reader also answers ``texts_found``, leaving out passages another process deleted since the
reader's view was made) gives the ids and texts of the ranked rows.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hippo_engine.datatypes import QuerySolution


class PassageStore(Protocol):
    """What :class:`PassageTexts` reads of the passage store."""

    @property
    def ids(self) -> np.ndarray: ...
    def texts(self, keys: Sequence[str]) -> list[str]: ...
    def texts_found(self, keys: Sequence[str]) -> Mapping[str, str]: ...


@dataclass
class PassageTexts:
    """Passage rows -> a ``QuerySolution``: ids and texts of the ranked rows (rows whose passage
    is gone since the view was made are dropped with their scores when ``drop_missing``)."""

    store: PassageStore
    drop_missing: bool = False

    def solution(self, question: str, order, scores, res=None) -> QuerySolution:
        st = self.store
        pids = [str(st.ids[i]) for i in order]
        if self.drop_missing:
            found = st.texts_found(pids)
            keep = [j for j, p in enumerate(pids) if p in found]
            pids, scores = [pids[j] for j in keep], np.asarray(scores)[keep]
            texts = [found[p] for p in pids]
        else:
            texts = st.texts(pids)
        sol = QuerySolution.from_ranking(question, texts, scores, res)
        sol.passage_ids = pids
        return sol
