"""The FalkorDB store beyond the storage contract (issue 42, items 1, 2 and 5): a writer killed with -9 in
the middle of a transaction leaves the previous version readable and its copy is discarded; a snapshot
keeps reading its version while another connection commits twice; a write that deletes vectors leaves an
exact vector index and a reopen rebuilds nothing, while a vector index missing or made for another dimension
is rebuilt on open; the folder remembers its backend and its server; errors that name the address,
the operation, never the password."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hippo_engine.config import ConfigError, HippoConfig
from hippo_engine.store.base import StoreError
from hippo_engine.store.opening import open_index_store, recorded_storage

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def config(storage_settings) -> HippoConfig:
    return HippoConfig(storage_backend="falkordb", show_progress=False, **storage_settings("falkordb"))


def _writer_killed_mid_transaction(folder: Path, config: HippoConfig) -> None:
    """Another process opens the index, writes inside a transaction and is killed (-9) before the commit."""
    code = textwrap.dedent(f"""
        import sys, time
        from hippo_engine.config import HippoConfig
        from hippo_engine.store.opening import open_index_store
        db = open_index_store({str(folder)!r}, HippoConfig(storage_backend="falkordb", show_progress=False,
                              falkordb_server={config.falkordb_server!r}))
        with db.transaction():
            db.set_meta("version", "2")
            db.put_passage_triples("p2", [("d", "e", "f")])
            print("written", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_writer_killed_mid_transaction_leaves_the_previous_version(tmp_path, config):
    db = open_index_store(tmp_path, config)
    try:
        db.set_meta("version", "1")
        db.put_passage_triples("p1", [("a", "b", "c")])
        _writer_killed_mid_transaction(tmp_path, config)
        graph = db.graph
        assert graph.client.exists(graph.tx_name)                       # its copy is left behind...
        assert db.get_meta("version") == "1" and set(db.load_passage_triples()) == {"p1"}
        graph.client.delete(graph._keys["writer"])                       # ...until its lock expires
        db.set_meta("version", "3")                                      # the next writer starts afresh
        assert db.get_meta("version") == "3" and set(db.load_passage_triples()) == {"p1"}
        assert not graph.client.exists(graph.tx_name)
    finally:
        db.close()


def test_a_snapshot_keeps_its_version_across_two_commits_and_the_copy_goes_after(tmp_path, config):
    reader, writer = open_index_store(tmp_path, config), open_index_store(tmp_path, config)
    try:
        writer.set_meta("version", "1")
        with reader.snapshot():
            writer.set_meta("version", "2")
            writer.set_meta("version", "3")
            assert reader.get_meta("version") == "1"
            kept = [k for k in reader.graph.client.scan_iter(match=f"{reader.graph.name}.v*")]
            assert len(kept) == 1                                        # only the version a lease names
        assert reader.get_meta("version") == "3"
        assert not list(reader.graph.client.scan_iter(match=f"{reader.graph.name}.v*"))
        with pytest.raises(StoreError, match="inside a snapshot"), reader.snapshot(), reader.transaction():
            pass
    finally:
        reader.close()
        writer.close()


def _nearest(db, vector: np.ndarray, k: int) -> list[str]:
    """The ids the graph's Entity vector index finds nearest ``vector`` (as a user's Cypher asks)."""
    return [r[0] for r in db.q("search", "CALL db.idx.vector.queryNodes('Entity', 'embedding', $k, vecf32($q)) "
                               "YIELD node, score RETURN node.id ORDER BY score", k=k, q=vector.tolist())]


def _rebuild_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]


def test_deleted_vectors_leave_an_exact_vector_index_and_a_reopen_rebuilds_nothing(tmp_path, config, caplog):
    from hippo_engine.ids import entity_id
    from hippo_engine.store.falkordb.vector_index import vector_indexes
    rng = np.random.default_rng(7)
    names = [f"entity {i}" for i in range(120)]
    keys, vecs = [entity_id(n) for n in names], rng.standard_normal((120, 4)).astype(np.float32)
    gone = set(keys[::3])                         # 40 deleted, two of them keeping their nodes for a fact
    db = open_index_store(tmp_path / "idx", config)
    try:
        db.put_passage_triples("p1", [(names[0], "knows", names[3])])
        db.embedding_store("entity", 4).upsert(keys, names, vecs)
        assert db.vector_rebuilds == []
        db.embedding_store("entity", 4).delete(gone)
        assert db.vector_rebuilds == [("Entity", "vectors removed")]       # the deleting commit, once
    finally:
        db.close()
    keep = [i for i, k in enumerate(keys) if k not in gone]
    fresh = open_index_store(tmp_path / "fresh", config)
    with caplog.at_level(logging.INFO, logger="hippo_engine.store.falkordb"):
        db = open_index_store(tmp_path / "idx", config)
    try:
        fresh.embedding_store("entity", 4).upsert([keys[i] for i in keep], [names[i] for i in keep], vecs[keep])
        assert db.vector_rebuilds == [] and _rebuild_lines(caplog) == []
        live = db.q("count", "MATCH (n:Entity) WHERE n.embedding IS NOT NULL RETURN count(n)")[0][0]
        assert live == 80 and vector_indexes(db) == {("Entity", 4): 82}   # what the count check rebuilt on
        unit = vecs[keep] / np.linalg.norm(vecs[keep], axis=1, keepdims=True)
        for q in np.vstack([vecs[::5], rng.standard_normal((10, 4)).astype(np.float32)]):
            truth = [keys[keep[i]] for i in np.argsort(-(unit @ q), kind="stable")[:5]]
            assert _nearest(db, q, 5) == _nearest(fresh, q, 5) == truth      # 4 dimensions: HNSW finds them all
    finally:
        db.close()
        fresh.close()


