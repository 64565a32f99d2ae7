"""Atomic writes (fsync, rename, folder fsync) and the clean-up of their orphaned temp files."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import CORPUS, make_rag

from hippo_engine.store.files import is_temp_name, remove_orphan_temps
from hippo_engine.store.lock import IndexLockedError, WriterLock
from hippo_engine.system import atomic_write, atomic_write_text


def _age(path, seconds=3600):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(a, b):
        events.append("rename")
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write_text(tmp_path / "f.json", "héllo")
    assert events == ["fsync file", "rename", "fsync dir"]
    assert (tmp_path / "f.json").read_text(encoding="utf-8") == "héllo"
    assert os.listdir(tmp_path) == ["f.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "graph.npz"
    target.write_bytes(b"old")

    def fail(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, fail)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["graph.npz"]


def test_temp_names():
    assert is_temp_name(".graph.npz.abc_1234.tmp") and is_temp_name("graph.npzk3j4h5g6.tmp")
    assert is_temp_name(".openie_results_ner_m.json.a1b2c3d4.tmp")
    for name in ("graph.npz", "index.sqlite", "index.sqlite-wal", "write.lock", ".tmp", "notes.tmp",
                 ".graph.npz.tmp", "x.tmp"):
        assert not is_temp_name(name), name


HOLDER = textwrap.dedent("""
    import fcntl, sys, time
    f = open(sys.argv[1], "ab")
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def writer_of(tmp_path):
    """A live process holding a temp file's flock, as atomic_write does while it writes."""
    procs = []

    def start(path):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.communicate("\n", timeout=30)


def test_only_orphans_are_removed(tmp_path, writer_of):
    orphan, legacy = tmp_path / ".graph.npz.aaaaaaaa.tmp", tmp_path / "graph.npzbbbbbbbb.tmp"
    fresh, live = tmp_path / ".graph.npz.cccccccc.tmp", tmp_path / ".openie_results_ner_m.json.dddddddd.tmp"
    keep = [tmp_path / n for n in ("graph.npz", "index.sqlite", "notes.tmp")]
    for p in (orphan, legacy, fresh, live, *keep):
        p.write_bytes(b"x")
    for p in (orphan, legacy, live, *keep):
        _age(p)
    writer_of(live)
    assert sorted(remove_orphan_temps(tmp_path)) == sorted([orphan, legacy])
    assert all(p.exists() for p in (fresh, live, *keep))


def test_opening_for_writing_removes_orphans_but_not_a_live_writers_temp(tmp_path, writer_of):
    save_dir = tmp_path / "idx"
    rag = make_rag(save_dir)
    rag.index(CORPUS[:2])
    orphans = [save_dir / "graph.npz0a1b2c3d.tmp", save_dir / f".{rag.openie_path.name}.q9w8e7r6.tmp"]
    live = save_dir / ".graph.npz.zzzzzzzz.tmp"
    for p in (*orphans, live):
        p.write_bytes(b"left by a killed writer")
        _age(p)
    holder = writer_of(live)
    other = WriterLock(save_dir, timeout=5)
    with other.held():                                       # another writer holds the index
        blocked = make_rag(save_dir, write_lock_timeout=0.2)
        with pytest.raises(IndexLockedError):
            blocked.index(CORPUS[2:3])
        assert all(p.exists() for p in (*orphans, live))     # nothing touched without the lock
    assert make_rag(save_dir).graph_stats()["passage_nodes"] == 2
    rag.index(CORPUS[2:4])                                   # holds the lock: orphans go
    assert not any(p.exists() for p in orphans)
    assert live.exists()                                     # its writer is alive
    holder.communicate("\n", timeout=30)
    rag.delete(CORPUS[3:4])
    assert not live.exists()                                 # its writer is gone: an orphan now
    assert not [n for n in os.listdir(save_dir) if is_temp_name(n)]
