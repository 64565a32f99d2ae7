"""Embedding stores: float32/float16 storage, memory mapping, crash safety, deletion."""
from __future__ import annotations

import numpy as np
import pytest
from fakes import NgramEncoder, NoCallLLM
from helpers import CORPUS, assert_same, crash_mid_index, make_rag, snapshot

from hippo_engine import HippoRAG
from hippo_engine.config import ConfigError, HippoConfig
from hippo_engine.store import IndexDB, SQLiteEmbeddingStore, StoreError

DIM = 16


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


KEYS = [f"entity-{i:03d}" for i in range(40)]
VECS = unit_rows(len(KEYS))


def open_store(path, **kw) -> SQLiteEmbeddingStore:
    return SQLiteEmbeddingStore(IndexDB(path / "index.sqlite"), "entity", DIM, **kw)


def fill(store, order=None, chunks=3):
    order = list(range(len(KEYS))) if order is None else order
    for part in np.array_split(np.array(order), chunks):
        with store.db.transaction():
            store.upsert([KEYS[i] for i in part], [f"text {i}" for i in part], VECS[part])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mmap", [False, True])
def test_roundtrip_sorted_and_reload(tmp_path, dtype, mmap):
    s = open_store(tmp_path, vector_dtype=dtype, mmap=mmap)
    rng = np.random.default_rng(1)
    fill(s, order=list(rng.permutation(len(KEYS))))
    assert list(s.ids) == sorted(KEYS)
    expect = VECS if dtype == "float32" else VECS.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(s.matrix, np.float32), expect)
    assert s.text(KEYS[5]) == "text 5" and KEYS[5] in s and len(s) == len(KEYS)
    # what is in memory after the writes equals what a fresh load reads
    again = open_store(tmp_path, vector_dtype=dtype, mmap=mmap)
    np.testing.assert_array_equal(np.asarray(again.matrix, np.float32), expect)
    assert list(again.ids) == list(s.ids)
    if mmap:
        assert isinstance(again.matrix, np.memmap) and again.matrix.dtype == np.dtype(dtype)
        assert again.nbytes() == {"ram": 0, "mapped": len(KEYS) * DIM * np.dtype(dtype).itemsize}
        assert not again.matrix.flags.writeable
    else:
        assert again.matrix.dtype == np.float32 and not isinstance(again.matrix, np.memmap)
        assert again.nbytes()["mapped"] == 0


def test_float16_halves_the_blobs(tmp_path):
    sizes = {}
    for dtype in ("float32", "float16"):
        s = open_store(tmp_path / dtype, vector_dtype=dtype)
        fill(s)
        sizes[dtype] = s.db.conn.execute("SELECT SUM(LENGTH(vec)) FROM store_entity").fetchone()[0]
    assert sizes == {"float32": len(KEYS) * DIM * 4, "float16": len(KEYS) * DIM * 2}


def test_mixed_dtypes_readable(tmp_path):
    s = open_store(tmp_path, vector_dtype="float32")
    with s.db.transaction():
        s.upsert(KEYS[:10], ["a"] * 10, VECS[:10])
    s16 = open_store(tmp_path, vector_dtype="float16")
    with s16.db.transaction():
        s16.upsert(KEYS[10:20], ["b"] * 10, VECS[10:20])
    again = open_store(tmp_path)
    np.testing.assert_array_equal(again.matrix[:10], VECS[:10])
    np.testing.assert_array_equal(again.matrix[10:20], VECS[10:20].astype(np.float16).astype(np.float32))


def test_wrong_dimension_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s)
    with pytest.raises(StoreError, match="16-dim"):
        SQLiteEmbeddingStore(IndexDB(tmp_path / "index.sqlite"), "entity", 24)


def test_incremental_equals_batch_and_no_copies(tmp_path):
    one = open_store(tmp_path / "one")
    fill(one, chunks=1)
    inc = open_store(tmp_path / "inc")
    fill(inc, order=list(range(len(KEYS)))[::-1], chunks=5)
    np.testing.assert_array_equal(one.matrix, inc.matrix)
    assert list(one.ids) == list(inc.ids)
    # the store holds one matrix and nothing that references the blobs
    assert one.matrix.base is None or not isinstance(one.matrix.base, bytes)
    assert one.nbytes() == {"ram": len(KEYS) * DIM * 4, "mapped": 0}


