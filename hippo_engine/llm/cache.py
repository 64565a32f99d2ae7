"""``CachedLLM``: a persistent SQLite cache around any ``LLMClient``.

The key is the SHA-256 of a canonical JSON document of the model name, the messages and the
effective generation parameters (``LLMClient.generation_params``: client defaults filled in,
plus anything else the client says changes its output). Only successful replies are stored
(text, token counts, finish reason) as plain columns; errors are never cached. The database
is in WAL mode, so several processes can share it; within a process one connection is used
under a lock, and concurrent identical requests are sent to the inner client only once.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from pathlib import Path

from hippo_engine.llm import cancel
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, Message
from hippo_engine.llm.usage import Usage

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key               TEXT PRIMARY KEY,
    model             TEXT NOT NULL,
    request           TEXT NOT NULL,
    text              TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    finish_reason     TEXT NOT NULL,
    created_at        REAL NOT NULL
)
"""
_KEY_VERSION = 1
_COLUMNS = {"key", "model", "request", "text", "prompt_tokens", "completion_tokens", "finish_reason", "created_at"}
_SQLITE_HEADER = b"SQLite format 3\x00"


def _open_checked(path: Path) -> sqlite3.Connection:
    """A connection to the cache at ``path``, after checking, without writing anything, that the
    file is absent, empty, or an SQLite database holding nothing but an ``llm_cache`` table of
    this module's columns. Anything else raises ``ValueError`` naming the file (it is left as
    it was: it may be someone else's data)."""
    refuse = f"LLM cache {path}: %s; refusing to use it (nothing was written). Point the cache elsewhere " \
             "(another save_dir) or switch it off (llm_cache=False)"
    if path.is_dir():
        raise ValueError(refuse % "is a directory")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        head = b""
    except OSError as e:
        raise ValueError(refuse % f"cannot be read ({e.strerror or e})") from None
    if head and head != _SQLITE_HEADER:
        raise ValueError(refuse % f"is not an SQLite database (it starts with {head[:8]!r})")
    try:
        conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise ValueError(refuse % f"cannot be opened ({e})") from None
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")]
        other = sorted(n for n in names if n != "llm_cache")
        if other:
            raise ValueError(refuse % f"is an SQLite database with other tables ({', '.join(other[:5])}), "
                                      "not an LLM cache")
        if names:
            cols = {r[1] for r in conn.execute("PRAGMA table_info(llm_cache)")}
            if cols != _COLUMNS:
                raise ValueError(refuse % f"has an llm_cache table with other columns ({', '.join(sorted(cols))})")
    except sqlite3.DatabaseError as e:
        conn.close()
        raise ValueError(refuse % f"is not a readable SQLite database ({e})") from None
    except ValueError:
        conn.close()
        raise
    return conn


