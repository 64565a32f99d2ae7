"""Text as a local model writes it: a per-call sink for the pieces of a reply.

A caller that wants the answer while it is written (the service's ``POST /answer`` with
``stream``) runs its call inside :func:`streaming_to`; the code that writes what the caller reads
(the QA reader, :mod:`hippo_engine.qa.reader`) marks its LLM calls with :func:`streamed_replies`, so
that other calls inside the same request (a recognition filter, a mode's map step) are not sent; the
local clients (llama.cpp and ``transformers``) then hand each new piece of text to the sink as the
model produces it, in the calling thread. The reply itself is unchanged: ``generate`` still returns
the whole :class:`~hippo_engine.llm.base.LLMResponse`, and without a sink nothing is decoded twice.

Clients that do not stream (an OpenAI-compatible server, a reply read from the cache) give no
pieces: the caller gets the reply whole, as before. The sink lives in a context variable, so two
requests served by two threads never see each other's pieces.
"""
from __future__ import annotations

import codecs
import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)

Sink = Callable[[str], None]

_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("hippo_engine_text_sink", default=None)
_streamed: contextvars.ContextVar[bool] = contextvars.ContextVar("hippo_engine_streamed_replies", default=False)


@contextlib.contextmanager
def _set(var: contextvars.ContextVar, value) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def streaming_to(sink: Sink) -> contextlib.AbstractContextManager[None]:
    """Send the pieces of the streamed replies (:func:`streamed_replies`) generated inside the block
    (in this thread or context) to ``sink``."""
    return _set(_sink, sink)


def streamed_replies() -> contextlib.AbstractContextManager[None]:
    """Mark the LLM calls inside the block as the ones whose replies a :func:`streaming_to` caller
    reads (the reader's answers)."""
    return _set(_streamed, True)


def current_sink() -> Sink | None:
    """The sink for the reply being generated, or None (nobody asked for pieces, or this call is not
    one of the streamed replies)."""
    return _sink.get() if _streamed.get() else None


class TextPieces:
    """Turns a reply's bytes, as they come, into pieces of text for ``sink``: UTF-8 decoded
    incrementally (a character split across tokens waits for its last byte), and at the end
    whatever of the final text was not sent yet (:meth:`finish`). The pieces sent are always a
    prefix of what the model has written; a failing sink is logged once and then ignored, so it
    never breaks a generation."""

    def __init__(self, sink: Sink):
        self._sink: Sink | None = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.sent = ""

    def _send(self, text: str) -> None:
        if not text or self._sink is None:
            return
        try:
            self._sink(text)
        except Exception:   # noqa: BLE001 - the reader of the pieces went away: generation goes on
            logger.warning("the text sink failed; no more pieces of this reply are sent", exc_info=True)
            self._sink = None
            return
        self.sent += text

    def feed(self, data: bytes) -> None:
        """More bytes of the reply."""
        self._send(self._decoder.decode(data))

    def text(self, so_far: str) -> None:
        """The whole reply so far as text (for decoders that only give whole text): sends what is new
        when it extends what was sent."""
        if so_far.startswith(self.sent):
            self._send(so_far[len(self.sent):])

    def finish(self, final: str) -> None:
        """The reply's final text: sends its rest when the pieces sent are its beginning (a stop
        string cut off at the end may already have been sent in part; the final text wins for the
        caller, who gets it from ``generate``)."""
        self.text(final)


__all__ = ["Sink", "TextPieces", "current_sink", "streamed_replies", "streaming_to"]
