"""Logging filters of ``hippo-engine serve`` (:func:`install_log_filters`, once per server process).

* :class:`RedactKeys` on ``uvicorn.access``: a key sent in the query string (``?api_key=``, ``?key=``,
  ``?x-api-key=``, ``?access_key=``, ... any case, percent-encoded or not) is refused by the server
  (keys go in the ``X-API-Key`` header) but the access log would keep it: its value is written as
  ``[redacted]``.
* :class:`Throttle` on ``asyncio`` and ``uvicorn.error``: a flood of one kind of line is cut to one
  line per interval (5 s) that counts the ones left out. Out of file descriptors, asyncio's accept
  loop (``BaseSelectorEventLoop._accept_connection``) reports ``socket.accept() out of system
  resource`` with a traceback once per attempt, up to the listen backlog (2048 with uvicorn) each
  second: 100,000 lines in 12 s. Garbage sent on many connections ("Invalid HTTP request
  received.") is cut the same way.
"""
from __future__ import annotations

import logging
import threading
import time
from urllib.parse import unquote_plus

#: query parameters whose values never reach the log (compared in lower case, ``-`` as ``_``)
SECRET_PARAMS = frozenset({"key", "api_key", "apikey", "x_api_key", "access_key", "accesskey", "token",
                           "access_token", "password", "secret"})
REDACTED = "[redacted]"
#: seconds between two lines of one throttled kind
THROTTLE_S = 5.0
#: logger -> the starts of the lines it throttles
THROTTLED = {"asyncio": ("socket.accept() out of system resource",),
             "uvicorn.error": ("Invalid HTTP request received.",)}


def _secret(name: str) -> bool:
    return unquote_plus(name).strip().lower().replace("-", "_") in SECRET_PARAMS


def redact_query(target: str) -> str:
    """A request target (path and query) with the values of key-like query parameters redacted."""
    path, sep, query = target.partition("?")
    if not sep:
        return target
    parts = []
    for piece in query.split("&"):
        name, eq, _ = piece.partition("=")
        parts.append(f"{name}={REDACTED}" if eq and _secret(name) else piece)
    return f"{path}?{'&'.join(parts)}"


class RedactKeys(logging.Filter):
    """Redacts key-like query parameters in a record's string arguments (uvicorn's access line has the
    request target as one of them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) and "?" in a else a for a in record.args)
        return True


class Throttle(logging.Filter):
    """Lets through one line of each kind (a message start in ``prefixes``) per ``interval`` seconds;
    the line let through says how many were left out, and has no traceback (its error is in the text)."""

    def __init__(self, prefixes: tuple[str, ...], interval: float = THROTTLE_S) -> None:
        super().__init__()
        self.prefixes, self.interval = prefixes, interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        kind = next((p for p in self.prefixes if message.startswith(p)), None)
        if kind is None:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -self.interval) < self.interval:
                self._skipped[kind] = self._skipped.get(kind, 0) + 1
                return False
            self._last[kind], skipped = now, self._skipped.pop(kind, 0)
        error = record.exc_info[1] if record.exc_info else None
        text = f"{kind} {error}" if error is not None else message.splitlines()[0]
        note = f" ({skipped} more like it in the last {self.interval:g} s not logged)" if skipped else ""
        record.msg, record.args, record.exc_info, record.exc_text = text + note, None, None, None
        return True


def install_log_filters() -> None:
    """Add the filters to their loggers (again: no second copy)."""
    _add(logging.getLogger("uvicorn.access"), RedactKeys())
    for name, prefixes in THROTTLED.items():
        _add(logging.getLogger(name), Throttle(prefixes))


def _add(logger: logging.Logger, new: logging.Filter) -> None:
    if not any(type(f) is type(new) for f in logger.filters):
        logger.addFilter(new)
