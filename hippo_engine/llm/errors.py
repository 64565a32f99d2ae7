"""The errors of LLM calls: :class:`LLMError` (a call failed for good) and its kinds.

They sit below every other module of :mod:`hippo_engine.llm` (the interface in :mod:`.base`, the
cancel token in :mod:`.cancel`, the clients), which import them from here; ``llm.base`` keeps
exporting them.
"""
from __future__ import annotations


class LLMError(RuntimeError):
    """An LLM call failed for good (after retries)."""


class LLMTimeoutError(LLMError):
    """An LLM call timed out on every try."""


__all__ = ["LLMError", "LLMTimeoutError"]