class CachedLLM(LLMClient):
    """Wraps ``inner`` with a persistent cache at ``path`` (an SQLite file; a file that is not
    one of these caches raises ``ValueError`` naming it and is left untouched).

    A hit returns the stored reply with ``cached=True`` and makes no call. Counters for
    reports: :attr:`hits`, :attr:`misses`, :attr:`errors` and the tokens spent on misses
    (:meth:`stats`). ``max_concurrency`` and ``model_name`` are the inner client's.
    """

    def __init__(self, inner: LLMClient, path: str | Path):
        self.inner = inner
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db_lock = threading.Lock()
        self._conn = _open_checked(self.path)
        with self._db_lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
        self._stats_lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._inflight_lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self.usage = Usage()   # tokens of the replies this instance paid for (cache misses)

    # ------------------------------------------------------------------ delegation
    @property
    def model_name(self) -> str:  # type: ignore[override]
        """The inner client's model name."""
        return self.inner.model_name

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        """The inner client's concurrency."""
        return self.inner.max_concurrency

    def generation_params(self, *, max_new_tokens: int | None = None,
                          temperature: float | None = None) -> dict:
        """The inner client's effective parameters."""
        return self.inner.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)

    def prompt_tokens(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                      temperature: float | None = None) -> tuple[int, int] | None:
        """None when this exact request is cached (it was answered as it is: nothing to fit, and a
        local model need not load to count it), else the inner client's count and window."""
        request = self.request_document(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        if self._get(hashlib.sha256(request.encode("utf-8")).hexdigest()) is not None:
            return None
        return self.inner.prompt_tokens(messages, max_new_tokens=max_new_tokens, temperature=temperature)

    # ------------------------------------------------------------------ keys
    def request_document(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                         temperature: float | None = None) -> str:
        """The canonical JSON document a request is keyed on."""
        doc = {"v": _KEY_VERSION, "model": self.inner.model_name,
               "messages": [dict(m) for m in messages],
               "params": self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)}
        return json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def key(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
            temperature: float | None = None) -> str:
        """SHA-256 (hex) of :meth:`request_document`."""
        doc = self.request_document(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        return hashlib.sha256(doc.encode("utf-8")).hexdigest()

    # ------------------------------------------------------------------ storage
    def _get(self, key: str) -> LLMResponse | None:
        with self._db_lock:
            row = self._conn.execute(
                "SELECT text, prompt_tokens, completion_tokens, finish_reason FROM llm_cache "
                "WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return LLMResponse(text=row[0], prompt_tokens=row[1], completion_tokens=row[2],
                           finish_reason=row[3], cached=True, cache_key=key)

    def _put(self, key: str, request: str, resp: LLMResponse) -> None:
        with self._db_lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO llm_cache (key, model, request, text, prompt_tokens, "
                "completion_tokens, finish_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, self.inner.model_name, request, resp.text, int(resp.prompt_tokens),
                 int(resp.completion_tokens), resp.finish_reason, time.time()))

    def discard(self, response: LLMResponse) -> None:
        """Delete the stored row of ``response`` (by its ``cache_key``), so the next identical
        request calls the inner client again; then pass it on to the inner client (which may
        itself be, or wrap, a cache)."""
        key = response.cache_key
        if key is not None:
            try:
                with self._db_lock:
                    self._conn.execute("DELETE FROM llm_cache WHERE key = ?", (key,))
            except sqlite3.Error as e:
                logger.warning("could not delete a bad LLM reply from %s: %s", self.path, e)
        self.inner.discard(response)

    def __len__(self) -> int:
        with self._db_lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0])

    # ------------------------------------------------------------------ generation
    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """The cached reply if there is one (``cached=True``), else the inner client's (stored)."""
        request = self.request_document(messages, max_new_tokens=max_new_tokens,
                                        temperature=temperature)
        key = hashlib.sha256(request.encode("utf-8")).hexdigest()
        hit = self._get(key)
        if hit is not None:
            self._count(hit=True)
            return hit
        with self._inflight_lock:
            shared = self._inflight.get(key)
            owner = shared is None
            fut: Future = Future() if shared is None else shared
            if owner:
                self._inflight[key] = fut
        if not owner:  # the same request is in flight in another thread: share its outcome
            try:
                resp = _shared(fut)  # re-raises the owner's error
            except cancel.LLMCancelled:
                if cancel.requested():
                    raise
                # the owner's caller went away, not this one's: ask again
                return self.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
            self._count(hit=True)
            return replace(resp, cached=True)
        try:
            hit = self._get(key)  # another process may have stored it meanwhile
            if hit is not None:
                self._count(hit=True)
                fut.set_result(hit)
                return hit
            try:
                resp = self.inner.generate(messages, max_new_tokens=max_new_tokens,
                                           temperature=temperature)
            except BaseException as e:
                if isinstance(e, LLMError):
                    with self._stats_lock:
                        self.errors += 1
                fut.set_exception(e)
                raise
            resp = replace(resp, cached=False, cache_key=key)
            try:
                self._put(key, request, resp)
            except sqlite3.Error as e:  # a full disk must not lose a paid-for reply
                logger.warning("could not store an LLM reply in %s: %s", self.path, e)
            self._count(hit=False, resp=resp)
            fut.set_result(resp)
            return resp
        finally:
            with self._inflight_lock:
                self._inflight.pop(key, None)

    def _count(self, *, hit: bool, resp: LLMResponse | None = None) -> None:
        with self._stats_lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        if not hit and resp is not None:
            self.usage.add(resp)

    # ------------------------------------------------------------------ reporting
    @property
    def total_tokens(self) -> int:
        """Prompt + completion tokens spent on cache misses by this instance."""
        return self.usage.spent_tokens

    def stats(self) -> dict:
        """Counters of this instance: hits, misses, errors and tokens spent on misses."""
        u = self.usage.snapshot()
        with self._stats_lock:
            return {"hits": self.hits, "misses": self.misses, "errors": self.errors,
                    "prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                    "total_tokens": u["prompt_tokens"] + u["completion_tokens"]}

    def close(self) -> None:
        """Close the database (the inner client stays usable)."""
        with self._db_lock:
            self._conn.close()

    def __enter__(self) -> CachedLLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CachedLLM({self.inner!r}, path={str(self.path)!r})"


def _shared(fut: Future) -> LLMResponse:
    """The outcome of another thread's identical request; with a cancel token (:mod:`.cancel`) the wait
    stops once it is set (the other call goes on for its own caller)."""
    token = cancel.current()
    if token is None:
        return fut.result()
    while True:
        try:
            return fut.result(timeout=cancel.POLL_S)
        except FutureTimeout:
            if token.is_set():
                raise cancel.LLMCancelled("waiting for a shared LLM reply was cancelled: its caller went "
                                          "away") from None


__all__ = ["CachedLLM"]
