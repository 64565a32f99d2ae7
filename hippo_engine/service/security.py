"""Safe by default: the access key (``X-API-Key``) and the request body size limit.

* :class:`KeyGuard`: with an access key set, every route but ``/health`` (and the static pages, which
  hold no data) needs the header ``X-API-Key`` with that key (401 otherwise), before the body is
  read. The key is compared in constant time, as bytes (a header is latin-1 on the wire, the key is
  UTF-8). :func:`key_dependency` checks it again on the API routes and declares it in the OpenAPI
  schema.
* :class:`BodyLimit`: an ASGI middleware that answers 413 to a body announced (Content-Length) or
  streamed (chunked) past the limit, before the app has read it all.
* :class:`BodyTimer`: an ASGI middleware that answers 408 (and closes the connection) when a request's
  body stops arriving: no piece of it for ``timeout_s`` seconds while the app waits for one.
"""
from __future__ import annotations

import hmac
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from fastapi import Security
from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hippo_engine.service.errors import ApiError, error_response

#: the header carrying the access key
KEY_HEADER = "X-API-Key"
KEY_MESSAGE = f"this server needs an access key: send it in the {KEY_HEADER} header"
WRONG_KEY_MESSAGE = f"the access key in the {KEY_HEADER} header is not this server's"


def key_matches(sent: str | bytes | None, key: str) -> bool:
    """Whether a header value is the key (constant time; the header's raw bytes against UTF-8)."""
    if sent is None:
        return False
    raw = sent if isinstance(sent, bytes) else sent.encode("latin-1", errors="replace")
    return hmac.compare_digest(raw, key.encode("utf-8"))


def _unauthorized(sent: Any) -> ApiError:
    return ApiError(401, WRONG_KEY_MESSAGE if sent else KEY_MESSAGE,
                    headers={"WWW-Authenticate": f'ApiKey header="{KEY_HEADER}"'})


def key_dependency(key: str) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency that refuses a request without ``key`` in ``X-API-Key`` (401)."""
    scheme = APIKeyHeader(name=KEY_HEADER, auto_error=False, scheme_name="AccessKey",
                          description="the server's access key (`hippo-engine serve --access-key`)")

    async def require_key(sent: str | None = Security(scheme)) -> None:
        if not key_matches(sent, key):
            raise _unauthorized(sent)

    return require_key


class KeyGuard:
    """ASGI middleware: an HTTP request reaches ``app`` only with the access key (401 JSON otherwise),
    unless ``is_open(path)``. Checked before the body is read, so a request without the key learns
    nothing (not even whether its body was valid); it covers mounted apps (``/mcp``) too."""

    def __init__(self, app: ASGIApp, key: str, is_open: Callable[[str], bool] = lambda path: False) -> None:
        self.app, self.key, self.is_open = app, key, is_open

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.is_open(scope.get("path", "")):
            sent = dict(scope.get("headers") or ()).get(KEY_HEADER.lower().encode())
            if not key_matches(sent, self.key):
                err = _unauthorized(sent)
                await error_response(401, err.message, headers=err.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyTooLarge(ApiError):
    """A request body over the limit (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is over the limit of {limit} bytes; send fewer or smaller "
                              "documents per request")


class BodyLimit:
    """ASGI middleware: at most ``limit`` bytes of request body. A Content-Length over the limit is
    answered 413 at once; a streamed body is counted as the app reads it and reading past the limit
    raises :class:`BodyTooLarge` (an HTTP error the app's handlers turn into the 413 JSON)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await error_response(400, "Content-Length is not a number")(scope, receive, send)
                return
            if size > self.limit:
                await _reply(BodyTooLarge(self.limit), scope, receive, send)
                return
        await self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await _answering_errors(self.app, scope, receive, send, counting_receive, BodyTooLarge)


class BodyTimedOut(ApiError):
    """A request body that stopped arriving (408)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body stopped arriving: no data for {timeout_s:g} s", type="timeout",
                         headers={"Connection": "close"})


class BodyTimer:
    """ASGI middleware: the app waits at most ``timeout_s`` seconds for each piece of a request body;
    past that, :class:`BodyTimedOut` (408 JSON, the connection closed). Once the body is complete the
    app's later waits (for the client to leave, as a stream does) are not timed."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not math.isfinite(self.timeout_s):
            await self.app(scope, receive, send)
            return
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            with anyio.move_on_after(self.timeout_s) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise BodyTimedOut(self.timeout_s)
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await _answering_errors(self.app, scope, receive, send, timed_receive, BodyTimedOut)


async def _answering_errors(app: ASGIApp, scope: Scope, receive: Receive, send: Send, reading: Receive,
                            caught: type[ApiError]) -> None:
    """Run ``app`` reading the body through ``reading``; a ``caught`` error raised while reading outside the
    app's handlers (a mounted app) is answered here, unless a response has started (then it propagates)."""
    started = False

    async def watching_send(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, reading, watching_send)
    except caught as e:
        if started:
            raise
        await _reply(e, scope, receive, send)


async def _reply(err: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(err.status_code, err.message, type=err.type, headers={"Connection": "close"})(
        scope, receive, send)
