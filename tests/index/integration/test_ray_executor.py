"""Indexing on a real local Ray cluster (a head and 2 worker nodes on 127.0.0.1) into a real embedded
PostgreSQL, with the real encoder and spaCy: the index equals a single-process one (stores, graph,
synonymy, documents, rankings), a rerun skips what is committed, a worker killed mid-job loses and
duplicates nothing, LLM extraction runs on the workers against an OpenAI-compatible server, the
cluster listens on 127.0.0.1 only and leaves no process behind."""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from helpers import require_postgres

pytest.importorskip("ray")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

from hippo_engine import HippoRAG  # noqa: E402
from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index  # noqa: E402
from hippo_engine.index.distributed import LocalCluster, RayExecutor  # noqa: E402

NARRATIVEQA = Path(__file__).resolve().parents[4] / "shared" / "data" / "narrativeqa" / \
    "narrativeqa_dev_10_doc_corpus.json"
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


@pytest.fixture(scope="module")
def docs() -> list[str]:
    if not NARRATIVEQA.exists():
        pytest.skip(f"NarrativeQA corpus not found at {NARRATIVEQA}")
    data = json.loads(NARRATIVEQA.read_text(encoding="utf-8"))[:40]
    return [f"{d['title']}\n{d['text']}" for d in data]


@pytest.fixture(scope="module")
def pg_dsn():
    """An embedded PostgreSQL server for this module (stopped and removed at the end)."""
    require_postgres()
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    base = Path(tempfile.mkdtemp(prefix="hippo-pgtest-"))
    if os.geteuid() == 0:
        base.chmod(0o711)      # the server's user must reach its data directory
    server = EmbeddedPostgres(base / "pg")
    try:
        yield server.start()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    """The local cluster; at the end every process it started must be gone."""
    import ray
    c = LocalCluster(2).start()
    seen = c.processes()
    try:
        yield c
    finally:
        ray.shutdown()
        seen += c.processes()
        c.stop()
        left = [p.pid for p in seen if p.is_running() and p.status() != "zombie"]
        assert not left, f"cluster processes still running: {left}"


def _rag(path: Path, dsn: str, **kw) -> HippoRAG:
    return HippoRAG(path, dsn=dsn, extractor=kw.pop("extractor", "ner"), show_progress=False, **kw)


def _reopened(path: Path, dsn: str, queries: list[str], **kw) -> tuple[dict, list]:
    rag = _rag(path, dsn, **kw)
    try:
        sols = rag.retrieve(queries, num_to_retrieve=10)
        return snapshot_index(rag), [(s.docs, [float(x).hex() for x in s.doc_scores]) for s in sols]
    finally:
        rag.close()


@pytest.fixture(scope="module")
def single(tmp_path_factory, pg_dsn, docs):
    """The single-process index of ``docs`` (snapshot and rankings after a reopen)."""
    path = tmp_path_factory.mktemp("single")
    rag = _rag(path, pg_dsn)
    rag.index(docs)
    rag.close()
    return _reopened(path, pg_dsn, _queries(docs))


def _queries(docs: list[str]) -> list[str]:
    return [d.split("\n", 1)[1].split(". ")[0] for d in docs[::8]]


def test_cluster_listens_on_loopback_only(cluster):
    found = cluster.listeners()
    assert found and {ip for ip, _, _ in found} <= LOOPBACK
    assert len(cluster.nodes) == 2


def test_a_worker_killed_mid_job_leaves_the_single_process_index_and_a_rerun_skips_it(tmp_path, pg_dsn, cluster,
                                                                                     docs, single, monkeypatch):
    """One run on the cluster with an indexing worker killed after the first results: Ray retries its
    batch, nothing is lost or duplicated, the index equals the single-process one (stores, graph,
    rankings), every vector came from a worker, and a rerun finds everything committed."""
    from hippo_engine.index.distributed import committer as committer_module
    killed: list[int] = []
    arrive = committer_module.Committer.arrive

    def arrive_then_kill(self, rows):
        arrive(self, rows)
        if not killed:                                     # after the first results: kill a busy worker
            victims = cluster.worker_processes("ExtractEncodeWorker")
            assert victims, "no indexing worker process found"
            victims[0].send_signal(signal.SIGKILL)
            killed.append(victims[0].pid)

    monkeypatch.setattr(committer_module.Committer, "arrive", arrive_then_kill)
    rag = _rag(tmp_path / "kill", pg_dsn, executor=RayExecutor(cluster.address, batch_size=4))
    report = rag.index(docs)
    stats = report["ray"]
    assert killed and report["added"] == len(docs) and len(report["documents"]["added"]) == len(docs)
    assert stats["committed_passages"] == len(docs)
    assert stats["driver_encoded"] == 0                     # every vector came from a worker
    assert sum(w["passages"] for w in stats["per_worker"].values()) >= len(docs) and stats["commits"] >= 1
    monkeypatch.undo()
    assert rag.index(docs) == {"added": 0}                  # a rerun: everything is committed
    rag.close()
    snap, ranks = _reopened(tmp_path / "kill", pg_dsn, _queries(docs))
    assert diff_snapshots(single[0], snap) == []
    assert ranks == single[1]


