"""LLM accounting for the tables: the metered LLM wrapper and the token lines of the reports."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from hippo_engine.llm.base import LLMClient
from hippo_engine.llm.usage import MeteredLLM as UsageMeteredLLM
from hippo_engine.llm.usage import delta  # noqa: F401 (re-exported for the runner)

logger = logging.getLogger(__name__)


class MeteredLLM(UsageMeteredLLM):
    """The engine's metering middleware (``hippo_engine.llm.usage``), created on first use so
    tables that need no LLM never load one; says what to do when the LLM cannot be created."""

    def __init__(self, factory: Callable[[], LLMClient], model_name: str):
        def load() -> LLMClient:
            try:
                return factory()
            except (ImportError, OSError) as e:
                raise RuntimeError(f"could not create the LLM {model_name!r} needed by this table: {e}. "
                                   "Pass --llm NAME (with --llm-base-url for a server), or run the table "
                                   "with --no-filter where that applies.") from e
        super().__init__(load, model_name)

    def snapshot(self) -> dict:
        """A copy of the counters."""
        return self.usage.snapshot()


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
