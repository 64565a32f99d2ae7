"""``OpenAIClient``: chat completions against any OpenAI-compatible endpoint.

Works with api.openai.com and with local servers (vLLM, llama.cpp ``llama-server``, Ollama,
LM Studio, ...). Retries are this module's own (the ``openai`` client runs with
``max_retries=0``), and a request is only sent again when the server cannot still be working on
it:

* re-sent, up to ``max_retries`` times with exponential backoff (:data:`RETRY_INITIAL_DELAY`
  doubling up to :data:`RETRY_MAX_DELAY`): a connection that could not be made (the request
  never reached the server), HTTP 408/409/429 (after ``Retry-After`` seconds, at most
  :data:`RETRY_AFTER_CAP`) and 5xx other than 504, and HTTP 200 bodies that are not a chat
  completion;
* never re-sent: a read timeout (no reply within ``timeout`` seconds: the server may still be
  processing the request, and a second copy would only queue behind it), a gateway timeout (504)
  and a connection that broke after the request was sent. They raise :class:`LLMTimeoutError` /
  :class:`LLMError` at once, saying how to raise the timeout or lower the concurrency;
* not retried either: other 4xx. 401/403 say that the API key was refused and how to set it; a
  404 from a base URL whose path does not end in ``/v1`` suggests the ``/v1`` URL.
"""
from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from hippo_engine.llm import cancel
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message

logger = logging.getLogger(__name__)

RETRY_INITIAL_DELAY = 0.5   # seconds before the first re-send; doubles per try
RETRY_MAX_DELAY = 8.0       # longest backoff between two tries
RETRY_AFTER_CAP = 60.0      # longest wait a server's Retry-After header can ask for
CONNECT_TIMEOUT = 30.0      # seconds to open a connection (a failed one is retried)
RETRY_STATUS = (408, 409, 429)
TIMEOUT_HINT = ("raise the timeout (config llm.timeout, CLI --llm-timeout, env HIPPO_LLM_TIMEOUT) or lower "
                "the number of requests in flight (CLI --llm-concurrency, env HIPPO_LLM_CONCURRENCY)")
REDACTED = "[api key redacted]"
KEY_HINT = "set the key with the environment variable OPENAI_API_KEY, the CLI flag --api-key or config llm.api_key"


class _Retry(Exception):
    """One try failed in a way that may be sent again (internal)."""

    def __init__(self, what: str, detail: str, delay: float | None = None):
        super().__init__(what)
        self.what, self.detail, self.delay = what, detail, delay


