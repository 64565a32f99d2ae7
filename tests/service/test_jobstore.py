"""The job store on SQLite (the index's own file): atomic claims across connections, revisions, stale
claims of dead owners, tombstones, pagination order; claim owners and how they are judged alive."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from helpers import make_rag

from hippo_engine.service.jobs import NewDocument, Owner, check_documents, owner_alive
from hippo_engine.service.jobstore import JobStore, open_job_store
from hippo_engine.store.jobs_sqlite import SQLiteJobTables


@pytest.fixture
def index_file(tmp_path):
    rag = make_rag(tmp_path / "m")
    path = rag.index_state.db.path
    rag.close()
    return path


def _indexed(index_file, ids):
    """What the worker's index write does before it finishes a claim: the ids go into the index's document
    registry (the store lists a document as indexed only while the index holds it)."""
    import contextlib
    import sqlite3

    from hippo_engine.store import document_registry as registry
    with contextlib.closing(sqlite3.connect(index_file)) as c, c:
        c.executemany(registry.UPSERT.format(t=registry.TABLE), registry.rows(ids))


def _store(path) -> JobStore:
    return JobStore(SQLiteJobTables(path))


def _docs(n, prefix="d"):
    return [NewDocument(f"{prefix}{i}", f"text {i}", None, {}) for i in range(n)]


def test_the_store_of_an_index_is_in_its_sqlite_file(tmp_path):
    rag = make_rag(tmp_path / "m")
    store = open_job_store(rag)
    try:
        assert isinstance(store.tables, SQLiteJobTables) and store.tables.path == rag.index_state.db.path
    finally:
        store.close()
        rag.close()


def test_concurrent_claims_from_several_connections_never_share_a_document(index_file):
    _store(index_file).add(_docs(200))
    stores = [_store(index_file) for _ in range(4)]
    got: list[list[str]] = [[] for _ in stores]

    def work(i):
        while batch := stores[i].claim(f"owner{i}", 7):
            got[i].extend(d["id"] for d in batch)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [d for g in got for d in g]
    assert len(claimed) == 200 and len(set(claimed)) == 200
    assert stores[0].counts() == {"pending": 0, "processing": 200, "indexed": 0, "failed": 0}


def test_claims_come_oldest_first_and_finish_records_indexed_or_failed(index_file):
    s = _store(index_file)
    s.add(_docs(3, "a"))
    s.add(_docs(2, "b"))
    batch = s.claim("me", 4)
    assert [d["id"] for d in batch] == ["a0", "a1", "a2", "b0"]
    _indexed(index_file, ["a0", "a2", "b0"])
    assert s.finish("me", [("a0", 1, None), ("a1", 1, "boom"), ("a2", 1, None), ("b0", 1, None)]) == []
    assert s.document("a1")["status"] == "failed" and s.document("a1")["error"] == "boom"
    assert s.document("a0")["error"] is None
    assert s.finish("someone else", [("b1", 1, None)]) == []          # not their claim: nothing changes
    assert s.document("b1")["status"] == "pending"


def test_pages_are_in_the_order_accepted_and_a_re_added_document_moves_to_the_end(index_file):
    s = _store(index_file)
    s.add(_docs(5))
    s.add([NewDocument("d1", "new text", "T", {"k": 1})])
    ids = [d["id"] for d in s.documents(limit=10)["documents"]]
    assert ids == ["d0", "d2", "d3", "d4", "d1"]
    assert s.document("d1")["text"] == "new text" and s.document("d1")["title"] == "T"
    assert [d["id"] for d in s.documents(offset=4, limit=10)["documents"]] == ["d1"]


def test_metadata_not_given_is_claimed_as_none_and_a_re_add_without_it_keeps_the_accepted_one(index_file):
    s = _store(index_file)
    s.add([NewDocument("x", "one", None, None), NewDocument("y", "two", None, {"k": 1})])
    assert {d["id"]: d["metadata"] for d in s.claim("me", 5)} == {"x": None, "y": {"k": 1}}
    _indexed(index_file, ["x", "y"])
    s.finish("me", [("x", 1, None), ("y", 1, None)])
    s.add([NewDocument("y", "two again", None, None)])
    assert s.document("y")["metadata"] == {"k": 1} and s.claim("me", 5)[0]["metadata"] == {"k": 1}
    assert s.document("x")["metadata"] == {}


def test_claims_of_a_dead_owner_are_reset_and_a_live_owners_are_kept(index_file):
    s = _store(index_file)
    s.add(_docs(4))
    me = str(Owner.current())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = str(Owner(Owner.current().host, Owner.current().boot, int(dead.stdout), "1"))
    s.claim(me, 2)
    s.claim(gone, 2)
    s.delete(["d3"])                                   # deleted while the dead owner held it
    assert s.reset_stale(lambda o: owner_alive(o)) == 2
    assert s.counts() == {"pending": 1, "processing": 2, "indexed": 0, "failed": 0}
    assert s.document("d2")["status"] == "pending"
    assert s.unpurged() == ["d3"]                      # left for the index to forget


def test_owners(tmp_path):
    me = Owner.current()
    assert owner_alive(str(me), me)
    assert Owner.parse(str(me)) == me
    assert not owner_alive(str(Owner(me.host, "another-boot", me.pid, me.start)), me)
    assert not owner_alive(str(Owner(me.host, me.boot, me.pid, "12345678901")), me)    # pid reused
    assert owner_alive(str(Owner("another-host", me.boot, 1, "0")), me)                 # cannot tell: kept
    assert not owner_alive("garbage", me)
    assert os.getpid() == me.pid


def test_check_documents_keeps_fields_and_defaults():
    (d,) = check_documents([{"text": "body", "title": "T", "metadata": {"a": [1, "x"]}}])
    assert d.indexed_text == "T\nbody" and d.metadata == {"a": [1, "x"]} and d.id.startswith("doc-")
    with pytest.raises(ValueError, match="one line"):
        check_documents([{"text": "body", "title": "two\nlines"}])


def test_a_write_the_database_aborted_for_a_conflict_is_tried_again_whole(index_file):
    s = _store(index_file)
    s.tables.retry_on = (RuntimeError,)                  # PostgreSQL: DeadlockDetected, SerializationFailure
    real, fails = s.tables.new_job, [2]

    def flaky(c, *a):
        seq = real(c, *a)
        if fails[0]:
            fails[0] -= 1
            raise RuntimeError("deadlock detected")     # after writing: the transaction is rolled back
        return seq
    s.tables.new_job = flaky
    job = s.add(_docs(3))
    assert s.job(job)["progress"]["total"] == 3
    assert s.documents()["total"] == 3 and fails == [0]
    with s.tables.read() as c:
        assert c.execute("SELECT COUNT(*) FROM service_jobs").fetchone()[0] == 1


def test_requeue_makes_an_indexed_document_pending_and_a_claimed_one_pending_when_its_claim_ends(index_file):
    s = _store(index_file)
    s.add(_docs(4))
    _indexed(index_file, ["d0", "d1"])
    s.finish("me", [(d["id"], d["rev"], None) for d in s.claim("me", 2)])      # d0, d1 indexed
    s.claim("me", 1)                                                            # d2 claimed
    s.delete(["d3"])
    assert s.requeue(["d0", "d2", "d3", "nope"]) == ["d0", "d2"]               # tombstones and unknowns: left
    assert s.document("d0")["status"] == "pending" and s.document("d1")["status"] == "indexed"
    assert s.document("d2")["status"] == "pending"            # shown pending: the claim's end will not index it
    assert s.finish("me", [("d2", 1, None)]) == []
    assert s.document("d2")["status"] == "pending"
    assert [d["id"] for d in s.claim("me", 5)] == ["d0", "d2"]
