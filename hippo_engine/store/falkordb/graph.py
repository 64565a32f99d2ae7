"""One index's graph on a FalkorDB server, with all-or-nothing writes and snapshots: :class:`VersionedGraph`.

FalkorDB runs each query atomically but rolls nothing back across queries, so a write transaction works
on a copy of the index's graph and swaps it in at commit:

* ``begin``: take the index's write lock (a Redis key ``hippo:<graph>:writer`` holding a random token,
  expiring after :data:`LOCK_TTL` seconds unless a thread of the writer renews it), discard a copy
  left by a writer that died, and copy the graph (``GRAPH.COPY <graph> <graph>.tx``). Every write and
  read of the transaction goes to the copy.
* ``commit``: one ``MULTI``/``EXEC`` renames the copy over the graph and increments the version key
  (``hippo:<graph>:version``). With the append-only file fsynced on every write, that ``EXEC`` is the
  commit point: a kill -9 before it leaves the previous graph (and an orphan copy, discarded by the next
  writer), after it the new one. ``rollback`` deletes the copy.
* snapshots: a reader registers a lease on the current version (a sorted set
  ``hippo:<graph>:snapshots``, scored by its expiry) and reads the graph and the version in one
  ``MULTI``/``EXEC``; when a writer committed since, it reads ``<graph>.v<version>``, the copy of its
  version which a committing writer makes while a lease names the version it replaces (``WATCH`` on
  the leases makes that check and the rename one step). The last reader of an old version deletes it.

Copy names hold a ``.``, which :func:`~.address.check_graph_name` refuses, so they never meet an index's
graph. Errors: a server that goes away is a :class:`~hippo_engine.store.base.StoreConnectionLost`; a
failed query names the operation (:class:`CypherError`).
"""
from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

from hippo_engine.store.base import StoreConnectionLost, StoreError
from hippo_engine.store.falkordb.address import FalkorAddress
from hippo_engine.store.lock import IndexLockedError

logger = logging.getLogger(__name__)

#: seconds a writer's lock lives without renewal (a writer renews it every third of that)
LOCK_TTL = 30.0
#: seconds a snapshot's lease lives (a reader that died leaves an old version at most this long)
LEASE_TTL = 3600.0
#: socket timeout of the store's connection: a commit copies the graph, a load reads all of it
QUERY_TIMEOUT = 600.0
#: the server-wide key that lets one ``GRAPH.COPY`` run at a time: FalkorDB forks for every copy, and a copy
#: asked for while another fork runs (a second copy, an append-only file rewrite) hangs the server ("Can't fork
#: for module: File exists", every client then waits); seconds it lives without renewal, seconds to wait for it
COPY_LOCK, COPY_LOCK_TTL, COPY_WAIT = "hippo:graph-copy", 10.0, 600.0
#: the append-only file is rewritten after a commit once it is this many times its last rewrite and at least
#: :data:`REWRITE_MIN` bytes (the embedded server never rewrites it on its own: see :mod:`.server`)
REWRITE_GROWTH, REWRITE_MIN = 2.0, 64 << 20
#: the ``INFO persistence`` fields that say a fork is running
_FORKS = ("rdb_bgsave_in_progress", "aof_rewrite_in_progress", "module_fork_in_progress")
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def _text(value: Any) -> str:
    """A reply of the client as text (it decodes replies or not, depending on how it was made)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class CypherError(StoreError):
    """A query failed on the FalkorDB server (the message names the operation and the graph)."""


def connect(address: FalkorAddress, timeout: float = QUERY_TIMEOUT) -> Any:
    """A ``redis.Redis`` client of ``address`` that never retries a command (a retried write could run
    twice); connecting is checked with a ``PING`` (see :meth:`FalkorAddress.connect`)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    client = address.connect(timeout).connection
    client.set_retry(Retry(NoBackoff(), 0))
    return client


