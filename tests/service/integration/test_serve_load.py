"""``serve-load`` (reproduce/serve_load.py): the consistency check on hand-made timelines (it catches what it
must), and small real runs: ``hippo-engine serve`` (1 process, SQLite) over 40 MuSiQue passages, 4 clients,
100 retrieves while 20 documents are added and deleted, then the HTTP overhead on 10 questions; and 2
processes over PostgreSQL (an embedded server in the index folder), 60 retrieves while 15 documents come and go."""
from __future__ import annotations

import argparse
import math

import pytest
from helpers import require_postgres
from store import conftest as pg_fixtures

from hippo_engine.ids import chunk_id
from reproduce import serve_load
from reproduce.serve_consistency import Call, DocTimes, check_calls

pg_dirs = pg_fixtures.pg_dirs      # folders the embedded server's user can reach, cleaned up after the test
BASE = {"Base\nA base passage.": "mq-0000", "Other\nAnother base passage.": "mq-0001"}
ADDED = {"load-000": DocTimes("Added\nAn added passage.", add_sent=10.0, add_ok=10.1, indexed_seen=11.0,
                              delete_sent=20.0, delete_ok=20.5)}


def passages(*texts: str, scores=None) -> list[dict]:
    scores = scores or [1.0 - i / 10 for i in range(len(texts))]
    owner = {**BASE, **{t.text: d for d, t in ADDED.items()}}
    return [{"id": chunk_id(t), "text": t, "score": s, "doc_ids": [owner.get(t, "x")], "rank": i + 1}
            for i, (t, s) in enumerate(zip(texts, scores, strict=True))]


def call(start: float, end: float, ps: list[dict], probe: str | None = None, status: int = 200) -> Call:
    return Call("q", "naive" if probe else "hipporag2", probe, start, end, status, None, ps)


def kinds(calls: list[Call], top_k: int = 2) -> dict:
    counts = check_calls(calls, ADDED, BASE, top_k).counts
    return {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("violation:")}


def test_a_consistent_timeline_passes():
    added = "Added\nAn added passage."
    calls = [call(1.0, 2.0, passages(*BASE)),                                  # before the add: base only
             call(10.5, 10.9, passages(added, "Base\nA base passage.")),       # during the add
             call(12.0, 12.2, passages(added, "Base\nA base passage."), probe="load-000"),
             call(20.2, 20.7, passages(added, "Base\nA base passage.")),       # sent before the delete returned
             call(21.0, 21.2, passages(*BASE), probe="load-000")]              # after the delete: gone
    rep = check_calls(calls, ADDED, BASE, 2)
    assert rep.counts["violations"] == 0, rep.examples
    assert rep.counts["probes_required"] == 1 and rep.counts["probes_found"] == 1
    assert rep.counts["probes_after_delete"] == 1 and rep.counts["added_passages"] == 3


def test_each_kind_of_inconsistency_is_caught():
    added = "Added\nAn added passage."
    assert kinds([call(1.0, 2.0, passages(added, "Base\nA base passage."))]) == {"before_add": 1}
    assert kinds([call(21.0, 21.5, passages(added, "Base\nA base passage."))]) == {"after_delete": 1}
    assert kinds([call(12.0, 12.5, passages(*BASE), probe="load-000")]) == {"not_visible": 1}
    assert kinds([call(1.0, 2.0, passages("Base\nA base passage.", "Never\nAdded."))]) == {"unknown_text": 1}
    assert kinds([call(1.0, 2.0, passages(*BASE, scores=[0.1, 0.9]))]) == {"order": 1}
    assert kinds([call(1.0, 2.0, passages(*BASE, scores=[0.9, math.inf]))]) == {"score": 1}
    assert kinds([call(1.0, 2.0, passages(*BASE, scores=[0.9, None]))]) == {"score": 1}
    assert kinds([call(1.0, 2.0, passages("Base\nA base passage."))]) == {"count": 1}
    wrong = passages(*BASE)
    wrong[1]["doc_ids"] = ["mq-0000"]
    assert kinds([call(1.0, 2.0, wrong)]) == {"doc_ids": 1}
    wrong = passages(*BASE)
    wrong[0]["id"] = "chunk-0"
    assert kinds([call(1.0, 2.0, wrong)]) == {"passage_id": 1}
    rep = check_calls([call(1.0, 2.0, [], status=500), call(1.0, 2.0, [], status=None)], ADDED, BASE, 2)
    assert rep.counts["server_errors"] == 1 and rep.counts["transport_errors"] == 1


@pytest.mark.slow
def test_a_small_load_run_on_the_real_server(tmp_path, musique_dir):
    ap = argparse.ArgumentParser()
    serve_load.add_arguments(ap)
    args = ap.parse_args(["--storage", "sqlite", "--requests", "100", "--clients", "4", "--documents", "20",
                          "--batch", "5", "--delete-lag", "1", "--base", "40", "--overhead", "10",
                          "--time-limit", "600", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "load.md")])
    assert serve_load.run(args, ["--storage", "sqlite"]) == 0
    report = (tmp_path / "load.md").read_text()
    assert "Every run passed" in report and str(tmp_path) not in report
    data = __import__("json").loads((tmp_path / "load.json").read_text())
    run = data["runs"][0]
    counts = run["load"]["check"]["counts"]
    assert run["load"]["requests"] == 100 and counts.get("server_errors", 0) == 0
    assert run["load"]["documents_deleted"] == 20 and run["index_is_base_again"]
    assert counts["base_passages"] > 0 and run["overhead"]["questions"] == 10


@pytest.mark.slow
def test_a_small_load_run_on_two_server_processes_over_postgresql(pg_dirs, musique_dir):
    require_postgres()
    work = pg_dirs()
    ap = argparse.ArgumentParser()
    serve_load.add_arguments(ap)
    args = ap.parse_args(["--storage", "postgres", "--postgres-workers", "2", "--requests", "60", "--clients", "4",
                          "--documents", "15", "--batch", "5", "--delete-lag", "1", "--base", "30",
                          "--time-limit", "600", "--work", str(work), "--out", str(work / "load.md")])
    assert serve_load.run(args, ["--storage", "postgres"]) == 0
    run = __import__("json").loads((work / "load.json").read_text())["runs"][0]
    assert run["storage"] == "postgres" and run["workers"] == 2 and run["failures"] == []
    assert run["load"]["requests"] == 60 and run["load"]["documents_deleted"] == 15 and run["index_is_base_again"]
