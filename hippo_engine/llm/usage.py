"""LLM usage metering: one counter type and one middleware client that fills it.

``Usage`` counts calls, replies served from the response cache, failures and tokens (spent on
new calls vs. served from the cache). ``MeteredLLM`` wraps any ``LLMClient`` (optionally created
lazily, on the first call) and records every reply of ``generate`` and ``generate_many`` into its
``usage``. ``CachedLLM`` and the reproduction scripts use these; nothing else counts tokens.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, Message

logger = logging.getLogger(__name__)

FIELDS = ("calls", "cache_hits", "errors", "prompt_tokens", "completion_tokens",
          "cached_prompt_tokens", "cached_completion_tokens")


class Usage:
    """Thread-safe LLM counters. ``add`` takes an ``LLMResponse`` or an exception."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c = dict.fromkeys(FIELDS, 0)

    def add(self, res: LLMResponse | BaseException) -> None:
        with self._lock:
            c = self._c
            if not isinstance(res, LLMResponse):
                c["errors"] += 1
                return
            c["calls"] += 1
            p, q = int(res.prompt_tokens or 0), int(res.completion_tokens or 0)
            if res.cached:
                c["cache_hits"] += 1
                c["cached_prompt_tokens"] += p
                c["cached_completion_tokens"] += q
            else:
                c["prompt_tokens"] += p
                c["completion_tokens"] += q

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters."""
        with self._lock:
            return dict(self._c)

    @property
    def spent_tokens(self) -> int:
        """Prompt + completion tokens of calls not served from the cache."""
        with self._lock:
            return self._c["prompt_tokens"] + self._c["completion_tokens"]

    def __repr__(self) -> str:
        return f"Usage({self.snapshot()})"


def delta(after: dict, before: dict) -> dict:
    """``after - before``, counter by counter."""
    return {k: after[k] - before.get(k, 0) for k in after}


class MeteredLLM(LLMClient):
    """Middleware: forwards to an inner client and records every reply in ``self.usage``.

    ``inner`` is a client or a zero-argument factory; a factory runs on first use, so a caller
    that never calls the LLM never loads one.
    """

    def __init__(self, inner: LLMClient | Callable[[], LLMClient], model_name: str | None = None,
                 usage: Usage | None = None):
        self._inner = inner if isinstance(inner, LLMClient) else None
        self._factory: Callable[[], LLMClient] | None = None if isinstance(inner, LLMClient) else inner
        self.model_name = model_name or (self._inner.model_name if self._inner is not None else "unknown")
        self.usage = usage or Usage()
        self._load_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the inner client exists yet."""
        return self._inner is not None

    @property
    def inner(self) -> LLMClient:
        """The wrapped client (created on first access when built from a factory)."""
        with self._load_lock:
            if self._inner is None:
                if self._factory is None:   # pragma: no cover - one of the two is always set
                    raise RuntimeError("MeteredLLM has neither a client nor a factory")
                logger.info("loading LLM %s", self.model_name)
                self._inner = self._factory()
            return self._inner

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return getattr(self.inner, "max_concurrency", 1)

    def generation_params(self, **kw: Any) -> dict:
        return self.inner.generation_params(**kw)

    def prompt_tokens(self, messages: Sequence[Message], **kw: Any) -> tuple[int, int] | None:
        return self.inner.prompt_tokens(messages, **kw)

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        try:
            res = self.inner.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        except LLMError as e:
            self.usage.add(e)
            raise
        self.usage.add(res)
        return res

    def discard(self, response: LLMResponse) -> None:
        """Delegates to the inner client (a no-op when it was never loaded)."""
        if self._inner is not None:
            self._inner.discard(response)

    def generate_many(self, batch: Sequence[Sequence[Message]], *, max_new_tokens: int | None = None,
                      temperature: float | None = None, show_progress: bool = False,
                      desc: str = "LLM") -> list[LLMResponse | LLMError]:
        out = self.inner.generate_many(batch, max_new_tokens=max_new_tokens, temperature=temperature,
                                       show_progress=show_progress, desc=desc)
        for res in out:
            self.usage.add(res)
        return out

    def __repr__(self) -> str:
        return f"MeteredLLM({self._inner!r})"


__all__ = ["FIELDS", "MeteredLLM", "Usage", "delta"]
