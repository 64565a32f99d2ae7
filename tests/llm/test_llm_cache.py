"""CachedLLM: hits and misses, key sensitivity, persistence, errors, threads."""
from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from hippo_engine.llm import CachedLLM, LLMClient, LLMError, LLMResponse, LLMTimeoutError


class CountingLLM(LLMClient):
    """Echoes the last user message; counts calls; may fail the first ``fail_first`` calls."""

    def __init__(self, name="counting", fail_first=0, delay=0.0, max_concurrency=4):
        self.model_name = name
        self.max_concurrency = max_concurrency
        self.fail_first = fail_first
        self.delay = delay
        self.calls = 0
        self._lock = threading.Lock()

    def generation_params(self, *, max_new_tokens=None, temperature=None):
        return {"max_new_tokens": max_new_tokens or 100,
                "temperature": 0.0 if temperature is None else temperature}

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        with self._lock:
            self.calls += 1
            n = self.calls
        if self.delay:
            time.sleep(self.delay)
        if n <= self.fail_first:
            raise LLMTimeoutError(f"scripted failure {n}")
        p = self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)
        return LLMResponse(text=f"echo:{messages[-1]['content']}:{p['max_new_tokens']}:{p['temperature']}",
                           prompt_tokens=10, completion_tokens=3,
                           finish_reason="length" if p["max_new_tokens"] < 5 else "stop")


def msgs(q):
    return [{"role": "user", "content": q}]


def test_hit_and_miss(tmp_path):
    inner = CountingLLM()
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    r1 = c.generate(msgs("a"))
    r2 = c.generate(msgs("a"))
    assert r1.cached is False and r2.cached is True
    assert (r2.text, r2.prompt_tokens, r2.completion_tokens, r2.finish_reason) == \
        (r1.text, r1.prompt_tokens, r1.completion_tokens, r1.finish_reason)
    assert inner.calls == 1
    assert c.stats() == {"hits": 1, "misses": 1, "errors": 0, "prompt_tokens": 10,
                         "completion_tokens": 3, "total_tokens": 13}
    assert len(c) == 1
    r3 = c.generate(msgs("a"), max_new_tokens=2)
    assert r3.finish_reason == "length" and not r3.cached
    assert c.generate(msgs("a"), max_new_tokens=2).finish_reason == "length"  # stored as such


def test_key_sensitivity(tmp_path):
    inner = CountingLLM()
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    base = c.key(msgs("a"))
    assert c.key(msgs("a")) == base
    # defaults are filled in before keying: None and the client's default are the same request
    assert c.key(msgs("a"), max_new_tokens=100, temperature=0.0) == base
    variants = {
        c.key(msgs("b")),
        c.key(msgs("a"), max_new_tokens=99),
        c.key(msgs("a"), temperature=0.5),
        c.key([{"role": "system", "content": "a"}]),
        c.key([{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]),
        CachedLLM(CountingLLM(name="other-model"), tmp_path / "d.sqlite").key(msgs("a")),
    }
    assert base not in variants and len(variants) == 6
    for kw in ({}, {"max_new_tokens": 99}, {"temperature": 0.5}):
        c.generate(msgs("a"), **kw)
    assert inner.calls == 3 and c.misses == 3


def test_persistence_across_instances(tmp_path):
    path = tmp_path / "sub" / "c.sqlite"
    first = CachedLLM(CountingLLM(), path)
    first.generate(msgs("persist me"))
    first.close()
    inner2 = CountingLLM()
    with CachedLLM(inner2, path) as second:
        r = second.generate(msgs("persist me"))
        assert r.cached and r.text == "echo:persist me:100:0.0"
        assert inner2.calls == 0 and second.hits == 1 and second.total_tokens == 0
    # plain columns, no pickles
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT model, text, prompt_tokens, completion_tokens, finish_reason, request "
                         "FROM llm_cache").fetchone()
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert row[:5] == ("counting", "echo:persist me:100:0.0", 10, 3, "stop")
    assert '"persist me"' in row[5]


def test_errors_are_not_cached(tmp_path):
    inner = CountingLLM(fail_first=1)
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    with pytest.raises(LLMTimeoutError):
        c.generate(msgs("x"))
    assert len(c) == 0 and c.errors == 1
    r = c.generate(msgs("x"))
    assert not r.cached and inner.calls == 2
    assert c.generate(msgs("x")).cached


def test_generate_many_reports_errors_and_delegates_concurrency(tmp_path):
    inner = CountingLLM(fail_first=1, max_concurrency=1)
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    assert c.max_concurrency == 1 and c.model_name == "counting"
    out = c.generate_many([msgs("p"), msgs("q"), msgs("q")])
    assert isinstance(out[0], LLMError)
    assert out[1].text == "echo:q:100:0.0" and out[2].cached
    assert inner.calls == 2  # p (failed), q; the second q was a hit