@pytest.mark.parametrize("mmap", [False, True])
def test_upsert_replaces_and_delete_removes(tmp_path, mmap):
    s = open_store(tmp_path, mmap=mmap)
    fill(s)
    with s.db.transaction():
        s.upsert([KEYS[3]], ["new"], VECS[7:8])
        s.delete([KEYS[0], KEYS[10], "entity-missing"])
    ref = [k for k in sorted(KEYS) if k not in (KEYS[0], KEYS[10])]
    assert list(s.ids) == ref and s.text(KEYS[3]) == "new" and KEYS[0] not in s
    np.testing.assert_array_equal(s.matrix[s.row(KEYS[3])], VECS[7])
    again = open_store(tmp_path, mmap=mmap)
    assert list(again.ids) == ref
    np.testing.assert_array_equal(np.asarray(again.matrix), np.asarray(s.matrix))
    if mmap:  # one sidecar file: the committed generation's
        files = sorted(p.name for p in (tmp_path / "vectors").iterdir())
        assert files == [again.sidecar_path().name]
    with s.db.transaction():
        s.delete(list(s.ids))
    assert len(s) == 0 and s.matrix.shape == (0, DIM)
    assert len(open_store(tmp_path, mmap=mmap)) == 0


def test_rollback_keeps_previous_state_and_file(tmp_path):
    s = open_store(tmp_path, mmap=True)
    fill(s, order=list(range(20)), chunks=1)
    before = np.array(s.matrix)
    committed = s.sidecar_path()
    with pytest.raises(RuntimeError):
        with s.db.transaction():
            s.upsert(KEYS[20:], ["x"] * 20, VECS[20:])
            s.delete(KEYS[:5])
            raise RuntimeError("simulated crash")
    s.reload()
    assert list(s.ids) == KEYS[:20]
    np.testing.assert_array_equal(s.matrix, before)
    assert s.sidecar_path() == committed and isinstance(s.matrix, np.memmap)


def test_crash_between_commit_and_file_write(tmp_path, monkeypatch):
    """The rows are committed but the process dies before the new file is written: the
    next load sees a missing file for the committed generation and rebuilds it."""
    s = open_store(tmp_path, mmap=True)
    fill(s, order=list(range(20)), chunks=1)

    def die(*a, **k):
        raise OSError("disk gone")

    monkeypatch.setattr(SQLiteEmbeddingStore, "_write_sidecar", die)
    with s.db.transaction():
        s.upsert(KEYS[20:], ["x"] * 20, VECS[20:])
    # the writer keeps a valid in-RAM matrix
    assert len(s) == len(KEYS) and not isinstance(s.matrix, np.memmap)
    np.testing.assert_array_equal(s.matrix, VECS)
    monkeypatch.undo()
    again = open_store(tmp_path, mmap=True)
    assert isinstance(again.matrix, np.memmap)
    np.testing.assert_array_equal(again.matrix, VECS)


def test_torn_stale_and_stray_files_are_ignored(tmp_path):
    s = open_store(tmp_path, mmap=True)
    fill(s)
    path = s.sidecar_path()
    vec_dir = tmp_path / "vectors"
    # a torn temporary file of an interrupted write, and a file of an uncommitted generation
    (vec_dir / (path.name + ".tmp999")).write_bytes(b"\x93NUMPY garbage")
    np.save(vec_dir / f"entity.{int(path.name.split('.')[1]) + 1}.float32.npy", np.zeros((3, DIM), np.float32))
    # the committed generation's file truncated (as by a crash without fsync)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    again = open_store(tmp_path, mmap=True)
    np.testing.assert_array_equal(again.matrix, VECS)
    assert sorted(p.name for p in vec_dir.iterdir()) == [path.name]
    # a file of the right generation but the wrong shape is rebuilt too
    np.save(path, np.zeros((3, DIM), np.float32))
    np.testing.assert_array_equal(open_store(tmp_path, mmap=True).matrix, VECS)


def test_bad_dtype():
    with pytest.raises(ValueError, match="vector_dtype"):
        SQLiteEmbeddingStore(IndexDB.__new__(IndexDB), "entity", DIM, vector_dtype="bfloat16")
    with pytest.raises(ConfigError):
        HippoConfig(embedding_storage_dtype="int8")
    with pytest.raises(ConfigError):
        HippoConfig(embedding_mmap="yes")


# ------------------------------------------------------------------ through HippoRAG
QUESTIONS = ["Where was Ilse Marrow born?", "Who founded Tamsin College?",
             "What is the capital of Kaldavia?", "Who married Oren Pike?"]


