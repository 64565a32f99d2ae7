"""A query's vectors: :func:`encode_queries` (the first step of every search), and with its entity mentions
:func:`encode_with_mentions` (one encoder call for the query and its mentions)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.config import HippoConfig, RetrievalConfig


def encode_queries(encoder, queries: Sequence[str], config: HippoConfig | RetrievalConfig
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(fact-matching, passage-matching) query vectors, with the configured query instructions
    (one encoding when both instructions are the same)."""
    q_fact = encoder.encode(queries, instruction=config.query_instruction_fact)
    if config.query_instruction_passage == config.query_instruction_fact:
        return q_fact, q_fact
    return q_fact, encoder.encode(queries, instruction=config.query_instruction_passage)


def encode_with_mentions(encoder, queries: Sequence[str], config: HippoConfig | RetrievalConfig,
                         names: Sequence[Sequence[str]] | None
                         ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None] | None]:
    """:func:`encode_queries`' two query vectors and each query's entity vectors (rows over its entity
    ``names``, None for a query without any; None for all without ``names``), in one encoder call
    (:meth:`~hippo_engine.models.encoder.Encoder.encode_groups`: a single query and its mentions are one
    forward pass); the vectors are those of separate calls."""
    same = config.query_instruction_passage == config.query_instruction_fact
    groups: list[tuple[Sequence[str], str | None]] = [(queries, config.query_instruction_fact)]
    if not same:
        groups.append((queries, config.query_instruction_passage))
    if names is not None:
        groups.append(([e for ents in names for e in ents], None))
    vectors = encoder.encode_groups(groups)
    q_fact, q_pass = vectors[0], vectors[0] if same else vectors[1]
    if names is None:
        return q_fact, q_pass, None
    flat = vectors[-1]
    ends = np.cumsum([len(ents) for ents in names]).tolist()
    return q_fact, q_pass, [flat[e - len(ents):e] if ents else None for ents, e in zip(names, ends, strict=True)]
