"""Fit the reader's context into a local model's window.

A mode's context can be longer than the reader's window: HiRAG's budgets (``hi_text_unit_tokens``
20,000, ``hi_bridge_tokens`` 12,500, ...) were made for 128k-token models, and the packaged llama.cpp
reader reads 16,384. Without a fit such a question fails (llama.cpp refuses the prompt). Where the
client can count a prompt's tokens and knows its window (:meth:`LLMClient.prompt_tokens`: the local
llama.cpp reader), :func:`fit_parts` keeps the longest prefix of the context's parts (the lines of
an assembled context, or the ranked passages) whose prompt leaves room for the reply; the
instructions, the worked example and the question stay whole. A prompt that fits (leaving
``REPLY_ROOM`` tokens free) is never touched, so figures measured before stay as they were. Other
clients (an OpenAI-compatible server) are passed through unchanged: the server reports an
over-long prompt itself.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: tokens kept free for the reply when the prompt is cut (at most the call's max_new_tokens)
REPLY_ROOM = 512


def fit_parts(llm: Any, parts: Sequence[str], build: Callable[[Sequence[str]], list[dict]],
              reply_tokens: int | None = None, temperature: float | None = None) -> tuple[int, list[dict]]:
    """``(parts dropped, messages)``: ``build(parts)`` when its prompt leaves ``REPLY_ROOM`` tokens
    (fewer when ``reply_tokens``, the call's ``max_new_tokens``, asks for fewer) of ``llm``'s window
    free, else ``build`` of the longest prefix of ``parts`` that does (binary search on the prefix
    length; possibly no part at all). ``reply_tokens`` and ``temperature`` go to
    ``llm.prompt_tokens`` (a cache holding the exact request answers None: nothing to fit)."""
    messages = build(parts)
    counted = llm.prompt_tokens(messages, max_new_tokens=reply_tokens, temperature=temperature)
    if counted is None:
        return 0, messages
    tokens, window = counted
    limit = window - min(REPLY_ROOM, reply_tokens or REPLY_ROOM)
    if tokens <= limit:
        return 0, messages
    lo, hi = 0, len(parts) - 1          # the longest prefix that fits lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        n = llm.prompt_tokens(build(parts[:mid]), max_new_tokens=reply_tokens, temperature=temperature)
        if n is None or n[0] <= limit:  # None: a cache holds this request (an earlier run's cut): it fit
            lo = mid
        else:
            hi = mid - 1
    return len(parts) - lo, build(parts[:lo])


__all__ = ["REPLY_ROOM", "fit_parts"]
