"""LLM clients: one interface (:class:`LLMClient`), an OpenAI-compatible HTTP client, two local
clients (``llama-cpp-python`` for GGUF files, ``transformers`` for anything), a persistent cache
around either, and :func:`make_llm`; :func:`streaming_to` hands the pieces of local-model
replies to a caller while they are generated.

The heavy modules (``openai``, ``torch``, ``transformers``) are imported only when a client
that needs them is built.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message
from hippo_engine.llm.cache import CachedLLM
from hippo_engine.llm.factory import make_llm
from hippo_engine.llm.streaming import streaming_to
from hippo_engine.llm.usage import MeteredLLM, Usage

if TYPE_CHECKING:  # pragma: no cover
    from hippo_engine.llm.llamacpp import LlamaCppClient
    from hippo_engine.llm.local import LocalHFClient
    from hippo_engine.llm.openai_client import OpenAIClient

__all__ = ["LLMClient", "LLMError", "LLMResponse", "LLMTimeoutError", "Message", "CachedLLM",
           "OpenAIClient", "LocalHFClient", "LlamaCppClient", "make_llm", "MeteredLLM", "Usage",
           "streaming_to"]


def __getattr__(name: str):
    if name == "OpenAIClient":
        from hippo_engine.llm.openai_client import OpenAIClient
        return OpenAIClient
    if name == "LocalHFClient":
        from hippo_engine.llm.local import LocalHFClient
        return LocalHFClient
    if name == "LlamaCppClient":
        from hippo_engine.llm.llamacpp import LlamaCppClient
        return LlamaCppClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
