"""Every error of the HTTP API is JSON, ``{"error": {"type", "message"}}``, never a traceback.

:func:`install` registers one handler set on the app: HTTP errors keep their status (and headers,
such as ``Allow`` on a 405); request validation errors are 422 with a message that names each bad
field; a ``ValueError`` from the memory (bad input the schema cannot express) is 422; a
``KeyError`` (an unknown workspace, job or document) is 404; anything else is 500 with a fixed
message, and its traceback goes to the server's log only.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from hippo_engine.service.schemas import PATTERNS

log = logging.getLogger("hippo_engine.service")
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

#: the validation errors spelled out in one message (all of them are in ``details``)
SHOWN_ERRORS = 5
#: HTTP status -> the error ``type`` of the JSON body
TYPES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         406: "not_acceptable", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
         422: "invalid_request", 429: "too_many_requests", 500: "internal_error", 503: "unavailable"}


class ApiError(StarletteHTTPException):
    """An error with its own status, ``type`` and message (raised by the routes and the limits)."""

    def __init__(self, status: int, message: str, *, type: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers)
        self.type = type or TYPES.get(status, "error")
        self.message = message


def error_body(type: str, message: str, details: list[dict] | None = None) -> dict[str, Any]:
    """The JSON body of every error response."""
    err: dict[str, Any] = {"type": type, "message": message}
    if details is not None:
        err["details"] = details
    return {"error": err}


def error_response(status: int, message: str, *, type: str | None = None, headers: Mapping[str, str] | None = None,
                   details: list[dict] | None = None) -> JSONResponse:
    """A JSON error response."""
    return JSONResponse(error_body(type or TYPES.get(status, "error"), message, details), status_code=status,
                        headers=headers)


def _location(loc: tuple | list) -> str:
    """``("body", "documents", 0, "text")`` -> ``body.documents[0].text``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "request"


def _message(error: Mapping[str, Any]) -> str:
    """One pydantic error's message; a pattern the API uses is said in words (not as the expression)."""
    if error.get("type") == "string_pattern_mismatch":
        meaning = PATTERNS.get(str((error.get("ctx") or {}).get("pattern")))
        if meaning:
            return meaning
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


def validation_details(errors: Any) -> list[dict[str, str]]:
    """Pydantic's errors as ``[{"loc", "message"}]`` (without the offending input, which can be large)."""
    return [{"loc": _location(e.get("loc", ())), "message": _message(e)} for e in errors]


def validation_message(details: list[dict[str, str]]) -> str:
    """One line naming the first few bad fields."""
    shown = "; ".join(f"{d['loc']}: {d['message']}" for d in details[:SHOWN_ERRORS])
    more = f" (and {len(details) - SHOWN_ERRORS} more)" if len(details) > SHOWN_ERRORS else ""
    return f"invalid request: {shown}{more}" if shown else "invalid request"


def allowed_methods(request: Request) -> list[str]:
    """Every method the OpenAPI schema lists at the request's path (Starlette's 405 names only the first
    route's); empty for a path outside the schema."""
    table = getattr(request.app.state, "allowed_methods", None)
    if table is None:
        table = request.app.state.allowed_methods = [
            (re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"),
             sorted(m.upper() for m in item if m in HTTP_METHODS))
            for path, item in request.app.openapi().get("paths", {}).items()]
    return next((methods for pattern, methods in table if pattern.match(request.url.path)), [])


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 405 and (methods := allowed_methods(request)):
        headers["Allow"] = ", ".join(methods)
        message = f"{request.method} is not allowed here; allowed: {headers['Allow']}"
    return error_response(exc.status_code, message, type=getattr(exc, "type", None), headers=headers or None)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = validation_details(exc.errors())
    return error_response(422, validation_message(details), type="validation_error", details=details)


async def _value_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(422, str(exc) or "invalid request")


async def _key_error(request: Request, exc: Exception) -> JSONResponse:
    what = exc.args[0] if exc.args else "not found"
    return error_response(404, str(what))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal server error (the server's log has the details)")


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ValueError, _value_error)
    app.add_exception_handler(KeyError, _key_error)
    app.add_exception_handler(Exception, _internal_error)
