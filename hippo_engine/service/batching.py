"""Micro-batching of concurrent retrieves: :class:`Gatherer`.

A batched ``rag.retrieve(queries)`` costs a fraction per query of one call per query (one encoder pass, one
matrix product over the facts and one PPR run for the whole block), and a query's ranking, scores and
explanations are bit-identical whatever batch it runs in (see :mod:`hippo_engine.retrieve.retriever`). The
server's requests arrive one query at a time on threads of their own (FastAPI runs sync routes in a thread
pool; the MCP SDK runs sync tools the same way), so :meth:`Gatherer.run` gathers the calls that agree on
everything that changes a result (their ``key``: mode, top_k, explain, the metadata filter, ...) into one.

Leader and followers, no thread of its own: the first caller of a key with no open group opens one and leads
it; it waits ``window_s`` (less when the group fills to ``max_queries``), then takes ``lock`` and closes the
group; callers that arrive meanwhile (while it waits for the window or for the lock, held by the batch before)
join the group and wait on an event. The leader runs every query of the group in one ``call`` under ``lock`` and
hands each caller its own slice. A request with several queries joins as a block (kept together, in order);
one with more than ``max_queries`` runs alone. If a batch of several callers fails, each caller's queries are
run again alone, so that each gets its own result or its own error, never another's.

``window_s`` 0 turns gathering off: every call runs at once, as ``call(queries)`` in its own thread. A caller
must not hold ``lock`` already (its group's leader would wait for it forever).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

#: the most queries one batch gathers (a request with more runs alone)
MAX_BATCH_QUERIES = 64
#: milliseconds the first retrieve of a batch waits for others by default (a few: far below one query's cost)
DEFAULT_WINDOW_MS = 3.0

Call = Callable[[list[str]], Sequence[Any]]


@dataclass(eq=False)
class _Request:
    """One caller's queries, the call that answers them alone, and what it gets back."""

    queries: list[str]
    call: Call
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Any] | None = None
    error: BaseException | None = None

    def outcome(self) -> list[Any]:
        """The result, or the error raised in this (the caller's) thread."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(eq=False)
class _Group:
    """The requests gathered under one key; ``full`` wakes the leader before the window ends."""

    requests: list[_Request] = field(default_factory=list)
    size: int = 0
    full: threading.Event = field(default_factory=threading.Event)


class Gatherer:
    """Runs concurrent calls of the same key as one batch (see the module docstring). Thread-safe.

    ``window_s``: how long the first caller of a batch waits for others (0: no gathering); ``max_queries``:
    the most queries of one batch; ``lock``: held while a batch runs (default: none)."""

    def __init__(self, window_s: float, *, max_queries: int = MAX_BATCH_QUERIES,
                 lock: AbstractContextManager[Any] | None = None):
        if not 0 <= window_s < float("inf"):
            raise ValueError(f"the batch window must be a non-negative number of seconds, got {window_s!r}")
        if max_queries < 1:
            raise ValueError(f"max_queries must be at least 1, got {max_queries!r}")
        self.window_s, self.max_queries = float(window_s), int(max_queries)
        self._lock: AbstractContextManager[Any] = lock if lock is not None else nullcontext()
        self._mutex = threading.Lock()
        self._open: dict[Hashable, _Group] = {}
        self._counts = {"requests": 0, "batches": 0, "queries": 0, "largest": 0, "isolated": 0}

    def run(self, key: Hashable | None, queries: list[str], call: Call) -> list[Any]:
        """``call(queries)``'s result, one item per query, computed in a batch with the concurrent calls of the
        same ``key`` (whose calls must give each query the same result; None: never gathered)."""
        if self.window_s == 0 or key is None or len(queries) > self.max_queries:
            with self._lock:
                out = self._checked(call, queries)
            self._count(1, len(queries), 0)
            return out
        req = _Request(list(queries), call)
        group, leader = self._join(key, req)
        if leader:
            self._lead(key, group)
        req.done.wait()
        return req.outcome()

    def _join(self, key: Hashable, req: _Request) -> tuple[_Group, bool]:
        """Add ``req`` to the open group of ``key`` (a new one, led by this caller, if none has room)."""
        with self._mutex:
            group = self._open.get(key)
            leader = group is None or group.size + len(req.queries) > self.max_queries
            if leader:
                if group is not None:
                    group.full.set()            # it has no room left: its leader need not wait any longer
                group = self._open[key] = _Group()
            assert group is not None
            group.requests.append(req)
            group.size += len(req.queries)
            if group.size >= self.max_queries:
                group.full.set()
            return group, leader

    def _lead(self, key: Hashable, group: _Group) -> None:
        """Wait for the window (or a full group), close the group once ``lock`` is held, run it, and release
        every caller whatever happens."""
        try:
            group.full.wait(self.window_s)
            with self._lock:
                with self._mutex:
                    if self._open.get(key) is group:
                        del self._open[key]
                self._execute(group.requests)
        except BaseException as e:          # noqa: BLE001 - handed to every caller still waiting
            with self._mutex:
                if self._open.get(key) is group:
                    del self._open[key]
            for r in group.requests:
                if not r.done.is_set():
                    r.error = e
                    r.done.set()
            raise

    def _execute(self, requests: list[_Request]) -> None:
        """Run the requests' queries as one call (under the lock); after a failure each request alone."""
        queries = [q for r in requests for q in r.queries]
        try:
            out = self._checked(requests[0].call, queries)
        except Exception as e:              # noqa: BLE001 - each caller gets its own outcome below
            if len(requests) == 1:
                self._deliver(requests[0], None, e)
                self._count(1, len(queries), 0)
                return
            self._count(len(requests), len(queries), 0)
            for r in requests:
                self._alone(r)
            return
        self._count(len(requests), len(queries), 0)
        start = 0
        for r in requests:
            self._deliver(r, out[start:start + len(r.queries)], None)
            start += len(r.queries)

    def _alone(self, req: _Request) -> None:
        """Run one request's queries by themselves (after its batch failed)."""
        try:
            out = self._checked(req.call, req.queries)
        except Exception as e:              # noqa: BLE001 - this caller's own error
            self._deliver(req, None, e)
        else:
            self._deliver(req, out, None)
        self._count(0, 0, 1)

    @staticmethod
    def _checked(call: Call, queries: list[str]) -> list[Any]:
        out = list(call(queries))
        if len(out) != len(queries):
            raise RuntimeError(f"a batched call returned {len(out)} results for {len(queries)} queries")
        return out

    @staticmethod
    def _deliver(req: _Request, result: list[Any] | None, error: BaseException | None) -> None:
        req.result, req.error = result, error
        req.done.set()

    def _count(self, requests: int, queries: int, isolated: int) -> None:
        with self._mutex:
            c = self._counts
            c["requests"] += requests
            c["queries"] += queries
            c["isolated"] += isolated
            if requests:
                c["batches"] += 1
                c["largest"] = max(c["largest"], queries)

    def stats(self) -> dict:
        """Since start: ``requests`` answered, ``batches`` run, their ``queries``, the ``largest_batch`` and the
        mean (queries per batch), ``isolated_reruns`` (requests run alone after their batch failed), and the
        settings (``window_ms``, ``max_queries``)."""
        with self._mutex:
            c = dict(self._counts)
        mean = c["queries"] / c["batches"] if c["batches"] else 0.0
        return {"window_ms": self.window_s * 1000.0, "max_queries": self.max_queries, "requests": c["requests"],
                "batches": c["batches"], "queries": c["queries"], "largest_batch": c["largest"],
                "mean_batch_queries": round(mean, 3), "isolated_reruns": c["isolated"]}


__all__ = ["DEFAULT_WINDOW_MS", "MAX_BATCH_QUERIES", "Gatherer"]
