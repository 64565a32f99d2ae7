"""Vectors of spans of a text taken from the text's own forward pass ("late chunking").

A passage's sentences are usually encoded one by one after the passage itself: two forward passes over
nearly the same tokens. :func:`encode_spans` runs each text once and pools every span from the last layer's
token states of that pass: the span's tokens together with the text's ``[CLS]`` and ``[SEP]`` states (a
sentence encoded alone is pooled over its own special tokens too), averaged, then L2-normalised as the
encoder pools a whole text (:func:`mean_pool`). A span that covers the whole text thus gets the text's own
vector. A span's tokens see the whole text in attention, so its vector differs from the sentence encoded
alone: the index records which kind it holds (``sentence_vectors``).

A span is not pooled (its flag is False, and the caller encodes it alone, as before) when it has no token, or
when part of it lies past the encoder's truncation (``max_length`` tokens of a long text), or when the
tokenizer gives no character offsets (a slow tokenizer).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def mean_pool(hidden) -> np.ndarray:
    """Unit-length vectors of token states (batch, length, dim): the mean over tokens (no padding: the
    attention mask is all ones), L2-normalised."""
    import torch

    pooled = hidden.sum(dim=1) / float(hidden.shape[1])
    return torch.nn.functional.normalize(pooled, p=2.0, dim=-1).cpu().numpy()


def token_range(offsets: Sequence[tuple[int, int]], special: Sequence[int], text: str, start: int,
                end: int) -> tuple[int, int] | None:
    """The positions ``[a, b)`` of the (non-special) tokens of ``text`` that overlap its characters
    ``[start, end)``; None when there is none or the span runs past the last token kept (truncation)."""
    inner = [j for j, s in enumerate(special) if not s]
    if not inner:
        return None
    kept_end = offsets[inner[-1]][1]
    if end > kept_end and text[kept_end:end].strip():
        return None
    hit = [j for j in inner if offsets[j][0] < end and offsets[j][1] > start]
    return (hit[0], hit[-1] + 1) if hit else None


def plan_spans(encoder: Any, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
    """Token ids of ``texts`` (as :meth:`encode` tokenizes them) and, per text, ``(span index, a, b)`` of its
    poolable spans (:func:`token_range`)."""
    enc = encoder.tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=encoder.max_length,
                            padding=False, return_offsets_mapping=True, return_special_tokens_mask=True,
                            return_attention_mask=False, return_token_type_ids=False)
    ranges: list[list[tuple[int, int, int]]] = [[] for _ in texts]
    for k, (i, start, end) in enumerate(spans):
        got = token_range(enc["offset_mapping"][i], enc["special_tokens_mask"][i], texts[i], start, end)
        if got is not None:
            ranges[i].append((k, *got))
    return enc["input_ids"], ranges


def encode_spans(encoder: Any, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
    """``(text vectors, span vectors, pooled)`` for ``texts`` and character spans ``(text index, start, end)``
    of them, one forward pass per text on ``encoder`` (a
    :class:`~hippo_engine.models.encoder.TransformersEncoder`): the text vectors are those :meth:`encode`
    gives; a span's row is its pooled vector where ``pooled`` is True, zeros where it is to be encoded alone."""
    n, dim = len(texts), encoder.dim
    out = np.empty((n, dim), np.float32)
    span_out = np.zeros((len(spans), dim), np.float32)
    pooled = np.zeros(len(spans), bool)
    if n == 0:
        return out, span_out, pooled
    if not encoder.tokenizer.is_fast:          # no character offsets: every span is encoded alone
        return encoder.encode(texts), span_out, pooled
    ids, ranges = plan_spans(encoder, texts, spans)

    def run(idx: np.ndarray, states) -> None:
        out[idx] = mean_pool(states)
        rows, which = [], []
        for k, i in enumerate(idx.tolist()):
            for j, a, b in ranges[i]:
                rows.append(_span_states(states[k], a, b))
                which.append(j)
        if rows:
            span_out[which] = _pooled_rows(rows)
            pooled[which] = True

    encoder.each_batch(ids, run)
    return out, span_out, pooled


def _span_states(states, a: int, b: int):
    """The mean over a text's ``[CLS]`` state (row 0), its tokens ``a:b`` and its ``[SEP]`` state (the last
    row); exactly the text's own mean where the span is all of its tokens."""
    if a == 1 and b == states.shape[0] - 1:
        return states.sum(dim=0) / float(states.shape[0])
    import torch

    picked = torch.cat([states[:1], states[a:b], states[-1:]])
    return picked.sum(dim=0) / float(picked.shape[0])


def _pooled_rows(rows: list) -> np.ndarray:
    """Unit-length float32 rows of the span means ``rows``."""
    import torch

    return torch.nn.functional.normalize(torch.stack(rows), p=2.0, dim=-1).cpu().numpy()


__all__ = ["encode_spans", "mean_pool", "plan_spans", "token_range"]
