"""Request counts and latency percentiles per route since the process started, shown by ``GET /stats``
under ``requests``.

* :class:`Latencies`: a log-spaced histogram of durations (bucket ``i`` holds
  ``[LOW * GROWTH**i, LOW * GROWTH**(i + 1))`` seconds, :data:`GROWTH` = 2^(1/8), so a percentile is
  read to within about 4.5% of its value); memory is bounded (at most :data:`BUCKETS` counts) however many
  requests come.
* :class:`RouteStats`: thread-safe counters per (method, route template): the template is the route's
  path as declared (``/w/{workspace}/retrieve``, ``/retrieve``), never the raw URL, so the table holds at
  most one row per declared route and method (plus one, :data:`UNMATCHED`, for paths no route serves).
  Each row: requests, client errors (4xx), server errors (5xx), p50/p90/p99, mean and max in milliseconds.
* :class:`RouteTimer`: the ASGI middleware that times every HTTP request (from its arrival to the end of
  its response, a streamed one included) and records it with the status sent (500 for an exception).

The figures are the process's own: with ``--workers N`` each worker counts what it served.
"""
from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from starlette.routing import Route, compile_path

#: the shortest duration told apart (seconds); shorter ones count in the first bucket
LOW = 1e-5
#: the ratio of a bucket's upper to its lower bound
GROWTH = 2 ** (1 / 8)
#: buckets from :data:`LOW` up (the last one holds everything above ~10^4 s)
BUCKETS = 240
#: the route of a request that no declared route matches (a 404 of an unknown path)
UNMATCHED = "(unmatched)"
#: the status recorded for a request whose client left before any response was sent
NO_RESPONSE = 499
PERCENTILES = (50, 90, 99)


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a duration."""
    if seconds <= LOW:
        return 0
    return min(BUCKETS - 1, int(math.log(seconds / LOW, GROWTH)))


def bucket_middle(index: int) -> float:
    """A bucket's geometric middle (seconds): the value reported for a percentile that falls in it."""
    return LOW * GROWTH ** (index + 0.5)


class Latencies:
    """Durations of one route in a bounded histogram: count, sum, min, max and percentiles."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n, self.total, self.low, self.high = 0, 0.0, math.inf, 0.0

    def add(self, seconds: float) -> None:
        """Count one duration."""
        b = bucket_of(seconds)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n, self.total = self.n + 1, self.total + seconds
        self.low, self.high = min(self.low, seconds), max(self.high, seconds)

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (nearest rank) in seconds, within the bucket's width, clamped to the
        smallest and largest duration seen; None before any."""
        if not self.n:
            return None
        rank, seen = max(1, math.ceil(q / 100 * self.n)), 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(self.high, max(self.low, bucket_middle(b)))
        return self.high

    def summary(self) -> dict[str, float | None]:
        """p50/p90/p99, mean and max in milliseconds (rounded to 0.01)."""
        out: dict[str, float | None] = {f"p{q}_ms": _ms(self.percentile(q)) for q in PERCENTILES}
        out["mean_ms"] = _ms(self.total / self.n) if self.n else None
        out["max_ms"] = _ms(self.high) if self.n else None
        return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


class RouteCounts:
    """One row of the table: requests, 4xx, 5xx and the latencies of one (method, route)."""

    def __init__(self) -> None:
        self.requests = self.client_errors = self.server_errors = 0
        self.latencies = Latencies()

    def add(self, status: int, seconds: float) -> None:
        self.requests += 1
        self.client_errors += 400 <= status < 500
        self.server_errors += status >= 500
        self.latencies.add(seconds)


class RouteStats:
    """Thread-safe per-route counters of one process since ``started`` (a wall-clock time)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str], RouteCounts] = {}
        self.clock = clock
        self.started = clock()

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request to ``route`` (a template) answered with ``status`` after ``seconds``."""
        with self._lock:
            row = self._rows.get((method, route))
            if row is None:
                row = self._rows[(method, route)] = RouteCounts()
            row.add(status, seconds)

    def snapshot(self) -> dict[str, Any]:
        """The table as JSON: since when, the process, totals and one row per (method, route), sorted."""
        with self._lock:
            rows = [{"method": m, "route": r, "requests": c.requests, "client_errors": c.client_errors,
                     "server_errors": c.server_errors, **c.latencies.summary()}
                    for (m, r), c in sorted(self._rows.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
        since = datetime.fromtimestamp(self.started, timezone.utc).isoformat(timespec="seconds")
        return {"since": since.replace("+00:00", "Z"), "uptime_s": round(self.clock() - self.started, 1),
                "process": os.getpid(), "total": sum(r["requests"] for r in rows), "routes": rows}


def declared_paths(app: Any) -> list[str]:
    """Every path template ``app`` (a FastAPI app) serves: its OpenAPI paths (prefixes included) and the
    routes outside the schema (the web page's files, ``/mcp``, the schema and its page)."""
    return list(app.openapi().get("paths", {})) + [r.path for r in app.router.routes if isinstance(r, Route)]


def compile_paths(templates: Iterable[str]) -> list[tuple[re.Pattern[str], str]]:
    """Each template with the regular expression of the paths it serves (Starlette's own)."""
    return [(compile_path(t)[0], t) for t in dict.fromkeys(templates)]


def route_template(scope: dict[str, Any], patterns: Iterable[tuple[re.Pattern[str], str]]) -> str:
    """The declared path of the route that served ``scope`` (the router's choice when it ran), else of the
    first of ``patterns`` its path matches (a request refused before routing, a route outside the
    routers), else :data:`UNMATCHED`."""
    route = scope.get("route")
    path = getattr(route, "path", None) if route is not None else None
    if isinstance(path, str) and path:
        return path
    return next((t for regex, t in patterns if regex.match(scope.get("path", ""))), UNMATCHED)


class RouteTimer:
    """ASGI middleware: times each HTTP request and records it in ``stats`` under its route template
    (``templates``: a provider of the app's path templates, read once, when the first request that the
    router did not name a route for ends)."""

    def __init__(self, app: Any, stats: RouteStats, templates: Callable[[], Iterable[str]]) -> None:
        self.app, self.stats, self.templates = app, stats, templates
        self._patterns: list[tuple[re.Pattern[str], str]] | None = None

    def patterns(self) -> list[tuple[re.Pattern[str], str]]:
        """The app's path templates, compiled on first use (after every route is in place)."""
        if self._patterns is None:
            self._patterns = compile_paths(self.templates())
        return self._patterns

    def route_of(self, scope: dict[str, Any]) -> str:
        """The route template of a request that has ended."""
        routed = scope.get("route")
        return route_template(scope, [] if routed is not None else self.patterns())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, sent = time.perf_counter(), {"status": NO_RESPONSE}

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:      # answered 500 by the app's outermost handler (a cancelled request is not)
            sent["status"] = 500 if sent["status"] == NO_RESPONSE else sent["status"]
            raise
        finally:
            self.stats.record(scope.get("method", "GET"), self.route_of(scope), sent["status"],
                              time.perf_counter() - start)
