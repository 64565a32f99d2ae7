"""LLM clients: one interface (:class:`LLMClient`), an OpenAI-compatible HTTP client, a local
``transformers`` client, a persistent cache around either, and :func:`make_llm`.

The heavy modules (``openai``, ``torch``, ``transformers``) are imported only when a client
that needs them is built.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message
from .cache import CachedLLM
from .factory import make_llm

if TYPE_CHECKING:  # pragma: no cover
    from .local import LocalHFClient
    from .openai_client import OpenAIClient

__all__ = ["LLMClient", "LLMError", "LLMResponse", "LLMTimeoutError", "Message", "CachedLLM",
           "OpenAIClient", "LocalHFClient", "make_llm"]


def __getattr__(name: str):
    if name == "OpenAIClient":
        from .openai_client import OpenAIClient
        return OpenAIClient
    if name == "LocalHFClient":
        from .local import LocalHFClient
        return LocalHFClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