class OpenAIClient(LLMClient):
    """An ``LLMClient`` over the ``openai`` package's chat-completions API.

    Args:
        model: the model name the server knows (sent as ``model``).
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``; ``None``: the ``openai``
            default (``OPENAI_BASE_URL`` or api.openai.com).
        api_key: ``None``: env ``OPENAI_API_KEY``, else ``"EMPTY"`` (what local servers accept).
        timeout: seconds to wait for the reply of one try (not re-sent when it passes; keep it
            above the server's latency under load, e.g. 600 s for a local server).
        max_retries: re-sends after the first try, for the failures that are re-sent (so
            ``max_retries + 1`` tries at most).
        max_concurrency: how many calls ``generate_many`` runs at once.
        temperature: default temperature.
        max_new_tokens: default ``max_tokens``.
        extra_body: extra JSON fields sent with every request (e.g. vLLM's ``top_k``,
            ``repetition_penalty``); they are part of the cache key.
    """

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 600.0, max_retries: int = 5, max_concurrency: int = 8,
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
        self._key = key
        self._connect_timeout = min(CONNECT_TIMEOUT, self.timeout)
        self._client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0,
                                     timeout=openai.Timeout(self.timeout, connect=self._connect_timeout))
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
        params: dict[str, Any] = {"max_new_tokens": int(max_new_tokens or self.default_max_new_tokens),
                  "temperature": float(self.default_temperature if temperature is None else temperature)}
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _create(self, messages: Sequence[Message], params: dict, where: str):
        """One try. Raises :class:`_Retry` for a failure that may be re-sent, else
        :class:`LLMTimeoutError` / :class:`LLMError`."""
        openai = self._openai
        request = dict(model=self.model_name, messages=[dict(m) for m in messages],
                       max_tokens=params["max_new_tokens"], temperature=params["temperature"],
                       extra_body=self.extra_body or None)
        try:
            token = cancel.current()
            if token is None:
                resp = self._client.chat.completions.create(**request)  # type: ignore[call-overload]
            else:
                resp = self._abandonable(request, token)
            if resp.choices is not None and not isinstance(resp.choices, list):
                raise TypeError("choices is not a list")
            return resp
        except openai.APITimeoutError as e:
            if _never_sent(e):
                raise _Retry("connection failed", f"no connection within {self._connect_timeout:g}s") from e
            raise LLMTimeoutError(
                f"{where}: no reply within {self.timeout:g}s; the request was not sent again because the "
                f"server may still be processing it (a local server under load answers slowly: "
                f"{self.max_concurrency} request(s) in flight at most). If it is just slow, {TIMEOUT_HINT}") from e
        except openai.APIStatusError as e:
            raise self._status_error(e, where) from e
        except openai.APIConnectionError as e:
            cause = _cause(e)
            if _never_sent(e):
                raise _Retry("connection failed", str(cause or e)) from e
            raise LLMError(f"{where}: the connection broke after the request was sent ({cause or e}); not sent "
                           "again because the server may have received it and still be processing it") from e
        except openai.OpenAIError as e:
            raise LLMError(f"{where}: {type(e).__name__}: {e}") from e
        except Exception as e:  # noqa: BLE001 - only unreadable bodies are handled here
            if not _unreadable(e):
                raise
            raise _Retry("unreadable reply body", f"{type(e).__name__}: {_short(e)}") from e

    def _abandonable(self, request: dict, token: threading.Event):
        """One try that stops once ``token`` is set (:mod:`.cancel`): the request runs on a client of its
        own in an event loop of its own; cancelling it closes the connection, so the server sees its
        client leave. Raises :class:`~hippo_engine.llm.cancel.LLMCancelled`, or what the request raised."""
        cancel.check(f"the request to {self._url}")
        openai = self._openai

        async def run():
            client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key, max_retries=0,
                                        timeout=openai.Timeout(self.timeout, connect=self._connect_timeout))
            try:
                call = asyncio.ensure_future(client.chat.completions.create(**request))
                while not call.done():
                    await asyncio.wait({call}, timeout=cancel.POLL_S)
                    if token.is_set() and not call.done():
                        call.cancel()
                        await asyncio.gather(call, return_exceptions=True)
                        raise cancel.LLMCancelled(f"the request to {self._url} was cancelled (the connection "
                                                  "closed): its caller went away")
                return call.result()
            finally:
                await client.close()

        return asyncio.run(run())

    def _status_error(self, e, where: str) -> Exception:
        """The exception for an HTTP error status: a :class:`_Retry` for 408/409/429/5xx (not
        504), an ``LLMError`` (``LLMTimeoutError`` for 504) with advice for the rest."""
        code, msg = e.status_code, _short(e.message)
        if code in RETRY_STATUS or (code >= 500 and code != 504):
            return _Retry(f"HTTP {code}", msg, _retry_after(getattr(e, "response", None)))
        if code == 504:
            return LLMTimeoutError(f"{where}: HTTP 504: a gateway gave up waiting for the server ({msg}); not "
                                   f"sent again because the server may still be processing it. {TIMEOUT_HINT}")
        if code in (401, 403):
            return LLMError(f"{where}: HTTP {code}: the API key was refused ({msg}); {KEY_HINT}")
        if code == 404:
            path = urlsplit(self._url).path.rstrip("/")
            hint = (f"did you mean {self._url.rstrip('/')}/v1?" if not path.endswith("/v1")
                    else f"is {self.model_name!r} a model this server serves?")
            return LLMError(f"{where}: HTTP 404 ({msg}); {hint}")
        return LLMError(f"{where}: HTTP {code}: {msg}")

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """One chat completion, with the retries of the module docstring. Raises
        :class:`LLMTimeoutError` / :class:`LLMError`."""
        try:
            return self._generate(messages, max_new_tokens, temperature)
        except LLMError as e:   # a server may echo the request's headers: never pass the key on
            text = self._scrub(str(e))
            if text == str(e):
                raise
            raise type(e)(text) from e.__cause__

    def _scrub(self, text: str) -> str:
        """``text`` with this client's API key masked (servers that echo request headers would
        otherwise copy it into errors, warnings and logs)."""
        key = self._key
        return text.replace(key, REDACTED) if key and len(key) >= 4 and key != "EMPTY" else text

    def _generate(self, messages: Sequence[Message], max_new_tokens: int | None,
                  temperature: float | None) -> LLMResponse:
        params = self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)
        tries = self.max_retries + 1
        where = f"model {self.model_name!r} at {self._url}"
        for attempt in range(tries):
            try:
                resp = self._create(messages, params, where)
                break
            except _Retry as r:
                if attempt + 1 == tries:
                    each = f"on each of {tries} tries" if tries > 1 else "(no retries configured)"
                    raise LLMError(f"{where}: {r.what} {each}: {r.detail}") from r.__cause__
                delay = r.delay if r.delay is not None else _backoff(attempt)
                logger.info("%s: %s (%s); try %d of %d in %.1fs", where, r.what, self._scrub(r.detail), attempt + 2,
                            tries, delay)
                token = cancel.current()
                if token is None:
                    time.sleep(delay)
                elif token.wait(delay):
                    cancel.check(where)
        if not getattr(resp, "choices", None):
            raise LLMError(f"{where}: the reply has no choices")
        choice = resp.choices[0]
        usage = getattr(resp, "usage", None)
        return LLMResponse(
            text=self._scrub((choice.message.content if choice.message is not None else None) or ""),
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=choice.finish_reason or "stop",
        )