def test_concurrent_threads_share_cache_and_dedupe_in_flight(tmp_path):
    inner = CountingLLM(delay=0.05, max_concurrency=8)
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    questions = [f"q{i % 5}" for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda q: c.generate(msgs(q)), questions))
    assert [r.text for r in results] == [f"echo:{q}:100:0.0" for q in questions]
    assert inner.calls == 5  # each distinct request reached the inner client once
    assert c.misses == 5 and c.hits == 35 and len(c) == 5
    assert sum(not r.cached for r in results) == 5


def test_two_instances_same_file_from_threads(tmp_path):
    path = tmp_path / "shared.sqlite"
    a, b = CachedLLM(CountingLLM(), path), CachedLLM(CountingLLM(), path)

    def work(i):
        cl = a if i % 2 else b
        return cl.generate(msgs(f"k{i % 7}")).text

    with ThreadPoolExecutor(max_workers=6) as pool:
        texts = list(pool.map(work, range(60)))
    assert texts == [f"echo:k{i % 7}:100:0.0" for i in range(60)]
    assert len(a) == 7


def test_discard_deletes_the_row_so_the_next_call_asks_again(tmp_path):
    inner = CountingLLM()
    c = CachedLLM(inner, tmp_path / "c.sqlite")
    miss = c.generate(msgs("bad"))
    assert miss.cache_key == c.key(msgs("bad"))
    hit = c.generate(msgs("bad"))
    assert hit.cached and hit.cache_key == miss.cache_key
    c.generate(msgs("good"))
    c.discard(hit)
    assert len(c) == 1  # only the discarded row went
    again = c.generate(msgs("bad"))
    assert not again.cached and inner.calls == 3
    c.discard(LLMResponse(text="no key"))  # nothing to delete: no error
    assert len(c) == 2


def test_discard_reaches_a_cache_inside_a_wrapper(tmp_path):
    from hippo_engine.llm import MeteredLLM
    inner = CountingLLM()
    cached = CachedLLM(inner, tmp_path / "c.sqlite")
    outer = MeteredLLM(cached)
    r = outer.generate(msgs("x"))
    outer.discard(r)
    assert len(cached) == 0
    assert not outer.generate(msgs("x")).cached and inner.calls == 2
    LLMClient.discard(inner, r)  # the default is a no-op


def _bytes_of(path):
    return {p.name: p.read_bytes() for p in path.parent.iterdir()}


@pytest.mark.parametrize("content", [b"not a database at all, just text\n", b"SQLite", bytes(range(256)) * 8])
def test_a_file_that_is_not_sqlite_is_refused_by_name_and_left_alone(tmp_path, content):
    path = tmp_path / "llm_cache.sqlite"
    path.write_bytes(content)
    before = _bytes_of(path)
    with pytest.raises(ValueError, match=f"LLM cache {path}: is not an SQLite database"):
        CachedLLM(CountingLLM(), path)
    assert _bytes_of(path) == before


def _db(path, *statements):
    with sqlite3.connect(path) as db:
        for st in statements:
            db.execute(st)
    db.close()


@pytest.mark.parametrize(("statements", "match"), [
    (["CREATE TABLE users (id INTEGER, name TEXT)"], "other tables \\(users\\)"),
    (["CREATE TABLE llm_cache (key TEXT, value BLOB)"], "llm_cache table with other columns"),
    (["CREATE TABLE llm_cache (key TEXT PRIMARY KEY, model TEXT, request TEXT, text TEXT, "
      "prompt_tokens INTEGER, completion_tokens INTEGER, finish_reason TEXT, created_at REAL)",
      "CREATE TABLE notes (x)"], "other tables \\(notes\\)"),
])
def test_an_sqlite_database_that_is_not_an_llm_cache_is_refused(tmp_path, statements, match):
    path = tmp_path / "other.db"
    _db(path, *statements)
    before = _bytes_of(path)
    with pytest.raises(ValueError, match=f"LLM cache {path}: .*{match}.*nothing was written"):
        CachedLLM(CountingLLM(), path)
    assert _bytes_of(path) == before                      # not even switched to WAL


def test_empty_file_and_directory(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    c = CachedLLM(CountingLLM(), empty)
    c.generate(msgs("a"))
    assert len(c) == 1
    c.close()
    with pytest.raises(ValueError, match=f"LLM cache {tmp_path}: is a directory"):
        CachedLLM(CountingLLM(), tmp_path)
