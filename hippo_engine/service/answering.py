"""Answers (reader LLM calls) in bounded numbers, on threads of their own, stopped when their client leaves:
:class:`AnswerSlots`.

At most ``limit`` answers run at once (``--max-answers``); one more is refused at once (503 with
``Retry-After``), never queued. An answer runs on the slots' own thread pool, so the route thread pool that
serves retrieve, documents and stats never waits behind a slow LLM. Each answer carries a cancel token
(:mod:`hippo_engine.llm.cancel`): when its client leaves, :meth:`Slot.release` sets it (the LLM call stops:
the local model's stopping criterion, or the OpenAI-compatible request's connection closed) and frees the
slot at once. A call that has not yet noticed its token keeps a pool thread for the moment it takes to stop;
the pool has ``2 * limit`` threads and a new answer is refused while as many calls are still running, so
abandoned calls can never pile up.
"""
from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

from hippo_engine.llm.cancel import cancel_on
from hippo_engine.service.errors import ApiError, error_response

T = TypeVar("T")
#: seconds between two looks at whether an answer's client is still there
POLL_S = 0.1
#: seconds a refused client is asked to wait (``Retry-After``)
RETRY_AFTER_S = 2


class ClientGone(Exception):
    """The client of an answer went away before it was ready (the call was stopped)."""


class AnswerSlots:
    """At most ``limit`` answers at once, on a pool of ``2 * limit`` threads (see the module docstring)."""

    def __init__(self, limit: int):
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive whole number, got {limit!r}")
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0      # slots whose client is still there
        self._running = 0   # calls whose thread has not ended (their clients may have gone)
        self._pool = ThreadPoolExecutor(max_workers=2 * limit, thread_name_prefix="hippo-answer")

    @property
    def held(self) -> int:
        """Answers whose client is still waiting."""
        return self._held

    @property
    def running(self) -> int:
        """Answer calls still running (or waiting for a thread), abandoned ones included."""
        return self._running

    def full(self) -> bool:
        """Whether :meth:`take` would refuse now."""
        return self._held >= self.limit or self._running >= 2 * self.limit

    def take(self) -> Slot | None:
        """A slot, or None when ``limit`` answers run already (or ``2 * limit`` calls have not ended)."""
        with self._lock:
            if self._held >= self.limit or self._running >= 2 * self.limit:
                return None
            self._held += 1
            return Slot(self)

    def _free(self) -> None:
        with self._lock:
            self._held -= 1

    def _started(self) -> None:
        with self._lock:
            self._running += 1

    def _ended(self) -> None:
        with self._lock:
            self._running -= 1

    def submit(self, slot: Slot, call: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``call`` on the pool with the slot's cancel token; an awaitable of its result."""
        self._started()

        def run() -> T:
            try:
                with cancel_on(slot.cancel):
                    return call()
            finally:
                self._ended()
        return asyncio.wrap_future(self._pool.submit(run))

    def shutdown(self) -> None:
        """Stop the pool's threads once their calls end (no new answers after)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class Slot:
    """One answer's place: its cancel token, and :meth:`release` (idempotent) that frees the place and asks
    a call still running to stop."""

    def __init__(self, slots: AnswerSlots):
        self.cancel = threading.Event()
        self._slots, self._held = slots, True

    def release(self) -> None:
        self.cancel.set()
        if self._held:
            self._held = False
            self._slots._free()

    def run(self, call: Callable[[], T]) -> Awaitable[T]:
        """``call`` on the answers' pool, under this slot's cancel token."""
        return self._slots.submit(self, call)

    async def run_while(self, call: Callable[[], T], disconnected: Callable[[], Awaitable[bool]]) -> T:
        """``call``'s result, or :class:`ClientGone` (the call stopped, the slot freed) as soon as
        ``disconnected()`` says the client left (looked at every :data:`POLL_S` seconds)."""
        future = self._slots.submit(self, call)
        while True:
            done, _ = await asyncio.wait({future}, timeout=POLL_S)
            if done:
                return future.result()
            if await disconnected():
                self.release()
                future.add_done_callback(_quiet)
                raise ClientGone("the client went away before the answer was ready")


def _quiet(future: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome (no 'exception was never retrieved' warning)."""
    if not future.cancelled():
        future.exception()


#: the answer route at both prefixes
ANSWER_PATH = re.compile(r"^(/w/[^/]+)?/answer$")


def refusal(limit: int) -> ApiError:
    """The 503 of one answer more than ``limit``."""
    return ApiError(503, f"{limit} answers are being made (--max-answers); try again in {RETRY_AFTER_S} s",
                    headers={"Retry-After": str(RETRY_AFTER_S)})


class AnswerGate:
    """ASGI middleware: while the answer slots are full, ``POST /answer`` (at both prefixes) is refused at once
    (503, ``Retry-After``) before its body is read, validated or its workspace resolved, so a burst of answers
    costs the event loop little; the route takes its slot for real (a request let through here may still be
    refused there). Innermost: Host, key and size checks come first."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and ANSWER_PATH.match(scope.get("path", "")):
            slots = slots_of(scope["app"].state, self.limit)
            if slots.full():
                err = refusal(self.limit)
                await error_response(503, err.message, headers=err.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def slots_of(state: Any, limit: int) -> AnswerSlots:
    """The app's :class:`AnswerSlots` (made on first use, in the event loop's thread)."""
    slots = getattr(state, "answer_slots", None)
    if slots is None:
        slots = state.answer_slots = AnswerSlots(limit)
    return slots


__all__ = ["POLL_S", "RETRY_AFTER_S", "AnswerGate", "AnswerSlots", "ClientGone", "Slot", "refusal", "slots_of"]
