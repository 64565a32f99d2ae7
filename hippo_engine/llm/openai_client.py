"""``OpenAIClient``: chat completions against any OpenAI-compatible endpoint.

Works with api.openai.com and with local servers (vLLM, llama.cpp ``llama-server``, Ollama,
LM Studio, ...). Retries are the ``openai`` package's own: on connection errors, timeouts,
408/409/429 and 5xx it retries up to ``max_retries`` times with exponential backoff and jitter
(0.5 s doubling up to 8 s), honouring ``Retry-After`` headers. After the last try the error is
raised as :class:`LLMTimeoutError` (timeouts) or :class:`LLMError`.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message

logger = logging.getLogger(__name__)


class OpenAIClient(LLMClient):
    """An ``LLMClient`` over the ``openai`` package's chat-completions API.

    Args:
        model: the model name the server knows (sent as ``model``).
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``; ``None``: the ``openai``
            default (``OPENAI_BASE_URL`` or api.openai.com).
        api_key: ``None``: env ``OPENAI_API_KEY``, else ``"EMPTY"`` (what local servers accept).
        timeout: seconds per HTTP request (each try).
        max_retries: retries after the first try (so ``max_retries + 1`` tries at most).
        max_concurrency: how many calls ``generate_many`` runs at once.
        temperature: default temperature.
        max_new_tokens: default ``max_tokens``.
        extra_body: extra JSON fields sent with every request (e.g. vLLM's ``top_k``,
            ``repetition_penalty``); they are part of the cache key.
    """

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 120.0, max_retries: int = 5, max_concurrency: int = 8,
                 temperature: float = 0.0, max_new_tokens: int = 2048,
                 extra_body: Mapping | None = None):
        import openai

        if not model:
            raise ValueError("OpenAIClient needs a model name")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.model_name = model
        self.base_url = base_url
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.default_temperature = float(temperature)
        self.default_max_new_tokens = int(max_new_tokens)
        self.extra_body = dict(extra_body or {})
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=self.timeout,
                                     max_retries=self.max_retries)
        self._url = str(self._client.base_url)
        self._openai = openai

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model_name!r}, base_url={self._url!r})"

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._client.close()

    def generation_params(self, *, max_new_tokens: int | None = None,
                          temperature: float | None = None) -> dict:
        """Effective parameters of a call (defaults filled in, plus ``extra_body``)."""
        params = {"max_new_tokens": int(max_new_tokens or self.default_max_new_tokens),
                  "temperature": float(self.default_temperature if temperature is None else temperature)}
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _create(self, messages: Sequence[Message], params: dict, tries: int, where: str):
        """One completion; a reply body that cannot be read is retried like a 5xx (the ``openai``
        client retries only HTTP errors), then reported as an ``LLMError``."""
        for attempt in range(tries):
            try:
                resp = self._client.chat.completions.create(
                    model=self.model_name, messages=[dict(m) for m in messages],
                    max_tokens=params["max_new_tokens"], temperature=params["temperature"],
                    extra_body=self.extra_body or None)
                if resp.choices is not None and not isinstance(resp.choices, list):
                    raise TypeError("choices is not a list")
                return resp
            except Exception as e:  # noqa: BLE001 - only unreadable bodies are handled here
                if not _unreadable(e):
                    raise
                if attempt + 1 == tries:
                    raise LLMError(f"{where}: unreadable reply body on each of {tries} tries: "
                                   f"{type(e).__name__}: {_short(e)}") from e
                time.sleep(min(8.0, 0.5 * 2 ** attempt))
        raise AssertionError("unreachable")

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """One chat completion. Raises :class:`LLMTimeoutError` / :class:`LLMError` once the
        ``openai`` client's retries are used up."""
        params = self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)
        openai = self._openai
        tries = self.max_retries + 1
        where = f"model {self.model_name!r} at {self._url}"
        try:
            resp = self._create(messages, params, tries, where)
        except openai.APITimeoutError as e:
            raise LLMTimeoutError(f"{where}: no reply within {self.timeout:g}s on each of "
                                  f"{tries} tries") from e
        except openai.APIStatusError as e:
            retried = e.status_code in (408, 409, 429) or e.status_code >= 500
            raise LLMError(f"{where}: HTTP {e.status_code}"
                           f"{f' after {tries} tries' if retried else ''}: {_short(e.message)}") from e
        except openai.APIConnectionError as e:
            raise LLMError(f"{where}: connection failed on each of {tries} tries: {e}") from e
        except openai.OpenAIError as e:
            raise LLMError(f"{where}: {type(e).__name__}: {e}") from e
        if not getattr(resp, "choices", None):
            raise LLMError(f"{where}: the reply has no choices")
        choice = resp.choices[0]
        usage = getattr(resp, "usage", None)
        return LLMResponse(
            text=(choice.message.content if choice.message is not None else None) or "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=choice.finish_reason or "stop",
        )


def _unreadable(e: Exception) -> bool:
    """An HTTP 200 whose body is not a chat completion (not JSON, cut off, wrong shape)."""
    return isinstance(e, (ValueError, TypeError, AttributeError, KeyError))


def _short(text: object, limit: int = 300) -> str:
    s = str(text)
    return s if len(s) <= limit else s[:limit] + "..."


__all__ = ["OpenAIClient"]