def test_llm_extraction_runs_on_the_workers_against_an_openai_compatible_server(tmp_path, pg_dsn, cluster, docs):
    from helpers import toy_respond
    from openai_server import FakeOpenAIServer
    part = docs[:8]
    with FakeOpenAIServer(responder=toy_respond, max_requests=200) as srv:
        llm = {"extractor": "openie", "llm_model_name": "toy", "llm_base_url": srv.base_url, "use_filter": False}
        one = _rag(tmp_path / "one", pg_dsn, **llm)
        one.index(part)
        one.close()
        calls = len(srv.requests)
        assert calls == 2 * len(part)                            # NER + triples per passage
        rag = _rag(tmp_path / "ray", pg_dsn, executor=RayExecutor(cluster.address, batch_size=4), **llm)
        report = rag.index(part)
        assert report["openie_llm_passages"] == len(part) and len(srv.requests) == 2 * calls
        assert len(json.loads(rag.openie_path.read_text())["docs"]) == len(part)   # saved by the driver
        rag.close()
    a = _reopened(tmp_path / "one", pg_dsn, _queries(part), **llm)
    b = _reopened(tmp_path / "ray", pg_dsn, _queries(part), **llm)
    assert diff_snapshots(a[0], b[0]) == [] and a[1] == b[1]


def test_a_call_stopped_after_a_commit_keeps_it_and_the_cli_rerun_does_the_rest(tmp_path, pg_dsn, cluster, docs,
                                                                              single, monkeypatch, capsys):
    from hippo_engine.index.distributed import committer as committer_module
    commit = committer_module.Committer._commit
    done: list[int] = []

    def commit_once(self, ids):                            # 4 documents are committed, then the writer fails
        commit(self, ids[:4])
        done.append(4)
        raise OSError("the writer's disk is full")

    monkeypatch.setattr(committer_module.Committer, "_commit", commit_once)
    path = tmp_path / "resume"
    rag = _rag(path, pg_dsn, executor=RayExecutor(cluster.address, batch_size=8))
    with pytest.raises(OSError, match="disk is full"):
        rag.index(docs)
    rag.close()
    monkeypatch.undo()
    kept = _rag(path, pg_dsn)
    assert len(kept.index_state) == 4 and done == [4]               # the commit stays, nothing else
    kept.close()
    from hippo_engine.cli import main  # the rerun: the command line on the cluster
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"title": d.split("\n", 1)[0], "text": d.split("\n", 1)[1]} for d in docs]))
    capsys.readouterr()
    assert main(["index", str(corpus), "--save-dir", str(path), "--dsn", pg_dsn, "--extractor", "ner", "--quiet",
                 "--ray", cluster.address]) == 0
    printed = capsys.readouterr().out
    assert f"indexed {len(docs) - 4} new passage(s)" in printed and '"per_worker"' in printed   # only the rest
    snap, ranks = _reopened(path, pg_dsn, _queries(docs))
    assert diff_snapshots(single[0], snap) == [] and ranks == single[1]


def test_the_cli_without_an_address_starts_ray_on_this_machine_and_stops_it(tmp_path, docs):
    """``--ray`` alone (no RAY_ADDRESS): a Ray of its own on 127.0.0.1 in the command's process, gone after it."""
    import subprocess
    import sys
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(docs[:6]))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "index", str(corpus), "--save-dir",
                          str(tmp_path / "idx"), "--extractor", "ner", "--quiet", "--ray"],
                         capture_output=True, text=True, env=env, timeout=580)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "indexed 6 new passage(s)" in run.stdout and '"per_worker"' in run.stdout
    assert '"node_ip": "127.0.0.1"' in run.stdout


def test_long_documents_are_cut_on_the_workers_as_in_one_process(tmp_path, cluster, docs):
    """A document over chunk_size tokens is cut with the encoder's tokenizer on a worker, into the passages
    (and documents, duplicates collapsed) that the single-process split makes."""
    title = docs[0].split("\n", 1)[0]
    long = title + "\n" + " ".join(d.split("\n", 1)[1] for d in docs[:14])
    given = [long, docs[1], long, "   "]
    rag = HippoRAG(tmp_path / "split", extractor="ner", show_progress=False, chunk_size=300, chunk_overlap=20)
    meta = [None, {"u": 1}, {"u": 2}, None]     # None: none given there (the long one gets its second's)
    one = rag._split(given, None, "index", meta)
    executor = RayExecutor(cluster.address)
    batch, metas = executor._prepare(rag, given, None, meta)
    args = (rag.config.to_dict(), rag.llm_model_name, rag.embedding_model_name)
    executor._split(executor.connect(), batch, given, None, metas, args)
    rag.close()
    assert len(one.passages) > 5 and batch.passages == one.passages
    assert batch.documents == one.documents and batch.positions == one.positions and batch.skipped == one.skipped == [3]
    assert batch.metadata == one.metadata and sorted(one.metadata.values(), key=str) == [{"u": 1}, {"u": 2}]