def ranking(rag):
    sols = rag.retrieve(QUESTIONS)
    return [s.docs[:5] for s in sols], [np.asarray(s.doc_scores[:5]) for s in sols]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mmap_and_dtype_keep_retrieval(tmp_path, dtype):
    base = make_rag(tmp_path / "base", use_filter=False)
    base.index(CORPUS)
    docs_ref, scores_ref = ranking(base)
    rag = make_rag(tmp_path / dtype, use_filter=False, embedding_storage_dtype=dtype, embedding_mmap=True)
    rag.index(CORPUS[:5])
    rag.index(CORPUS[5:])
    docs, scores = ranking(rag)
    assert docs == docs_ref
    for a, b in zip(scores, scores_ref, strict=False):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 if dtype == "float32" else 2e-3)
    snap = snapshot(rag)
    rag.close()
    # reopened: memory-mapped, same index, same ranking
    again = HippoRAG(tmp_path / dtype, llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False,
                     synonymy_threshold=0.6, use_filter=False, embedding_storage_dtype=dtype,
                     embedding_mmap=True)
    assert_same(snap, snapshot(again))
    assert all(isinstance(s.matrix, np.memmap) for s in again.index_state.stores.values())
    docs2, scores2 = ranking(again)
    assert docs2 == docs
    for a, b in zip(scores2, scores, strict=False):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    # delete through the facade with memory-mapped stores
    again.delete(CORPUS[5:])
    only_a = make_rag(tmp_path / "only_a", use_filter=False, embedding_storage_dtype=dtype)
    only_a.index(CORPUS[:5])
    assert_same(snapshot(only_a), snapshot(again))


def test_crash_mid_index_with_mmap_keeps_previous_state(tmp_path, monkeypatch):
    rag = make_rag(tmp_path, embedding_storage_dtype="float16", embedding_mmap=True)
    rag.index(CORPUS[:4])
    before = snapshot(rag)
    crash_mid_index(rag, CORPUS[4:], monkeypatch)
    assert_same(before, snapshot(rag))
    assert all(isinstance(s.matrix, np.memmap) for s in rag.index_state.stores.values())
    reopened = make_rag(tmp_path, embedding_storage_dtype="float16", embedding_mmap=True)
    assert_same(before, snapshot(reopened))
    reopened.index(CORPUS[4:])
    full = make_rag(tmp_path / "full", embedding_storage_dtype="float16")
    full.index(CORPUS)
    assert_same(snapshot(full), snapshot(reopened))


def test_foreign_sqlite_file_is_refused_untouched(tmp_path):
    import hashlib
    import sqlite3

    import pytest

    from hippo_engine.store import IndexDB, StoreError

    path = tmp_path / "index.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'Ada')")
    con.commit()
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match="not a hippo-engine index") as e:
        IndexDB(path)
    assert str(path) in str(e.value) and "customers" in str(e.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    garbage = tmp_path / "g" / "index.sqlite"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00\xffnot sqlite at all" * 100)
    with pytest.raises(StoreError, match=str(garbage)):
        IndexDB(garbage)


def test_foreign_sqlite_file_in_save_dir_is_refused_by_the_facade_writing_nothing(tmp_path):
    import hashlib
    import os
    import sqlite3

    import pytest
    from helpers import make_rag

    from hippo_engine.store import StoreError

    path = tmp_path / "index.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    con.commit()
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError) as e:
        make_rag(tmp_path)
    assert str(path) in str(e.value) and "invoices" in str(e.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(os.listdir(tmp_path)) == ["index.sqlite"]          # no graph, lock or results file beside it


def test_sidecar_cleanup_spares_a_live_processs_temp_file(tmp_path):
    """A new generation's files replace the old ones, but a ``.tmp<pid>`` another live process is
    still writing is left alone (its rename would fail); a dead process's temp goes."""
    import subprocess
    import sys
    s = open_store(tmp_path, mmap=True)
    fill(s, chunks=1)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        theirs = s.mmap_dir / f"entity.99.float32.npy.tmp{live.pid}"
        orphan = s.mmap_dir / f"entity.98.float32.npy.tmp{dead.pid}"
        old = s.mmap_dir / "entity.97.float32.npy"
        for p in (theirs, orphan, old):
            p.write_bytes(b"x")
        with s.db.transaction():
            s.upsert(["extra"], ["extra text"], VECS[:1])
        assert s.matrix.shape[0] == len(KEYS) + 1
        assert theirs.exists() and not orphan.exists() and not old.exists()
    finally:
        live.kill()
        live.wait()