def _by_hand(db, *statements: str) -> None:
    """Run ``statements`` on the index's graph as a user's client would, past the store's transactions."""
    import falkordb
    graph = falkordb.Graph(db.graph.client, db.graph.name)
    for statement in statements:
        graph.query(statement)


def test_a_vector_index_dropped_or_made_for_another_dimension_by_hand_is_rebuilt_on_open(tmp_path, config, caplog):
    from hippo_engine.store.falkordb.vector_index import vector_indexes
    drop = "DROP VECTOR INDEX FOR (n:Entity) ON (n.embedding)"
    db = open_index_store(tmp_path, config)
    try:
        assert vector_indexes(db) == {}
        db.embedding_store("entity", 4).upsert(["e1", "e2", "e3", "e4"], list("abcd"), np.eye(4, dtype=np.float32))
        assert vector_indexes(db) == {("Entity", 4): 4}                    # made by the first write
        _by_hand(db, drop)
        assert vector_indexes(db) == {}
    finally:
        db.close()
    three = ("CREATE VECTOR INDEX FOR (n:Entity) ON (n.embedding) OPTIONS {dimension: 3, similarityFunction: "
             "'cosine'}")
    for reason, after in (("missing", (drop, three)), ("made for 3 dimensions, the vectors have 4", ())):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hippo_engine.store.falkordb"):
            db = open_index_store(tmp_path, config)
        try:
            assert db.vector_rebuilds == [("Entity", reason)] and len(_rebuild_lines(caplog)) == 1
            assert vector_indexes(db) == {("Entity", 4): 4}
            assert _nearest(db, np.array([0.0, 1.0, 0.0, 0.0]), 4)[0] == "e2"
            _by_hand(db, *after)                                            # then made for 3 dimensions
        finally:
            db.close()
    db = open_index_store(tmp_path, config)
    try:
        assert db.vector_rebuilds == []                                     # repaired, sound since
    finally:
        db.close()


def test_the_folder_records_its_backend_and_server(tmp_path, config):
    open_index_store(tmp_path, config).close()
    rec = recorded_storage(tmp_path)
    assert rec is not None and rec["storage_backend"] == "falkordb" and rec["postgres_schema"].startswith("hippo_")
    with pytest.raises(StoreError, match="lives on the FalkorDB server .*give that server"):
        open_index_store(tmp_path, config.replace(falkordb_server=None))


def test_errors_name_the_address_and_the_operation_never_the_password(tmp_path, config):
    from hippo_engine.store.falkordb.address import ServerUnreachable
    from hippo_engine.store.falkordb.graph import CypherError
    url = "falkordb://:s3cret-pw@127.0.0.1:1/graph_x"
    with pytest.raises(ServerUnreachable) as got:
        open_index_store(tmp_path / "a", config.replace(falkordb_server=url))
    assert "127.0.0.1:1" in str(got.value) and "start" in str(got.value) and "s3cret" not in str(got.value)
    with pytest.raises(ConfigError) as bad:
        open_index_store(tmp_path / "b", config.replace(falkordb_server="falkordb://:s3cret-pw@127.0.0.1:1/no.dots"))
    assert "graph name" in str(bad.value) and "s3cret" not in str(bad.value)
    assert "s3cret" not in repr(config.replace(falkordb_server=url))
    db = open_index_store(tmp_path / "c", config)
    try:
        with pytest.raises(CypherError, match="list the things failed"):
            db.q("list the things", "MATCH (n RETURN n")
    finally:
        db.close()


def test_the_job_tables_read_the_committed_registry_and_metadata_of_the_graph(tmp_path, config):
    from hippo_engine.store.registry import get_backend
    backend = get_backend("falkordb")
    db = open_index_store(tmp_path / "idx", config)
    tables = backend.job_tables(db, config)
    try:
        db.put_documents({"b": ["p1"], "a": ["p2"]})
        db.put_document_metadata({"a": {"lang": "en"}})
        with db.transaction():
            db.put_documents({"c": ["p3"]})                     # not committed yet: not seen by the job tables
            with tables.read() as c:
                assert [r[0] for r in tables.x(c, "SELECT doc_id FROM {r} ORDER BY seq").fetchall()] == ["b", "a"]
                assert tables.x(c, "SELECT doc_id, metadata FROM {m}").fetchall() == [("a", '{"lang":"en"}')]
        with tables.read() as c:
            assert [r[0] for r in tables.x(c, "SELECT doc_id FROM {r} ORDER BY seq").fetchall()] == ["b", "a", "c"]
    finally:
        tables.close()
        db.close()
    shared = backend.shared(tmp_path, None)
    try:
        with shared.closed_tables(tmp_path / "idx") as t:
            assert t is not None and {"r", "d", "m", "documents"} <= t.have
            assert t.run("SELECT COUNT(*) FROM {documents} WHERE pos = 0", ()).fetchone()[0] == 3
            assert t.run("SELECT COUNT(*) FROM {r}", ()).fetchone()[0] == 3
            assert t.run("SELECT COUNT(*) FROM {d}", ()).fetchone()[0] == 0      # nothing queued
    finally:
        shared.close()
