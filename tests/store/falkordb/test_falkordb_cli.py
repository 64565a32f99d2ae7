"""The command line on FalkorDB: ``--storage falkordb`` (an embedded server in --save-dir) and
``--falkordb`` (a server's URL, or the data folder of an embedded server others share), with the real
default engine: the same results as on SQLite, and the index found again on the backend its folder
recorded."""
from __future__ import annotations

import json

import pytest
from helpers import require_falkordb

from hippo_engine.cli import main

DOCS = [{"id": "obs", "title": "Vellmar Observatory", "text": "The Vellmar Observatory stands on Mount Caldis."},
        {"id": "ilse", "title": "Ilse Marrow", "text": "Ilse Marrow founded the Vellmar Observatory in 1881."},
        {"id": "caldis", "title": "Mount Caldis", "text": "Mount Caldis is the highest peak of Kaldavia."}]
QUESTION = "On which mountain does the observatory founded by Ilse Marrow stand?"


def _run(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _results(capsys, save, *flags):
    out = json.loads(_run(capsys, "retrieve", "--save-dir", str(save), "-q", QUESTION, "--top-k", "3", "--json",
                          *flags))
    return [(s["doc_ids"], s["doc_scores"]) for s in out["solutions"]]


@pytest.mark.slow
def test_index_retrieve_and_stats_on_its_own_and_a_shared_embedded_server(tmp_path, capsys, falkordb_server):
    require_falkordb()
    corpus = tmp_path / "docs.json"
    corpus.write_text(json.dumps(DOCS), encoding="utf-8")
    _run(capsys, "index", str(corpus), "--save-dir", str(tmp_path / "lite"), "--quiet")
    want = _results(capsys, tmp_path / "lite")
    shared = ["--falkordb", str(falkordb_server.data_dir)]
    runs = ((tmp_path / "own", ["--storage", "falkordb"], []), (tmp_path / "shared", shared, shared))
    for save, flags, again in runs:
        _run(capsys, "index", str(corpus), "--save-dir", str(save), "--quiet", *flags)
        assert _results(capsys, save, *again) == want          # --storage falkordb: the folder recorded it
        assert json.loads(_run(capsys, "stats", "--save-dir", str(save), *again))["documents"] == 3
    assert (tmp_path / "own" / "falkordb").is_dir() and not (tmp_path / "shared" / "falkordb").exists()
