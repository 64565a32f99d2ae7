"""The connections of ``hippo-engine serve``: a header read timeout and a connection cap that slow or
idle clients cannot exhaust. :class:`EdgeConfig` is uvicorn's ``Config`` pinned to the asyncio loop
and :class:`EdgeProtocol` (uvicorn's h11 protocol with the two additions); the body read timeout is
the app's (:class:`hippo_engine.service.security.BodyTimer`).

* **Header timeout**: a connection that has not delivered a complete request head within
  ``header_timeout_s`` of connecting (or of its previous response, for a kept-alive one) is closed,
  however slowly it trickles bytes (uvicorn's keep-alive timer restarts on every byte, and a new
  connection that sends nothing has no timer at all). The rest of a body the app answered without
  reading (a 401 before the body) counts as waiting for the next head.
* **Connection cap** (``limit_concurrency``, from ``--max-connections``, at most half the process's
  file descriptors): a new connection over the cap closes the connection that has waited longest for
  a request head, so idle and slow-header sockets never keep a real client (``/health``) out; when
  every connection is busy, a request over the cap gets 503 JSON with ``Retry-After`` (uvicorn's own
  503 is plain text, so its check is off here).

The protocol is uvicorn's h11 one because its parser state says when a request head is complete;
httptools and uvloop, when installed, are not used (``loop="asyncio"``, ``http=EdgeProtocol``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from hippo_engine.service.errors import error_response

log = logging.getLogger("uvicorn.error")
#: the share of the process's file descriptors that connections may hold
FD_SHARE = 0.5
#: seconds between two "over the cap" lines in the log
CAP_LOG_S = 5.0
_cap_log = {"last": -CAP_LOG_S, "skipped": 0}


def connection_cap(wanted: int, fd_limit: int | None = None) -> int:
    """``wanted`` connections, at most :data:`FD_SHARE` of the file descriptor limit (the rest are the
    server's: index files, the database, models), at least 8."""
    if fd_limit is None:
        try:
            import resource
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except ImportError:                 # no such limit (Windows)
            soft = -1
        fd_limit = soft if soft > 0 else wanted * 2
    return max(8, min(wanted, int(fd_limit * FD_SHARE)))


class EdgeConfig(uvicorn.Config):
    """uvicorn's Config on the asyncio loop with :class:`EdgeProtocol` and its ``header_timeout_s``
    (picklable: worker processes get it as it is)."""

    def __init__(self, app: Any, *, header_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(app, loop="asyncio", http=EdgeProtocol, **kwargs)
        self.header_timeout_s = header_timeout_s


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with a header read timeout and a connection cap (see the module docstring)."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout = float(getattr(config, "header_timeout_s", 10.0))
        self.cap: int | None = config.limit_concurrency
        self.limit_concurrency = None        # uvicorn's own check answers plain text: ours is below
        self.inner_app, self.app = self.app, self._capped_app
        self.waiting_since: float | None = None
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()
        if self.cap is not None and len(self.connections) > self.cap:
            self._evict_one()

    def idle(self) -> bool:
        """Whether no request is in progress: none started, or its response sent (the client may still be
        sending the rest of a body the app did not read)."""
        return self.conn.their_state is h11.IDLE or self.conn.our_state in (h11.DONE, h11.MUST_CLOSE)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.idle():                             # a request head is complete
            self._stop_waiting()
        elif self._head_timer is None and not self.transport.is_closing():
            self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.idle() and self._head_timer is None:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self.waiting_since = time.monotonic()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.waiting_since = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.idle() and not self.transport.is_closing():
            self.close_idle()

    def close_idle(self) -> None:
        """Close this connection, which is waiting for a request head."""
        self.waiting_since = None
        if self.conn.our_state is not h11.ERROR:
            try:
                self.conn.send(h11.ConnectionClosed())
            except h11.LocalProtocolError:
                pass
        self.transport.close()

    def _evict_one(self) -> None:
        """Close the connection (not this one) that has waited longest for a request head, if any."""
        waiting = [c for c in self.connections
                   if c is not self and isinstance(c, EdgeProtocol) and c.waiting_since is not None]
        if waiting:
            min(waiting, key=lambda c: c.waiting_since or 0.0).close_idle()

    async def _capped_app(self, scope: Any, receive: Any, send: Any) -> None:
        """The app, or 503 JSON when more connections or requests than the cap are held (this one included)."""
        cap = self.cap
        if scope["type"] == "http" and cap is not None and (len(self.connections) > cap or len(self.tasks) > cap):
            _log_over_cap(cap)
            await error_response(503, f"the server holds its most connections and requests at once ({cap}); "
                                      "retry shortly", headers={"Retry-After": "1", "Connection": "close"},
                                 )(scope, receive, send)
            return
        await self.inner_app(scope, receive, send)


def _log_over_cap(cap: int) -> None:
    """One warning per :data:`CAP_LOG_S` seconds at most, with the count of those left out."""
    now = time.monotonic()
    if now - _cap_log["last"] < CAP_LOG_S:
        _cap_log["skipped"] += 1
        return
    skipped, _cap_log["skipped"], _cap_log["last"] = _cap_log["skipped"], 0, now
    log.warning("over the connection cap (%d): 503%s", cap, f" ({skipped} more not logged)" if skipped else "")
