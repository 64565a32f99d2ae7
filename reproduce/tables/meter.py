"""LLM accounting for the tables: the metered LLM wrapper and the token lines of the reports."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse

logger = logging.getLogger(__name__)


class MeteredLLM(LLMClient):
    """Wraps the LLM the tables use: creates it on first use (so tables that need no LLM never
    load one) and counts calls, cache hits and tokens. A reply whose ``cached`` flag is set
    (the engine's SQLite cache) counts as served from the cache, not as tokens spent."""

    def __init__(self, factory: Callable[[], LLMClient], model_name: str):
        self._factory = factory
        self._inner: LLMClient | None = None
        self.model_name = model_name
        self._lock = threading.Lock()
        self.counts = {"calls": 0, "cache_hits": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0,
                       "cached_prompt_tokens": 0, "cached_completion_tokens": 0}

    @property
    def loaded(self) -> bool:
        """Whether the underlying LLM has been created."""
        return self._inner is not None

    @property
    def inner(self) -> LLMClient:
        """The wrapped client, created on first access."""
        with self._lock:
            if self._inner is None:
                logger.info("loading LLM %s", self.model_name)
                try:
                    self._inner = self._factory()
                except (ImportError, OSError) as e:
                    raise RuntimeError(f"could not create the LLM {self.model_name!r} needed by this table: {e}. "
                                       "Pass --llm NAME (with --llm-base-url for a server), or run the table "
                                       "with --no-filter where that applies.") from e
            return self._inner

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return getattr(self.inner, "max_concurrency", 1)

    def generation_params(self, **kw) -> dict:
        return self.inner.generation_params(**kw)

    def _count(self, res: Any) -> None:
        with self._lock:
            c = self.counts
            if isinstance(res, LLMResponse):
                c["calls"] += 1
                if res.cached:
                    c["cache_hits"] += 1
                    c["cached_prompt_tokens"] += int(res.prompt_tokens or 0)
                    c["cached_completion_tokens"] += int(res.completion_tokens or 0)
                else:
                    c["prompt_tokens"] += int(res.prompt_tokens or 0)
                    c["completion_tokens"] += int(res.completion_tokens or 0)
            else:
                c["errors"] += 1

    def generate(self, messages, *, max_new_tokens=None, temperature=None) -> LLMResponse:
        try:
            res = self.inner.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        except LLMError as e:
            self._count(e)
            raise
        self._count(res)
        return res

    def generate_many(self, batch, *, max_new_tokens=None, temperature=None, show_progress=False, desc="LLM"):
        out = self.inner.generate_many(batch, max_new_tokens=max_new_tokens, temperature=temperature,
                                       show_progress=show_progress, desc=desc)
        for res in out:
            self._count(res)
        return out

    def snapshot(self) -> dict:
        """A copy of the counters."""
        with self._lock:
            return dict(self.counts)


def delta(after: dict, before: dict) -> dict:
    """``after - before``, counter by counter."""
    return {k: after[k] - before.get(k, 0) for k in after}


def tokens_line(c: dict) -> str:
    """The report's line for LLM counters: tokens spent, new calls, cache hits, failures."""
    spent = c.get("prompt_tokens", 0) + c.get("completion_tokens", 0)
    new_calls = c.get("calls", 0) - c.get("cache_hits", 0)
    line = (f"{spent:,.0f} tokens spent ({c.get('prompt_tokens', 0):,.0f} prompt + "
            f"{c.get('completion_tokens', 0):,.0f} completion) in {new_calls:,.0f} new call(s)")
    if c.get("cache_hits"):
        cached = c.get("cached_prompt_tokens", 0) + c.get("cached_completion_tokens", 0)
        line += f"; {c['cache_hits']:,.0f} call(s) ({cached:,.0f} tokens) served from the LLM cache"
    if c.get("errors"):
        line += f"; {c['errors']:,.0f} failed call(s)"
    return line


def sum_llm(entries: Sequence[dict]) -> dict:
    """The ``llm`` counters of per-question entries, summed."""
    out: dict[str, float] = {}
    for e in entries:
        for k, v in (e.get("llm") or {}).items():
            out[k] = out.get(k, 0) + v
    return out
