"""kill -9 of a process ingesting documents (``ingest_child.py``: a Memory with its worker, fake models):
at the one moment that matters for "indexed exactly once" (after the index's commit, before the statuses),
and at random moments; each time a restarted process resumes and in the end every accepted document is
indexed exactly once, its status says so, and the index equals a clean build of the same documents."""
from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from helpers import assert_same, make_rag, snapshot

from hippo_engine.service.jobs import indexed_text
from hippo_engine.service.jobstore import JobStore
from hippo_engine.store.jobs_sqlite import SQLiteJobTables

CHILD = Path(__file__).with_name("ingest_child.py")
FIRST = ["Arlen", "Bette", "Corin", "Dagny", "Emrys", "Fenna", "Gideon", "Halla", "Ivor", "Jessa"]
LAST = ["Voss", "Marrow", "Tallis", "Quell", "Brask", "Orrin", "Pike", "Sorrel"]
TOWNS = ["Velor", "Dunhaven", "Kestrel Bay", "Amberly", "Norwick", "Ostfeld"]


def corpus(n: int) -> list[dict]:
    out = []
    for i in range(n):
        who = f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
        town, other = TOWNS[i % len(TOWNS)], TOWNS[(i * 7 + 3) % len(TOWNS)]
        out.append({"id": f"k{i:03d}", "title": who,
                    "text": f"{who} was born in {town}. {who} moved to {other} in {1800 + i}."})
    return out


def indexed_count(save: Path) -> int:
    """How many documents the queue says are indexed (0 before the tables exist), read without writing."""
    try:
        with sqlite3.connect(f"file:{save / 'index.sqlite'}?mode=ro", uri=True, timeout=5) as c:
            return c.execute("SELECT COUNT(*) FROM service_documents WHERE status = 'indexed'").fetchone()[0]
    except sqlite3.Error:
        return 0


def run_child(save: Path, docs_file: Path, *extra: str, kill_after: float | None = None,
              kill_at_indexed: int | None = None, batch: int = 3) -> int:
    """Run the child to its end, or kill it ``kill_after`` seconds after its start, or as soon as the queue
    has ``kill_at_indexed`` documents indexed (then after a random pause of up to 50 ms)."""
    args = [sys.executable, str(CHILD), str(save), str(docs_file), "--batch-size", str(batch), "--chunk", "8", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    elif kill_at_indexed is not None:
        deadline = time.monotonic() + 120
        while proc.poll() is None and indexed_count(save) < kill_at_indexed and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(random.uniform(0, 0.05))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, -signal.SIGKILL), err[-3000:]
    return proc.returncode


def check_exactly_once(save: Path, docs: list[dict], tmp: Path, open_rag=None) -> None:
    store = JobStore(SQLiteJobTables(save / "index.sqlite"))
    try:
        assert store.counts() == {"pending": 0, "processing": 0, "indexed": len(docs), "failed": 0}
        page = store.documents(limit=1000)["documents"]
        assert sorted(d["id"] for d in page) == sorted(d["id"] for d in docs)
    finally:
        store.close()
    open_rag = open_rag or (lambda path: make_rag(path, use_filter=False))
    rag, clean = open_rag(save), open_rag(tmp / "clean")
    try:
        held = rag.index_state.all_documents()
        assert sorted(held) == sorted(d["id"] for d in docs)                  # each document once
        assert len(rag.index_state) == len(docs)                             # each passage once
        clean.index([indexed_text(d["text"], d["title"]) for d in docs], ids=[d["id"] for d in docs])
        assert_same(snapshot(rag), snapshot(clean))
    finally:
        rag.close()
        clean.close()


def test_killed_between_the_index_commit_and_the_statuses_the_batch_is_indexed_once(tmp_path):
    docs = corpus(8)
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    save = tmp_path / "m"
    assert run_child(save, docs_file, "--kill-after-index") == -signal.SIGKILL
    store = JobStore(SQLiteJobTables(save / "index.sqlite"))
    try:   # the first batch is in the index, its statuses still say a (now dead) worker holds it
        assert store.counts() == {"pending": 5, "processing": 3, "indexed": 0, "failed": 0}
    finally:
        store.close()
    rag = make_rag(save, use_filter=False)
    assert sorted(rag.index_state.all_documents()) == ["k000", "k001", "k002"]
    version = rag.index_state.version
    rag.close()
    assert run_child(save, docs_file, "--no-add") == 0                   # a restart resumes
    rag = make_rag(save, use_filter=False)
    # the first batch was not written again: one write per later batch (5 documents in batches of 3)
    assert int(rag.index_state.version) == int(version) + 2
    rag.close()
    check_exactly_once(save, docs, tmp_path)


def test_killed_at_random_moments_every_accepted_document_ends_indexed_exactly_once(tmp_path):
    docs = corpus(60)
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    save = tmp_path / "m"
    random.seed(23)
    kills = 0
    # first while starting and accepting documents, then at random points of the ingestion
    if run_child(save, docs_file, "--pause", "0.1", kill_after=random.uniform(0.3, 1.5)) == -signal.SIGKILL:
        kills += 1
    for _ in range(7):
        target = indexed_count(save) + random.randint(1, 7)
        if run_child(save, docs_file, "--pause", "0.1", kill_at_indexed=target) == -signal.SIGKILL:
            kills += 1
    assert run_child(save, docs_file) == 0                               # the last one finishes
    assert kills >= 5, f"only {kills} of 8 runs were killed before they finished"
    check_exactly_once(save, docs, tmp_path)


def test_with_the_real_embedder_and_ner_a_killed_batch_is_indexed_once(tmp_path):
    from importlib import resources

    from hippo_engine import HippoRAG
    sample = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [{"id": f"s{i}", **d} for i, d in enumerate(sample["corpus"])]
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    save = tmp_path / "m"
    assert run_child(save, docs_file, "--real", "--kill-after-index", batch=5) == -signal.SIGKILL
    assert run_child(save, docs_file, "--real", "--no-add", batch=5) == 0
    check_exactly_once(save, docs, tmp_path,
                       lambda path: HippoRAG(path, extractor="ner", show_progress=False))
