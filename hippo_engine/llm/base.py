"""The one small interface every LLM client implements."""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm.auto import tqdm

from hippo_engine.llm import cancel
from hippo_engine.llm.errors import LLMError, LLMTimeoutError

logger = logging.getLogger(__name__)

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


def unparseable_reason(text: object) -> str:
    """The error text for a reply that could not be read: ``unparseable reply: <first 100 chars>``
    (as a Python literal, so control characters show)."""
    return f"unparseable reply: {str(text)[:100]!r}"


@dataclass(frozen=True)
class LLMResponse:
    """One reply. ``cache_key`` is set by ``CachedLLM`` (on hits and misses) so that a caller
    that cannot use the reply can :meth:`LLMClient.discard` it."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"  # "length" when cut off by max_new_tokens
    cached: bool = False
    cache_key: str | None = None


class LLMClient(ABC):
    """Chat-style text generation.

    Implementations: ``OpenAIClient`` (any OpenAI-compatible URL), ``LocalHFClient``
    (a local ``transformers`` causal LM) and ``CachedLLM`` (a persistent SQLite cache around
    either). ``generate`` is the only required method.
    """

    model_name: str = "unknown"
    max_concurrency: int = 1
    show_progress: bool = True     # local clients show a bar while the model loads

    @abstractmethod
    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """Generate one reply. Raises ``LLMError`` (or ``LLMTimeoutError``) on failure."""

    def generation_params(self, *, max_new_tokens: int | None = None,
                          temperature: float | None = None) -> dict:
        """The parameters a ``generate`` call with these arguments would really use (client
        defaults filled in, plus anything else that changes the output). ``CachedLLM`` keys on
        them; implementations with defaults or extra settings override this."""
        return {"max_new_tokens": max_new_tokens, "temperature": temperature}

    def discard(self, response: LLMResponse) -> None:
        """Forget ``response``: a caller that could not use a reply (it did not parse) calls this
        so that a rerun asks the model again instead of reading the bad reply back from a cache.
        A no-op for clients without a cache; ``CachedLLM`` deletes the stored row and wrappers
        delegate to their inner client."""
        return None

    def prompt_tokens(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                      temperature: float | None = None) -> tuple[int, int] | None:
        """``(tokens of messages as the model reads them, the model's context window)`` where the
        client knows both (a local model), else None. The reader uses it to fit a context into
        the window (:mod:`hippo_engine.qa.fit`), passing the parameters of the call to come;
        wrappers delegate to their inner client (a cache answers None for a request it holds)."""
        return None

    def generate_many(self, batch: Sequence[Sequence[Message]], *, max_new_tokens: int | None = None,
                      temperature: float | None = None, show_progress: bool = False,
                      desc: str = "LLM") -> list[LLMResponse | LLMError]:
        """Generate replies for many prompts, up to ``max_concurrency`` at a time.

        Failures do not abort the batch: the failed item's slot holds the ``LLMError``.
        Order is preserved.
        """
        def one(msgs):
            try:
                return self.generate(msgs, max_new_tokens=max_new_tokens, temperature=temperature)
            except LLMError as e:
                logger.warning("LLM call failed: %s", e)
                return e

        n = len(batch)
        workers = max(1, min(self.max_concurrency, n))
        bar = tqdm(total=n, desc=desc, disable=not show_progress or n == 0)
        out: list = [None] * n
        try:
            if workers == 1:
                for i, msgs in enumerate(batch):
                    out[i] = one(msgs)
                    bar.update(1)
            else:
                token = cancel.current()               # the caller's cancel token reaches the pool's threads

                def one_of_pool(msgs):
                    with cancel.cancel_on(token):
                        return one(msgs)
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    futures = {pool.submit(one_of_pool, msgs): i for i, msgs in enumerate(batch)}
                    from concurrent.futures import as_completed
                    for fut in as_completed(futures):
                        out[futures[fut]] = fut.result()
                        bar.update(1)
        finally:
            bar.close()
        return out


__all__ = ["LLMClient", "LLMError", "LLMResponse", "LLMTimeoutError", "Message", "unparseable_reason"]
