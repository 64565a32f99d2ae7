"""A query's vectors: :func:`encode_queries` (the first step of every search)."""
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