def _backoff(attempt: int) -> float:
    """Exponential backoff with a little jitter: 0.5 s, 1 s, 2 s, ... up to 8 s (by default)."""
    return min(RETRY_MAX_DELAY, RETRY_INITIAL_DELAY * 2 ** attempt) * random.uniform(0.8, 1.0)


def _retry_after(response) -> float | None:
    """Seconds a ``Retry-After`` (or ``retry-after-ms``) header asks for, capped at
    :data:`RETRY_AFTER_CAP`; None without a usable header."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name)) * scale  # type: ignore[arg-type]  # None: TypeError
        except (TypeError, ValueError):
            continue
        if value >= 0 and value == value:
            return min(value, RETRY_AFTER_CAP)
    return None


def _cause(e: BaseException) -> BaseException | None:
    """The exception the ``openai`` client wrapped (an ``httpx`` or ``httpx2`` one)."""
    return e.__cause__ or e.__context__


#: the transport exceptions raised before a request was sent, by name: ``openai`` 1.x and 2.x
#: raise them from ``httpx``, 3.x from ``httpx2`` (same names)
NEVER_SENT = ("ConnectError", "ConnectTimeout", "PoolTimeout")
HTTP_MODULES = ("httpx", "httpx2")


@functools.cache
def _never_sent_types() -> tuple[type, ...]:
    """The never-sent exception classes of every HTTP library installed (a library that is not
    installed cannot have raised one)."""
    types = []
    for name in HTTP_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        types += [getattr(module, cls) for cls in NEVER_SENT if isinstance(getattr(module, cls, None), type)]
    return tuple(types)


def _never_sent(e: BaseException) -> bool:
    """Whether the request surely never reached the server (no connection could be made)."""
    return isinstance(_cause(e), _never_sent_types())


def _unreadable(e: Exception) -> bool:
    """An HTTP 200 whose body is not a chat completion (not JSON, cut off, wrong shape)."""
    return isinstance(e, (ValueError, TypeError, AttributeError, KeyError))


def _short(text: object, limit: int = 300) -> str:
    s = str(text)
    return s if len(s) <= limit else s[:limit] + "..."


__all__ = ["OpenAIClient"]
