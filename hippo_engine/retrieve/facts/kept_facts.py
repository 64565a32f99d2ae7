"""The recognition filter's step of :meth:`.retriever.Retriever.search`: each query's candidate facts (the
triples of its best fact rows that the index still holds) and the facts the filter keeps, as one
``filter_many`` call for every query of the call and a kept mask per block of queries."""
from __future__ import annotations

import time

import numpy as np


def kept_masks(retriever, queries, blocks, cands, results, filter_many, tim) -> list[np.ndarray]:
    """Candidate and kept facts of every query (one ``filter_many`` call); kept masks per block. ``retriever``: the
    :class:`~.retriever.Retriever` (its ``facts``, ``_fid`` and ``fact_triple``).
    A padded slot (row -1) or a fact deleted since a lazy reader's view is no candidate."""
    masks, slots, asked = [], [], []
    every = np.unique(np.concatenate([rows.ravel() for rows, _ in cands] or [np.zeros(0, np.int64)]))
    retriever.facts.prefetch([retriever._fid(r) for r in every[every >= 0].tolist()])
    for (s, _), (rows, _) in zip(blocks, cands, strict=True):
        valid = rows >= 0
        for r in np.unique(rows[valid]).tolist():
            if not retriever.facts.has(retriever._fid(r)):
                valid &= rows != r
        masks.append(valid.copy())
        triples = {r: retriever.fact_triple(r) for r in np.unique(rows[valid]).tolist()}
        for j, row in enumerate(rows.tolist()):
            slots.append(np.flatnonzero(valid[j]))
            results[s + j].candidate_facts = [triples[r] for r, ok in zip(row, valid[j], strict=True) if ok]
            if filter_many is not None and results[s + j].candidate_facts:
                asked.append(s + j)
    if asked:
        _ask_filter(queries, asked, [s for s, _ in blocks], masks, slots, results, filter_many, tim)
    for (s, _), mask in zip(blocks, masks, strict=True):
        for j, m in enumerate(mask):
            res = results[s + j]
            res.kept_facts = [t for t, ok in zip(res.candidate_facts, m[slots[s + j]], strict=True) if ok]
    return masks


def _ask_filter(queries, asked, starts, masks, slots, results, filter_many, tim) -> None:
    """One ``filter_many`` call for the ``asked`` queries; their kept facts set in ``masks``."""
    tf = time.perf_counter()
    kept = filter_many([queries[i] for i in asked], [results[i].candidate_facts for i in asked])
    tim["filter"] += time.perf_counter() - tf
    for i, keep in zip(asked, kept, strict=True):
        n = int(np.searchsorted(starts, i, side="right")) - 1
        keep = set(keep)
        masks[n][i - starts[n], slots[i]] = [t in keep for t in results[i].candidate_facts]
