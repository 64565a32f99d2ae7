"""Explanations of the one score (:mod:`.second.fusion`): its walk terms split into the seed terms of the walks
they come from, scaled as the score scales them, plus the dense term; the terms add up to the score.

The walk term is the last walk's probability over its largest, so each of that walk's seed terms counts
``1 / max``; the head term (the first walk's ``second_hop_head`` best passages) is ``head_weight`` x the
first walk's probability over its largest, so the first walk's seed terms count ``head_weight / max``. A seed
of both walks gets the sum of its two terms. ``note`` says what the score is made of in a reader's words,
``detail`` the same as the formula with the settings' names.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hippo_engine.datatypes import SeedTerm
from hippo_engine.retrieve.second.fusion import Fusion, dense_vote

#: the setting named in a second hop's description ("the second walk (second_hop='wide'), ...")
_HOP_SETTING = re.compile(r" ?\(second_hop='([^']*)'\)")

#: (row index among the targets, row) -> (seed terms, dense prior, paths, walk score), see ``explain._terms``
TermsFn = Callable[[int, int], tuple[list[SeedTerm], float, list, float]]


def _largest(scores: np.ndarray) -> float:
    finite = np.asarray(scores, np.float64)
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if len(finite) else 0.0


def _hop_words(hop: str) -> str:
    """A second hop's description (:meth:`.second_hop.SecondHop.describe`) without its setting's name, as a
    sentence: "the second walk (second_hop='wide'), seeded like ..." -> "The second walk is seeded like ..."."""
    rest = _HOP_SETTING.sub("", hop).strip().removeprefix("the second walk")
    if rest.startswith(", "):
        return f"The second walk is {rest[2:]}."
    if rest.startswith(": "):
        return f"The second walk starts from {rest[2:]}."
    return f"The second walk: {rest.strip(' ,:')}."


class FusedTerms:
    """The terms of one query's score for ``rows``: ``last`` decomposes the last walk for every row,
    ``first`` (with a second walk) the first walk for the rows of its head (``head_rows``)."""

    def __init__(self, fusion: Fusion, tr: dict[str, Any], rows: Sequence[int], last: TermsFn,
                 first: TermsFn | None, head_rows: Sequence[int]):
        self.fusion, self.tr = fusion, tr
        self._last, self._first = last, first
        self._index = {int(x): i for i, x in enumerate(rows)}
        self._head = {int(x): i for i, x in enumerate(head_rows)}
        top = _largest(tr["ppr"])
        self._last_scale = 1.0 / top if top > 0 else 0.0
        first_top = _largest(tr["first"][1]) if tr.get("first") is not None else 0.0
        self._first_scale = fusion.head_weight / first_top if first_top > 0 else 0.0
        dense = np.asarray(tr["dense"], np.float64)
        allowed = np.isfinite(dense)
        self._dense = fusion.dense_weight * dense_vote(np.where(allowed, dense, 0.0), fusion.dense_temperature,
                                                       allowed) if fusion.dense_weight else np.zeros(len(dense))
        self.note, self.detail = self._describe()

    def _describe(self) -> tuple[str, str]:
        """What the score is made of: in a reader's words, and as the formula with the settings' names."""
        f, hop = self.fusion, self.tr.get("hop")
        second = bool(hop)
        head = self._first is not None and f.head_weight and f.head
        words = ["how likely " + ("a second walk" if second else "a walk") + " through the graph is to end at this "
                 "passage (1 for its likeliest)"]
        formula = ["P / max P" + (" of the second walk" if second else "")]
        if head:
            words.append(f"up to {f.head_weight:g} if the first walk ranks it among its {f.head} likeliest")
            formula.append(f"head_weight={f.head_weight:g} x P1 / max P1 on the first walk's second_hop_head={f.head} "
                           "best passages")
        if f.dense_weight:
            words.append(f"up to {f.dense_weight:g} for being about as close to the query as the closest passage "
                         "(dense retrieval's vote)")
            formula.append(f"dense_weight={f.dense_weight:g} x exp((cos - best cos) / "
                           f"dense_temperature={f.dense_temperature:g})")
        count = {2: "two", 3: "three"}.get(len(words), str(len(words)))
        text = f"The score adds {count} parts: " + "; ".join(words) + "." if len(words) > 1 else \
            "The score is " + words[0] + "."
        setting = _HOP_SETTING.search(hop or "")
        if second:
            text += " " + _hop_words(str(hop))
        return text, "score = " + " + ".join(formula) + f"; second_hop='{setting.group(1) if setting else 'none'}'"

    def terms(self, row: int) -> tuple[list[SeedTerm], float, list, float, float]:
        """(seed terms, dense prior, paths, score, dense term) of ``row``: the score as ranked (from the walks'
        probabilities), which the terms add up to within the PPR solver's tolerance."""
        seeds, prior, paths, walk = self._last(self._index[row], row)
        parts = [(seeds, prior, paths, walk, self._last_scale)]
        if self._first is not None and row in self._head and self._first_scale > 0:
            parts.append((*self._first(self._head[row], row), self._first_scale))
        dense_term = float(self._dense[row])
        merged: dict[tuple[str, str], SeedTerm] = {}
        total_prior = 0.0
        for s_terms, s_prior, _, _, scale in parts:
            total_prior += scale * s_prior
            for s in s_terms:
                key = (s.entity, s.kind)
                old = merged.get(key)
                c = scale * s.contribution
                merged[key] = replace(s, contribution=c) if old is None else \
                    replace(old, contribution=old.contribution + c, weight=max(old.weight, s.weight))
        score = sum(scale * s_walk for _, _, _, s_walk, scale in parts) + dense_term   # as ranked
        share = (lambda x: x / score) if score > 0 else (lambda x: 0.0)
        out_seeds = sorted((replace(s, share=share(s.contribution)) for s in merged.values()),
                           key=lambda s: -s.contribution)
        by_path: dict[tuple, Any] = {}                     # one path of both walks: its two shares summed
        for _, _, s_paths, s_walk, scale in parts:          # a path's share: of its walk's score, then of the sum
            factor = scale * s_walk / score if score > 0 else 0.0
            for p in s_paths:
                path_key = (tuple(p.nodes), tuple((e.kind, e.source, e.target) for e in p.edges))
                old_path = by_path.get(path_key)
                share = p.share * factor + (old_path.share if old_path is not None else 0.0)
                by_path[path_key] = replace(p if old_path is None else old_path, share=share)
        out_paths = sorted(by_path.values(), key=lambda p: -p.share)
        return out_seeds, total_prior, out_paths[:max(len(parts[0][2]), 1)], score, dense_term


__all__ = ["FusedTerms"]
