"""index() is linear in the number of documents and accounts for its time (issue 20, item 7);
graph.npz is written only after its transaction commits and delete() logs unknown ids briefly
(item 10). No test here times anything: they count calls and check structure."""
import logging

import pytest
from helpers import CORPUS, make_rag

from hippo_engine.datatypes import Extraction
from hippo_engine.ids import entity_id
from hippo_engine.index.graph import GraphData


class CountingExtraction(Extraction):
    """An ``Extraction`` that counts how often its ``passages`` set is built."""

    builds = 0

    @property
    def passages(self) -> set[str]:
        CountingExtraction.builds += 1
        return super().passages


class OneTriple:
    """A trivial extractor: one triple per passage, from its first and last words."""

    name = "openie"

    def extract(self, passages):
        return CountingExtraction(triples={p: [(t.split()[0], "with", t.split()[-1])] for p, t in passages.items()})


def tiny_docs(n: int) -> list[str]:
    return [f"topic{i % 7} doc {i} about topic{(3 * i + 1) % 11}" for i in range(n)]


def test_the_extraction_set_is_built_once_per_call(tmp_path):
    """The old code built the set of extracted passages once per passage (n calls, n^2 work)."""
    rag = make_rag(tmp_path)
    rag.extractor = OneTriple()
    CountingExtraction.builds = 0
    rep = rag.index(tiny_docs(60))
    assert rep["added"] == 60 and len(rag.index_state) == 60
    assert CountingExtraction.builds == 1


EXPECTED_STAGES = {"split", "lookup", "extract", "plan_documents", "prepare", "embed_passages", "embed_entities",
                   "embed_facts", "write_stores", "synonymy", "graph", "commit", "save_graph", "write_documents"}


def test_timings_tile_the_whole_call(tmp_path):
    """Every stage of index() is named and the stages add up to the total (by construction:
    consecutive laps), so no time goes unaccounted."""
    rag = make_rag(tmp_path)
    rag.extractor = OneTriple()
    for docs in (tiny_docs(40), tiny_docs(50)):    # a first call and one that adds to an index
        t = rag.index(docs)["timings"]
        assert EXPECTED_STAGES <= t.keys() and list(t)[-1] == "total"
        assert all(v >= 0 for v in t.values())
        stages = sum(v for k, v in t.items() if k != "total")
        assert stages == pytest.approx(t["total"], rel=1e-9, abs=1e-9)


def test_stopwatch_laps_tile_the_run():
    from hippo_engine.index.stopwatch import Stopwatch
    w = Stopwatch()
    w.charge("before", 0.5)
    w.declare("never")
    for stage in ("a", "b", "a"):
        w.lap(stage)
    r = w.report()
    assert list(r) == ["before", "never", "a", "b", "total"] and r["never"] == 0.0
    assert sum(v for k, v in r.items() if k != "total") == pytest.approx(r["total"], rel=1e-12)
    assert r["total"] >= 0.5


def test_graph_file_is_written_only_after_the_commit(tmp_path, monkeypatch):
    """graph.npz is written once the outermost transaction has committed (index, replace,
    delete), never inside it (a kill there would leave a file of an uncommitted version)."""
    rag = make_rag(tmp_path)
    depths = []
    save = GraphData.save

    def recording(self, *a, **k):
        depths.append(rag.index_state.db._depth)
        return save(self, *a, **k)

    monkeypatch.setattr(GraphData, "save", recording)
    rag.index(CORPUS[:4], ids=["a", "b", "c", "d"])
    rag.index([CORPUS[5]], ids=["b"])                  # replaces b: adds, then removes its old passage
    rag.delete(ids=["c"])
    assert len(depths) >= 3 and set(depths) == {0}


def test_a_failed_change_leaves_the_committed_graph_file(tmp_path, monkeypatch):
    """A change that fails after its graph was built leaves graph.npz of the committed version."""
    import hippo_engine.index.writer as writer_mod
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:4], ids=["a", "b", "c", "d"])

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(writer_mod.IndexWriter, "_remove_rows", boom)   # after the new passage's rows
    with pytest.raises(RuntimeError, match="simulated crash"):
        rag.index([CORPUS[6]], ids=["b"])
    st = rag.index_state
    assert GraphData.load(st.graph_path, st.version, st._digest) is not None


def test_delete_logs_unknown_ids_briefly(tmp_path, caplog):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:2], ids=["a", "b"])
    huge = "x" * 1000          # (ids are capped at 1,024 bytes; a log line still needs far less)
    with caplog.at_level(logging.WARNING, logger="hippo_engine.index.documents"):
        rep = rag.delete(ids=["a", huge, *[f"gone{i}" for i in range(20)]])
    assert rep["documents"]["unknown"][0] == huge                 # the report keeps them whole
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "21 of 22 document(s)" in msg and "1,000 chars" in msg and "18 more" in msg
    assert len(msg) < 400


def test_tiny_documents_index_like_any_other(tmp_path):
    """The trivial extractor's facts reach the graph (the benchmark's documents are real ones)."""
    rag = make_rag(tmp_path)
    rag.extractor = OneTriple()
    docs = tiny_docs(30)
    rag.index(docs)
    assert entity_id("topic0") in rag.index_state.stores["entity"]
    assert len(rag.index_state.graph.node_ids) > 30


def test_index_scale_benchmark_runs_and_accounts_for_every_stage(tmp_path):
    """``python -m reproduce index-scale`` at toy sizes: its figures and files."""
    import json

    from reproduce.cli import main
    assert main(["index-scale", "--sizes", "300", "600", "--out-dir", str(tmp_path), "--name", "t"]) == 0
    res = json.loads((tmp_path / "t.json").read_text())
    assert [r["size"] for r in res["rows"]] == [300, 600] and [r["added"] for r in res["rows"]] == [300, 600]
    for r in res["rows"]:
        assert abs(r["stages_sum_minus_total_s"]) < 1e-6 and r["outside_total_s"] >= 0
        assert r["per_1k_s"]["total"] == pytest.approx(1000 * r["timings"]["total"] / r["size"])
    md = (tmp_path / "t.md").read_text()
    assert "python -m reproduce index-scale --sizes 300 600" in md and "load average" in md
    assert "| write_documents |" in md
