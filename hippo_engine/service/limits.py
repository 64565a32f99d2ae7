"""The per-request limits of :class:`~hippo_engine.service.settings.ServiceSettings`, checked before
the memory sees a request: too many documents, ids or queries in one request is 413; too long a
query or too large a ``top_k`` is 422. Each message names the limit and the value that broke it.
(The body size limit is an ASGI middleware, :class:`hippo_engine.service.security.BodyLimit`.)
"""
from __future__ import annotations

from collections.abc import Sequence

from hippo_engine.service.errors import ApiError
from hippo_engine.service.settings import ServiceSettings


def check_batch(settings: ServiceSettings, count: int, what: str = "documents") -> None:
    """At most ``max_batch`` documents (or ids) per request (413)."""
    if count > settings.max_batch:
        raise ApiError(413, f"{count} {what} in one request is over the limit of {settings.max_batch}; "
                            "split them into several requests")


def check_queries(settings: ServiceSettings, queries: Sequence[str], what: str = "query") -> None:
    """At most ``max_queries`` queries per request (413), each at most ``max_query_chars`` long (422)."""
    if len(queries) > settings.max_queries:
        raise ApiError(413, f"{len(queries)} queries in one request is over the limit of {settings.max_queries}; "
                            "split them into several requests")
    for i, q in enumerate(queries):
        if len(q) > settings.max_query_chars:
            where = f"{what} {i}" if len(queries) > 1 else what
            raise ApiError(422, f"{where} is {len(q)} characters long; the limit is {settings.max_query_chars}",
                           type="query_too_long")


def check_top_k(settings: ServiceSettings, value: int, name: str = "top_k") -> None:
    """``top_k`` (or explain's ``top``) at most ``max_top_k`` (422)."""
    if value > settings.max_top_k:
        raise ApiError(422, f"{name} {value} is over the limit of {settings.max_top_k}", type="top_k_too_large")
