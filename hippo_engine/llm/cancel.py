"""Stopping an LLM call whose caller went away: a cooperative cancel token per call.

A caller that may give up on a call (the service's ``POST /answer`` when its client disconnects)
runs it inside :func:`cancel_on` with a ``threading.Event``; setting the event from any thread asks
the LLM calls made inside the block to stop: the local clients (llama.cpp, ``transformers``) check
it in their stopping criteria after each token, the OpenAI-compatible client closes the HTTP
request (the server sees the connection close), and a call waiting for another's identical request
in the cache, or for a local model's lock, stops waiting. A stopped call raises :class:`LLMCancelled`
(an :class:`~hippo_engine.llm.errors.LLMError`, so a batch records it as that item's failure).

Without a token (every call outside such a block: the CLI, indexing, benchmarks) nothing changes:
the clients take their usual path, and replies and token counts are those of an uncancelled call.
The token lives in a context variable, so the calls of two requests served by two threads never
see each other's token.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

from hippo_engine.llm.errors import LLMError

#: seconds between two checks of the token while a call waits (for a lock, a shared reply, a reply)
POLL_S = 0.05

_token: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("hippo_engine_cancel", default=None)


class LLMCancelled(LLMError):
    """The call was stopped because its caller gave up on it (:func:`cancel_on`)."""


@contextlib.contextmanager
def cancel_on(event: threading.Event | None) -> Iterator[None]:
    """Inside the block (in this thread or context), LLM calls stop once ``event`` is set (None: no token)."""
    token = _token.set(event)
    try:
        yield
    finally:
        _token.reset(token)


def current() -> threading.Event | None:
    """The cancel token of the calls made here, or None (nobody can cancel them)."""
    return _token.get()


def requested(event: threading.Event | None = None) -> bool:
    """Whether the call's caller has given up (``event``, default: this context's token)."""
    event = current() if event is None else event
    return event is not None and event.is_set()


def check(what: str = "the LLM call") -> None:
    """Raise :class:`LLMCancelled` when this context's token is set."""
    if requested():
        raise LLMCancelled(f"{what} was cancelled: its caller went away")


@contextlib.contextmanager
def holding(lock: threading.Lock | threading.RLock, what: str = "the LLM call") -> Iterator[None]:
    """``with lock``, except that with a token set while waiting it raises :class:`LLMCancelled`
    instead of waiting on (a local model serves one call at a time; a cancelled one need not queue)."""
    event = current()
    if event is None:
        with lock:
            yield
        return
    while not lock.acquire(timeout=POLL_S):
        if event.is_set():
            raise LLMCancelled(f"{what} was cancelled while it waited for the model: its caller went away")
    try:
        yield
    finally:
        lock.release()


__all__ = ["POLL_S", "LLMCancelled", "cancel_on", "check", "current", "holding", "requested"]
