"""Server-sent events for ``POST /answer`` with ``{"stream": true}`` (or ``Accept: text/event-stream``).

The memory answers in one call (retrieval, then the reader), so the stream carries the answer in
parts as soon as it is ready: ``event: passages`` (what the reader read), ``event: answer`` (the
answer, its citations and notes) and ``event: done``; while the call runs, a comment line every
``keepalive_s`` seconds keeps proxies from closing the connection. A failure after the stream has
started is ``event: error`` with the same JSON as an error response (never a traceback).
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from hippo_engine.service.errors import TYPES, ApiError, error_body

log = logging.getLogger("hippo_engine.service")

#: seconds between keep-alive comments while the answer is being made
KEEPALIVE_S = 10.0
MEDIA_TYPE = "text/event-stream"
#: the events a stream may carry
EVENTS = ("passages", "answer", "done", "error")


def event(name: str, data: Any) -> bytes:
    """One event: ``event: NAME`` and its JSON on one ``data:`` line."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _failure(exc: BaseException) -> dict:
    if isinstance(exc, ApiError):
        return error_body(exc.type, exc.message)
    if isinstance(exc, ValueError):
        return error_body(TYPES[422], str(exc) or "invalid request")
    if isinstance(exc, KeyError):
        return error_body(TYPES[404], str(exc.args[0]) if exc.args else "not found")
    log.error("streamed answer failed", exc_info=exc)
    return error_body(TYPES[500], "internal server error (the server's log has the details)")


def answer_events(result: dict) -> list[bytes]:
    """The events of one finished answer."""
    rest = {k: v for k, v in result.items() if k != "passages"}
    return [event("passages", {"passages": result.get("passages", [])}), event("answer", rest), event("done", {})]


async def stream_call(call: Callable[[], dict], to_events: Callable[[dict], list[bytes]] = answer_events,
                      keepalive_s: float = KEEPALIVE_S) -> AsyncIterator[bytes]:
    """Run the blocking ``call`` in the thread pool; yield keep-alive comments until it returns,
    then its events (or one ``error`` event)."""
    task = asyncio.ensure_future(run_in_threadpool(call))
    try:
        yield b": started\n\n"
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=keepalive_s)
            if not done:
                yield b": keep-alive\n\n"
        try:
            result = task.result()
        except Exception as e:    # noqa: BLE001 - every failure becomes an error event
            yield event("error", _failure(e))
            return
        for chunk in to_events(result):
            yield chunk
    finally:
        if not task.done():       # the client went away: the thread finishes on its own, nobody waits
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
