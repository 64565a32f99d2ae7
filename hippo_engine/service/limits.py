"""The per-request limits, one set for every front door: :class:`Limits`, a frozen view of the limits of
:class:`~hippo_engine.service.settings.ServiceSettings` (``Limits.of(settings)``; ``Limits()`` has the
settings' defaults). The HTTP API checks them before the memory sees a request (the functions below);
the MCP server (over ``/mcp`` and over stdio) builds its tools' argument schemas from the same view
(:func:`hippo_engine.service.mcp_server.build_mcp`).

Too many documents, ids or queries in one request is 413; too long a text or query, or too large a
``top_k``, is 422. Each message names the limit and the value that broke it. (The body size limit is an
ASGI middleware, :class:`hippo_engine.service.security.BodyLimit`.)
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from hippo_engine.service.errors import ApiError
from hippo_engine.service.settings import ServiceSettings


@dataclass(frozen=True)
class Limits:
    """What one request may carry (the meaning of each: :class:`ServiceSettings`)."""

    max_batch: int = ServiceSettings.max_batch
    max_queries: int = ServiceSettings.max_queries
    max_query_chars: int = ServiceSettings.max_query_chars
    max_top_k: int = ServiceSettings.max_top_k
    max_text_chars: int = ServiceSettings.max_text_chars

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{f.name} must be a positive whole number, got {value!r}")

    @classmethod
    def of(cls, settings: Any) -> Limits:
        """The limits of ``settings`` (a :class:`ServiceSettings`, or a :class:`Limits` itself)."""
        if isinstance(settings, Limits):
            return settings
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


def check_batch(settings: ServiceSettings | Limits, count: int, what: str = "documents") -> None:
    """At most ``max_batch`` documents (or ids) per request (413)."""
    most = Limits.of(settings).max_batch
    if count > most:
        raise ApiError(413, f"{count} {what} in one request is over the limit of {most}; "
                            "split them into several requests")


def check_texts(settings: ServiceSettings | Limits, texts: Iterable[str], what: str = "documents[{i}].text") -> None:
    """Each text at most ``max_text_chars`` characters long (422, naming the first too long)."""
    most = Limits.of(settings).max_text_chars
    for i, text in enumerate(texts):
        if len(text) > most:
            raise ApiError(422, f"{what.format(i=i)} is {len(text):,} characters long; the limit is {most:,}",
                           type="text_too_long")


def check_documents(settings: ServiceSettings | Limits, documents: Sequence[Any]) -> None:
    """A batch of documents (objects with ``text``): :func:`check_batch`, then :func:`check_texts`."""
    check_batch(settings, len(documents))
    check_texts(settings, (d.text for d in documents))


def check_queries(settings: ServiceSettings | Limits, queries: Sequence[str], what: str = "query") -> None:
    """At most ``max_queries`` queries per request (413), each at most ``max_query_chars`` long (422)."""
    limits = Limits.of(settings)
    if len(queries) > limits.max_queries:
        raise ApiError(413, f"{len(queries)} queries in one request is over the limit of {limits.max_queries}; "
                            "split them into several requests")
    for i, q in enumerate(queries):
        if len(q) > limits.max_query_chars:
            where = f"{what} {i}" if len(queries) > 1 else what
            raise ApiError(422, f"{where} is {len(q)} characters long; the limit is {limits.max_query_chars}",
                           type="query_too_long")


def check_top_k(settings: ServiceSettings | Limits, value: int, name: str = "top_k") -> None:
    """``top_k`` (or explain's ``top``) at most ``max_top_k`` (422)."""
    most = Limits.of(settings).max_top_k
    if value > most:
        raise ApiError(422, f"{name} {value} is over the limit of {most}", type="top_k_too_large")
