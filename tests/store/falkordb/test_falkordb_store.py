"""The FalkorDB store beyond the storage contract (issue 42, items 1, 2 and 5): a writer killed with -9 in
the middle of a transaction leaves the previous version readable and its copy is discarded; a snapshot
keeps reading its version while another connection commits twice; the vector indexes are rebuilt on open
when their count is off; the folder remembers its backend and its server; errors that name the address,
the operation, never the password."""
from __future__ import annotations

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


def test_vector_indexes_are_made_by_the_first_write_and_rebuilt_when_their_count_is_off(tmp_path, config,
                                                                                     monkeypatch):
    from hippo_engine.store.falkordb import vectors
    db = open_index_store(tmp_path, config)
    try:
        v = np.eye(4, dtype=np.float32)
        db.embedding_store("entity", 4).upsert(["e1", "e2", "e3", "e4"], ["a", "b", "c", "d"], v)
        assert vectors.vector_indexes(db) == {("Entity", 4): 4}
        assert vectors.check_vector_indexes(db) == []
        monkeypatch.setattr(vectors, "vector_indexes", lambda d: {("Entity", 4): 5})   # as after a bad replay
        assert vectors.check_vector_indexes(db) == ["Entity"]
        monkeypatch.undo()
        hits = db.q("search", "CALL db.idx.vector.queryNodes('Entity', 'embedding', 4, vecf32($q)) YIELD node "
                    "RETURN node.id", q=[0.0, 1.0, 0.0, 0.0])
        assert [r[0] for r in hits][:1] == ["e2"] and len(hits) == 4
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