def driver_errors() -> tuple[type[BaseException], ...]:
    """The client's errors that say the server is gone or busy (connection refused or reset, timeouts,
    an append-only file still loading)."""
    import redis
    return (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


class VersionedGraph:
    """The graph ``name`` on the server of ``client`` (see the module documentation). ``lock_timeout``:
    seconds a writer waits for another one (None: as long as it takes). ``where``: the server, for messages."""

    def __init__(self, client: Any, name: str, where: str, *, lock_timeout: float | None = None):
        import falkordb
        self.client, self.name, self.where, self.lock_timeout = client, name, where, lock_timeout
        self._graphs = {n: falkordb.Graph(client, n) for n in (name, self.tx_name)}
        self._keys = {k: f"hippo:{name}:{k}" for k in ("writer", "version", "snapshots")}
        self._token: str | None = None
        self._renewer: threading.Event | None = None
        self._lease: tuple[str, int] | None = None     # (lease member, version) of the open snapshot

    @property
    def tx_name(self) -> str:
        """The copy a write transaction works on."""
        return f"{self.name}.tx"

    def _graph(self, name: str):
        if name not in self._graphs:
            import falkordb
            self._graphs[name] = falkordb.Graph(self.client, name)
        return self._graphs[name]

    # ------------------------------------------------------------------ queries
    def query(self, op: str, cypher: str, params: dict | None = None) -> list[list[Any]]:
        """Run ``cypher`` (``op`` names it in errors) where this connection reads: the transaction's
        copy, the snapshot's version or the graph; returns the rows (none from a graph not made yet)."""
        if self._token is not None:
            return self._run(op, self.tx_name, cypher, params, read_only=False)
        if self._lease is not None:
            return self._snapshot_query(op, cypher, params)
        return self._run(op, self.name, cypher, params, read_only=True)

    def write(self, op: str, cypher: str, params: dict | None = None) -> list[list[Any]]:
        """Run a writing query on the open transaction's copy."""
        if self._token is None:
            raise StoreError(f"FalkorDB graph {self.name} on {self.where}: {op} outside a write transaction")
        return self._run(op, self.tx_name, cypher, params, read_only=False)

    def _run(self, op: str, graph: str, cypher: str, params: dict | None, *, read_only: bool) -> list[list[Any]]:
        import redis
        try:
            g = self._graph(graph)
            return (g.ro_query if read_only else g.query)(cypher, params).result_set
        except redis.ResponseError as e:
            if "empty key" in str(e):
                return []
            raise CypherError(f"FalkorDB graph {graph} on {self.where}: {op} failed: {e}") from None
        except driver_errors() as e:
            raise StoreConnectionLost(f"the FalkorDB server at {self.where} went away during {op} "
                                      f"({type(e).__name__}); open the index again") from None

    def _snapshot_query(self, op: str, cypher: str, params: dict | None) -> list[list[Any]]:
        """The graph and the version in one step; the kept copy of the snapshot's version if a writer
        committed since."""
        import redis
        from falkordb.query_result import QueryResult
        member, version = self._lease or ("", 0)
        g = self._graph(self.name)
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self._keys["version"])
        pipe.execute_command("GRAPH.RO_QUERY", self.name, g._build_params_header(params) + cypher, "--compact")
        try:
            now, reply = pipe.execute(raise_on_error=False)
        except driver_errors() as e:
            raise StoreConnectionLost(f"the FalkorDB server at {self.where} went away during {op} "
                                      f"({type(e).__name__}); open the index again") from None
        if int(now or 0) != version:
            return self._run(op, f"{self.name}.v{version}", cypher, params, read_only=True)
        if isinstance(reply, redis.ResponseError):
            if "empty key" in str(reply):
                return []
            raise CypherError(f"FalkorDB graph {self.name} on {self.where}: {op} failed: {reply}")
        return QueryResult(g, reply).result_set

    # ------------------------------------------------------------------ write transactions
    def begin(self) -> None:
        """Take the write lock and copy the graph for the transaction."""
        if self._lease is not None:
            raise StoreError(f"FalkorDB graph {self.name}: a write transaction cannot start inside a snapshot")
        token = self._lock()
        try:
            self.client.delete(self.tx_name)
            if self.client.exists(self.name):
                self._copy(self.client, self.name, self.tx_name)
        except BaseException:
            self._unlock(token)
            raise
        self._token = token

    def commit(self) -> None:
        """Swap the copy in (one ``MULTI``/``EXEC``; an old version a snapshot reads is kept first)."""
        import redis
        token, self._token = self._token, None
        try:
            while True:
                with self.client.pipeline(transaction=True) as pipe:
                    try:
                        self._swap(pipe, token)
                        break
                    except redis.WatchError:
                        continue
        finally:
            self._unlock(token)
        self._drop_unread_versions()
        self._rewrite_when_grown()

    def _rewrite_when_grown(self) -> None:
        """Rewrite the append-only file (``BGREWRITEAOF``, under the copy lock, waited for) once it has grown
        :data:`REWRITE_GROWTH` times its base; a server without one, or that refuses, is left as it is."""
        import redis
        try:
            info = self.client.info("persistence")
            size, base = int(info.get("aof_current_size", 0)), int(info.get("aof_base_size", 0))
            if not info.get("aof_enabled") or size < max(REWRITE_MIN, REWRITE_GROWTH * base):
                return
            self._forking(lambda: self.client.execute_command("BGREWRITEAOF"), wait=True)
        except (redis.ResponseError, IndexLockedError) as e:
            logger.info("FalkorDB server %s: the append-only file was not rewritten now (%s)", self.where, e)

    def _swap(self, pipe: Any, token: str | None) -> None:
        pipe.watch(self._keys["snapshots"], self._keys["writer"])
        if _text(pipe.get(self._keys["writer"])) != token:
            raise StoreError(f"FalkorDB graph {self.name} on {self.where}: the write lock expired before the "
                             "commit (another writer took it); nothing was committed")
        version = int(pipe.get(self._keys["version"]) or 0)
        if self._leased(pipe, version) and pipe.exists(self.name) and not pipe.exists(f"{self.name}.v{version}"):
            self._copy(pipe, self.name, f"{self.name}.v{version}")
        has_copy = pipe.exists(self.tx_name)
        pipe.multi()
        if has_copy:
            pipe.rename(self.tx_name, self.name)
        pipe.incr(self._keys["version"])
        pipe.execute()

    def rollback(self) -> None:
        """Discard the copy and let the lock go (never raises for a server already gone)."""
        token, self._token = self._token, None
        with contextlib.suppress(*driver_errors()):
            self.client.delete(self.tx_name)
        with contextlib.suppress(*driver_errors()):
            self._unlock(token)

    def _lock(self) -> str:
        token, self._renewer = self._acquire(
            self._keys["writer"], LOCK_TTL, self.lock_timeout,
            f"the index in FalkorDB graph {self.name} on {self.where} is being written by another writer; gave up "
            f"after waiting {{:g}} s. One writer at a time; readers need no lock.")
        return token

    def _acquire(self, key: str, ttl: float, timeout: float | None, refused: str) -> tuple[str, threading.Event]:
        """Take the lock ``key`` (a random token, expiring after ``ttl`` s unless a thread renews it, which
        runs until the returned event is set); ``refused`` (formatted with the wait) after ``timeout`` s."""
        token = secrets.token_hex(16)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.client.set(key, token, nx=True, px=int(ttl * 1000)):
            if deadline is not None and time.monotonic() > deadline:
                raise IndexLockedError(refused.format(timeout))
            time.sleep(0.02)
        stop = threading.Event()
        threading.Thread(target=self._renew, args=(key, token, ttl, stop), daemon=True, name="falkordb-lock").start()
        return token, stop

    def _renew(self, key: str, token: str, ttl: float, stop: threading.Event) -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(Exception):
                self.client.eval(_RENEW, 1, key, token, int(ttl * 1000))

    def _copy(self, conn: Any, source: str, dest: str) -> None:
        """``GRAPH.COPY source dest`` on ``conn``, one copy at a time on the server and never while another
        fork runs (see :data:`COPY_LOCK`)."""
        self._forking(lambda: conn.execute_command("GRAPH.COPY", source, dest))

    def _forking(self, run: Any, *, wait: bool = False) -> None:
        """``run()`` (a command that forks the server) under the server-wide :data:`COPY_LOCK`, once no other
        fork runs; ``wait``: hold the lock until the fork it started has ended too."""
        token, stop = self._acquire(COPY_LOCK, COPY_LOCK_TTL, COPY_WAIT,
                                    f"FalkorDB server {self.where}: another graph copy held the server for {{:g}} s")
        try:
            self._no_fork()
            run()
            if wait:
                self._no_fork()
        finally:
            stop.set()
            with contextlib.suppress(*driver_errors()):
                self.client.eval(_RELEASE, 1, COPY_LOCK, token)

    def _no_fork(self) -> None:
        """Wait (at most :data:`COPY_WAIT` s) until the server runs no fork."""
        deadline = time.monotonic() + COPY_WAIT
        while any(int(self.client.info("persistence").get(f, 0)) for f in _FORKS):
            if time.monotonic() > deadline:
                raise IndexLockedError(f"FalkorDB server {self.where}: a background save still ran after "
                                       f"{COPY_WAIT:g} s")
            time.sleep(0.02)

    def _unlock(self, token: str | None) -> None:
        if self._renewer is not None:
            self._renewer.set()
            self._renewer = None
        if token is not None:
            self.client.eval(_RELEASE, 1, self._keys["writer"], token)

    # ------------------------------------------------------------------ snapshots
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see the version current when it started (nested: the same one)."""
        if self._lease is not None or self._token is not None:
            yield
            return
        self._lease = self._take_lease()
        try:
            yield
        finally:
            member, version = self._lease
            self._lease = None
            with contextlib.suppress(*driver_errors()):
                self.client.zrem(self._keys["snapshots"], member)
                self._drop_unread_versions()

    def _take_lease(self) -> tuple[str, int]:
        import redis
        token = secrets.token_hex(8)
        while True:
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self._keys["version"])
                    version = int(pipe.get(self._keys["version"]) or 0)
                    member = f"{version}:{token}"
                    pipe.multi()
                    pipe.zadd(self._keys["snapshots"], {member: time.time() + LEASE_TTL})
                    pipe.execute()
                    return member, version
                except redis.WatchError:
                    continue

    def _leased(self, client: Any, version: int) -> bool:
        """Whether a live lease names ``version``."""
        live = client.zrangebyscore(self._keys["snapshots"], time.time(), "+inf")
        return any(_text(m).split(":")[0] == str(version) for m in live)

    def _drop_unread_versions(self) -> None:
        """Delete kept versions no live lease names (and expired leases)."""
        self.client.zremrangebyscore(self._keys["snapshots"], "-inf", time.time())
        live = {_text(m).split(":")[0] for m in self.client.zrangebyscore(self._keys["snapshots"], time.time(),
                                                                            "+inf")}
        for key in self.client.scan_iter(match=f"{self.name}.v*", count=1000):
            if _text(key).rsplit(".v", 1)[1] not in live:
                self.client.delete(key)

    # ------------------------------------------------------------------ the whole graph
    def discard_leftovers(self) -> None:
        """At open: remove the copy of a writer that died (when nobody writes now) and unread versions."""
        if not self.client.exists(self._keys["writer"]):
            self.client.delete(self.tx_name)
        self._drop_unread_versions()

    def drop(self) -> None:
        """Delete the graph, its copies and its keys."""
        self.client.delete(self.name, self.tx_name, *self._keys.values(),
                           *self.client.scan_iter(match=f"{self.name}.v*", count=1000))


__all__ = ["LEASE_TTL", "LOCK_TTL", "CypherError", "VersionedGraph", "connect", "driver_errors"]
