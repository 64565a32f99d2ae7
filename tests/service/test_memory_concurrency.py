"""Concurrent adds, re-adds, deletes and queries on one memory (threads; fake models, SQLite): no errors,
and once the queue is idle the statuses and the index agree: every document the queue calls indexed is in the
index with its latest text, and no deleted one is."""
from __future__ import annotations

import random
import threading

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import toy_respond

from hippo_engine.ids import chunk_id
from hippo_engine.service.jobs import indexed_text
from hippo_engine.service.workspaces import Workspaces

try:   # the storage tests' PostgreSQL fixtures (used by the postgres case only)
    from store import conftest as _pg
    pg_server, pg_dsn, pg_schema = _pg.pg_server, _pg.pg_dsn, _pg.pg_schema
except ImportError:   # pragma: no cover - tests/store missing
    pass


def corpus(n: int) -> list[dict]:
    towns = ["Velor", "Dunhaven", "Amberly", "Norwick", "Ostfeld"]
    return [{"id": f"k{i:03d}", "title": f"Person {i}",
             "text": f"Person {i} was born in {towns[i % 5]}. Person {i} moved to {towns[(i * 3 + 1) % 5]}."}
            for i in range(n)]


def exercise(mem, seed: int, n: int = 48) -> None:
    """Add ``n`` documents in small jobs (some again with a new text) while other threads delete and query;
    raises the first error any thread met."""
    docs, rng, errors = corpus(n), random.Random(seed), []
    done = threading.Event()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:   # noqa: BLE001 - reported by the test
                errors.append(e)
        return run

    def adder():
        for i in range(0, n, 4):
            mem.add(docs[i:i + 4])
            if rng.random() < 0.3:
                j = rng.randrange(0, i + 4)
                mem.add([{**docs[j], "text": docs[j]["text"] + " It rained."}])
        done.set()

    def deleter():
        while not done.is_set():
            mem.delete([f"k{rng.randrange(0, n):03d}" for _ in range(2)])

    def reader():
        while not done.is_set():
            for r in mem.retrieve(["Who was born in Velor?"], top_k=3):
                assert all(p["doc_ids"] for p in r["passages"])
            mem.documents(status="indexed", limit=10)
    threads = [threading.Thread(target=guarded(f)) for f in (adder, deleter, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert mem.wait(timeout=300)


def check_agreement(mem) -> None:
    page = mem.documents(limit=1000)["documents"]
    indexed = {d["id"] for d in page if d["status"] == "indexed"}
    assert {d["status"] for d in page} <= {"indexed"}
    held = mem.writer.index_state.all_documents()
    assert set(held) == indexed
    for d in indexed:
        doc = mem.document(d)
        assert held[d] == [chunk_id(indexed_text(doc["text"], doc["title"]))]     # the latest text
    assert mem.store.unpurged() == []


@pytest.mark.parametrize("storage,seed", [("sqlite", 5), ("sqlite", 6), ("postgres", 7)],
                         ids=["sqlite-5", "sqlite-6", "postgres-7"])
def test_concurrent_adds_deletes_and_queries_leave_statuses_and_index_in_agreement(tmp_path, request, storage, seed):
    """On PostgreSQL (an integration test by its id): two memories over one index, as two server processes
    would have, both with workers, both taking writes and queries."""
    opts = {"llm": ScriptedLLM(toy_respond), "encoder": NgramEncoder(), "show_progress": False, "use_filter": False}
    if storage == "postgres":
        opts.update(dsn=request.getfixturevalue("pg_dsn"), postgres_schema=request.getfixturevalue("pg_schema"))
    spaces = [Workspaces(tmp_path / "root", rag_options=opts, memory_options={"batch_size": 3, "poll_s": 0.02})
              for _ in range(2 if storage == "postgres" else 1)]
    try:
        mems = [ws.get(None, create=True) for ws in spaces]
        failed: list[BaseException] = []

        def run(mem, k):
            try:
                exercise(mem, seed + k)
            except BaseException as e:  # noqa: BLE001 - reported below
                failed.append(e)
        threads = [threading.Thread(target=run, args=(m, k)) for k, m in enumerate(mems)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not failed, failed
        for m in mems:
            assert m.wait(timeout=300)
        check_agreement(mems[0])
    finally:
        for ws in spaces:
            ws.close()
