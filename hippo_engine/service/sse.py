"""Server-sent events for ``POST /answer`` with ``{"stream": true}`` (or ``Accept: text/event-stream``).

While the reader writes the answer, ``event: delta`` carries each new piece of its text
(``{"text": ...}``, the reader's raw output: with the default prompt its reasoning, then the
``Answer:`` line) as the local model (llama.cpp or ``transformers``) generates it; a reply that comes
whole (an OpenAI-compatible server, the response cache) gives no deltas. Then ``event: passages``
(what the reader read), ``event: answer`` (the parsed answer, its citations and notes: what to show)
and ``event: done``. While nothing else is sent, a comment line every ``keepalive_s`` seconds keeps
proxies from closing the connection. A failure after the stream has started is ``event: error`` with
the same JSON as an error response (never a traceback).
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hippo_engine.llm.streaming import streaming_to
from hippo_engine.service.errors import TYPES, ApiError, error_body

log = logging.getLogger("hippo_engine.service")

#: seconds between keep-alive comments while the answer is being made
KEEPALIVE_S = 10.0
MEDIA_TYPE = "text/event-stream"
#: seconds between two looks at whether the client of a stream is still there
DISCONNECT_POLL_S = 0.2
#: the events a stream may carry
EVENTS = ("delta", "passages", "answer", "done", "error")


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


def _drain(queue: asyncio.Queue) -> str:
    """The pieces waiting in ``queue``, joined."""
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return "".join(out)


async def stream_call(call: Callable[[], dict], to_events: Callable[[dict], list[bytes]] = answer_events,
                      keepalive_s: float = KEEPALIVE_S, *,
                      run: Callable[[Callable[[], dict]], Awaitable[dict]] | None = None,
                      disconnected: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[bytes]:
    """Run the blocking ``call`` (``run``: on the route thread pool by default) with its reader's text
    streamed (:func:`~hippo_engine.llm.streaming.streaming_to`); yield a ``delta`` event for the pieces as
    they come and keep-alive comments while nothing comes, then the call's events (or one ``error``).
    ``disconnected``: looked at every :data:`DISCONNECT_POLL_S` seconds; once it says the client left, the
    stream ends (whoever gave ``run`` stops the call, see :mod:`.answering`)."""
    loop = asyncio.get_running_loop()
    pieces = _Pieces()

    def streamed() -> dict:
        with streaming_to(pieces.sink(loop)):
            return call()

    task = asyncio.ensure_future((run or run_in_threadpool)(streamed))
    wait_s = keepalive_s if disconnected is None else min(keepalive_s, DISCONNECT_POLL_S)
    try:
        yield b": started\n\n"
        quiet_since = loop.time()
        while not task.done():
            text, timed_out = await pieces.wait(task, wait_s)
            if text is not None:
                yield event("delta", {"text": text})
                quiet_since = loop.time()
            elif timed_out:
                if disconnected is not None and await disconnected():
                    return
                if loop.time() - quiet_since >= keepalive_s:
                    yield b": keep-alive\n\n"
                    quiet_since = loop.time()
        for chunk in _ending(task, pieces.queue, to_events):
            yield chunk
    finally:
        pieces.close()
        if not task.done():       # the client went away: the thread finishes on its own, nobody waits
            task.add_done_callback(lambda t: t.cancelled() or t.exception())


class _Pieces:
    """The pieces of the reader's text of one streamed call: put on ``queue`` from the call's thread
    (:meth:`sink`), taken as they come (:meth:`wait`, one getter kept across waits)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.getter: asyncio.Future | None = None

    def sink(self, loop: asyncio.AbstractEventLoop) -> Callable[[str], None]:
        """What the call's thread hands each piece to."""
        def put(text: str) -> None:
            loop.call_soon_threadsafe(self.queue.put_nowait, text)
        return put

    async def wait(self, task: asyncio.Future, timeout: float) -> tuple[str | None, bool]:
        """Wait up to ``timeout`` seconds for pieces or the end of ``task``: ``(the pieces joined, False)`` when
        some came, ``(None, True)`` when nothing happened, ``(None, False)`` when the task ended."""
        self.getter = self.getter or asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait({task, self.getter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self.getter in done:
            text, self.getter = self.getter.result() + _drain(self.queue), None
            return text, False
        return None, not done

    def close(self) -> None:
        """Stop waiting for pieces (an item the getter was woken for stays in the queue)."""
        if self.getter is not None and not self.getter.done():
            self.getter.cancel()


def _ending(task: asyncio.Future, queue: asyncio.Queue, to_events: Callable[[dict], list[bytes]]) -> list[bytes]:
    """The events after the call has ended: a last ``delta`` of the pieces left (no more come; a pending getter
    holds none), then the call's events, or one ``error`` event for its failure."""
    rest = _drain(queue)
    out = [event("delta", {"text": rest})] if rest else []
    try:
        result = task.result()
    except Exception as e:    # noqa: BLE001 - every failure becomes an error event
        return [*out, event("error", _failure(e))]
    return [*out, *to_events(result)]


class ClosingStream(StreamingResponse):
    """A streaming response that calls ``on_close`` once it has ended, whichever way: sent whole, the client
    gone, or never started (an event stream that was never iterated has no ``finally`` of its own)."""

    def __init__(self, content: AsyncIterator[bytes], *, on_close: Callable[[], None], **kwargs: Any):
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
