"""One forward pass for texts of different lengths: a BERT encoder run on their tokens packed end to end.

The encoder's usual plan (:class:`~hippo_engine.models.encoder.TransformersEncoder`) runs one forward pass per
distinct token length, because it never pads (padding changes a vector's last bits). A query and its entity
mentions (about 20, 4, 6 tokens) thus cost three forward passes of at least ``min_rows`` rows each, nearly three
times one pass. :class:`PackedBert` computes the same vectors in one pass: every token of every text is one row
of the layers' matrix products (which treat rows independently once they number ``min_rows`` or more, see
``_MIN_GEMM_ROWS`` in the encoder), and attention, the only step that mixes tokens, runs per text on its own
rows, exactly as an unpadded batch of that one length would. Position ids restart at 0 in each text; the
mean pooling and L2 normalisation are the encoder's.

The result is meant to be bit-identical to the usual plan, which :meth:`PackedBert.agrees` checks once on the
machine (a library build whose kernels round differently turns packing off, see
:meth:`~hippo_engine.models.encoder.TransformersEncoder.packing`). Only the plain ``BertModel`` architecture
(all-MiniLM-L6-v2, the default) with torch's scaled-dot-product attention is packed; other models keep the
usual plan.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def packable(model: Any) -> bool:
    """Whether ``model`` is an encoder-only ``BertModel`` with absolute positions and SDPA attention (what
    :class:`PackedBert` reproduces)."""
    cfg = getattr(model, "config", None)
    return (type(model).__name__ == "BertModel" and cfg is not None and getattr(cfg, "model_type", "") == "bert"
            and not getattr(cfg, "is_decoder", False) and not getattr(cfg, "add_cross_attention", False)
            and getattr(cfg, "position_embedding_type", "absolute") == "absolute"
            and getattr(cfg, "_attn_implementation", None) == "sdpa")


def pack_rows(lengths: Sequence[int], min_rows: int) -> list[int]:
    """The lengths of the packed texts followed by throw-away copies of the first, enough for ``min_rows``
    rows in all (see ``_MIN_GEMM_ROWS`` in the encoder)."""
    total = sum(lengths)
    copies = math.ceil((min_rows - total) / lengths[0]) if total < min_rows else 0
    return list(lengths) + [lengths[0]] * copies


class PackedBert:
    """The forward pass of a ``BertModel`` over packed texts (see the module's docstring)."""

    def __init__(self, model: Any, min_rows: int):
        self.model, self.min_rows = model, min_rows

    def embed(self, batch_ids: list[list[int]]) -> np.ndarray:
        """Unit-length mean-pooled vectors (len(batch_ids), dim) of token id lists (special tokens included),
        in one forward pass; call under ``torch.inference_mode()``."""
        import torch

        lengths = pack_rows([len(x) for x in batch_ids], self.min_rows)
        copies = len(lengths) - len(batch_ids)
        flat = [t for x in batch_ids for t in x] + list(batch_ids[0]) * copies
        positions = [p for n in lengths for p in range(n)]
        ids = torch.tensor(flat, dtype=torch.long)
        x = self._embeddings(ids, torch.tensor(positions, dtype=torch.long))
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        for layer in self.model.encoder.layer:
            x = self._layer(layer, x, bounds)
        x = x.float()
        pooled = torch.stack([x[bounds[i]:bounds[i + 1]].unsqueeze(0).sum(dim=1)[0] / float(n)
                              for i, n in enumerate(lengths[:len(batch_ids)])])
        return torch.nn.functional.normalize(pooled, p=2.0, dim=-1).cpu().numpy()

    def _embeddings(self, ids, positions):
        """Word + token type (all 0) + position embeddings, layer-normalised, one row per token."""
        import torch

        e = self.model.embeddings
        x = e.word_embeddings(ids) + e.token_type_embeddings(torch.zeros_like(ids))
        return e.LayerNorm(x + e.position_embeddings(positions))

    @staticmethod
    def _layer(layer: Any, x, bounds: list[int]):
        """One transformer layer over the packed rows: the projections on all rows at once, attention per text
        (texts of one length side by side in one call, as a batch of that length runs)."""
        import torch
        from torch.nn.functional import scaled_dot_product_attention

        sa = layer.attention.self
        heads, size = sa.num_attention_heads, sa.attention_head_size
        q, k, v = sa.query(x), sa.key(x), sa.value(x)
        parts = []
        for s, e, n in runs(bounds):
            shape = (n, (e - s) // n, heads, size)
            out = scaled_dot_product_attention(q[s:e].view(shape).transpose(1, 2), k[s:e].view(shape).transpose(1, 2),
                                               v[s:e].view(shape).transpose(1, 2), attn_mask=None, dropout_p=0.0,
                                               scale=sa.scaling)
            parts.append(out.transpose(1, 2).reshape(e - s, heads * size))
        attended = torch.cat(parts).contiguous()
        so = layer.attention.output
        attended = so.LayerNorm(so.dense(attended) + x)
        inner = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(attended))
        return layer.output.LayerNorm(layer.output.dense(inner) + attended)


def runs(bounds: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(start row, end row, texts)`` of each run of consecutive texts of one length (``bounds``: the texts'
    row offsets and the end)."""
    out: list[tuple[int, int, int]] = []
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if out and out[-1][1] == s and (out[-1][1] - out[-1][0]) // out[-1][2] == e - s:
            out[-1] = (out[-1][0], e, out[-1][2] + 1)
        else:
            out.append((s, e, 1))
    return out


def plan_packs(lengths: Sequence[int], packs: int) -> list[np.ndarray]:
    """Positions of texts of token ``lengths`` split into at most ``packs`` packs of about equal tokens (the
    longest first into the lightest pack), each pack's texts by length (equal lengths side by side)."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    load = [0] * max(1, packs)
    members: list[list[int]] = [[] for _ in load]
    for i in order.tolist():
        j = load.index(min(load))
        members[j].append(i)
        load[j] += int(lengths[i])
    return [np.array(sorted(m, key=lambda i: (lengths[i], i)), dtype=np.int64) for m in members if m]


__all__ = ["PackedBert", "pack_rows", "packable", "plan_packs", "runs"]
