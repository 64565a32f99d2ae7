"""Exporting an index (``hippo_engine.export``, ``hippo-engine export``): the copy is the same index
(snapshot, rankings, documents in order, metadata, communities), nothing is extracted or encoded again,
and a destination that is not new, or a failed copy, leaves nothing written."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import CORPUS, assert_same, make_rag, snapshot

from hippo_engine.config import HippoConfig
from hippo_engine.export import PORTABLE_META, export_index
from hippo_engine.store.opening import open_index_store

QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]
IDS = [f"d{i}" for i in range(len(CORPUS))]
PACKAGE = Path(__file__).resolve().parents[1] / "hippo_engine"


def _rankings(rag, **kw):
    return [(s.docs, np.asarray(s.doc_scores).tolist(), s.doc_ids) for s in rag.retrieve(QUERIES, **kw)]


def _source(path: Path):
    rag = make_rag(path, use_filter=False)
    rag.index(CORPUS[:5], ids=IDS[:5], metadata=[{"shelf": i % 2} for i in range(5)])
    rag.index(CORPUS[3:], ids=IDS[3:])            # later documents, one re-indexed with no metadata
    rag.delete(ids=["d1"])
    return rag


def test_an_export_to_a_new_folder_is_the_same_index(tmp_path):
    src = _source(tmp_path / "src")
    before = snapshot(src)
    ranked, filtered = _rankings(src), _rankings(src, where={"shelf": 0})
    docs = src.documents(limit=100)
    src.close()
    report = export_index(tmp_path / "src", tmp_path / "copy", HippoConfig(show_progress=False))
    assert report.backend == "sqlite"
    assert report.counts["passage_vectors"] == len(CORPUS) - 1 and report.counts["documents"] == len(CORPUS) - 1
    copy = make_rag(tmp_path / "copy", use_filter=False)
    assert_same(snapshot(copy), before)
    assert _rankings(copy) == ranked                          # same passages, ids and float scores
    assert _rankings(copy, where={"shelf": 0}) == filtered   # the metadata went across
    assert [d["id"] for d in copy.documents(limit=100)["documents"]] == [d["id"] for d in docs["documents"]]
    assert copy.documents(limit=100)["total"] == docs["total"]
    copy.close()
    again = make_rag(tmp_path / "src", use_filter=False)      # the source is untouched
    assert_same(snapshot(again), before)
    again.close()


def test_the_copy_is_a_new_index_with_its_own_identity(tmp_path):
    _source(tmp_path / "src").close()
    export_index(tmp_path / "src", tmp_path / "copy", HippoConfig(show_progress=False))
    ids = [json.loads((tmp_path / name / "hippo-index.json").read_text())["index_id"] for name in ("src", "copy")]
    assert ids[0] != ids[1]
    copy = make_rag(tmp_path / "copy", use_filter=False)
    copy.index(["Zella Quorn\nZella Quorn painted the Amber Fair."], ids=["new"])   # it takes new documents
    assert copy.documents(limit=100)["documents"][-1]["id"] == "new"
    copy.close()


def test_communities_and_reports_go_across(tmp_path):
    _source(tmp_path / "src").close()
    config = HippoConfig(show_progress=False)
    db = open_index_store(tmp_path / "src", config)
    rows = [("c1", 0, None, json.dumps({"id": "c1", "level": 0, "parent": None, "entities": ["velor"]})),
            ("c2", 1, "c1", json.dumps({"id": "c2", "level": 1, "parent": "c1", "entities": ["brask"]}))]
    reports = [("velor", json.dumps({"title": "Velor", "source": "llm"}), "llm")]
    with db.transaction():
        db.replace_communities(rows, reports)
        db.set_meta("communities_version", db.get_meta("version") or "0")
    db.close()
    report = export_index(tmp_path / "src", tmp_path / "copy", config)
    assert (report.counts["communities"], report.counts["community_reports"]) == (2, 1)
    a, b = open_index_store(tmp_path / "src", config), open_index_store(tmp_path / "copy", config)
    try:
        assert b.load_community_rows() == a.load_community_rows()
        assert b.load_report_rows() == a.load_report_rows()
        assert b.get_meta("communities_version") == a.get_meta("communities_version")
    finally:
        a.close()
        b.close()


def test_a_destination_that_is_not_new_is_refused(tmp_path):
    _source(tmp_path / "src").close()
    config = HippoConfig(show_progress=False)
    with pytest.raises(ValueError, match="own folder"):
        export_index(tmp_path / "src", tmp_path / "src", config)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        export_index(tmp_path / "src", tmp_path / "busy", config)
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.txt"]
    with pytest.raises(FileNotFoundError, match="no index"):
        export_index(tmp_path / "nothing", tmp_path / "dest", config)
    (tmp_path / "empty").mkdir()                            # an empty folder is a new destination
    export_index(tmp_path / "src", tmp_path / "empty", config)


def test_a_failed_export_leaves_no_destination(tmp_path, monkeypatch):
    _source(tmp_path / "src").close()
    import hippo_engine.export as export

    def fail(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(export, "_copy_documents", fail)
    with pytest.raises(OSError, match="disk full"):
        export_index(tmp_path / "src", tmp_path / "dest", HippoConfig(show_progress=False))
    assert not (tmp_path / "dest").exists()


def _recorded_meta_keys() -> set[str]:
    """Every literal key the package passes to ``set_meta`` outside ``store/`` (what an index records)."""
    keys = set()
    for path in PACKAGE.rglob("*.py"):
        if "store" in path.relative_to(PACKAGE).parts or path.name == "export.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "set_meta" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    keys.add(first.value)
                elif isinstance(first, ast.Name):
                    keys.add(first.id)
    return keys


def test_every_setting_the_engine_records_is_copied():
    """A new meta key recorded by the engine must be exported (or named here as belonging to one copy)."""
    from hippo_engine.hirag.report_store import META_PARAMS, META_VERSION
    from hippo_engine.index.digest import META_KEY
    names = {"META_VERSION": META_VERSION, "META_PARAMS": META_PARAMS, "DIGEST_KEY": META_KEY}
    recorded = {names.get(k, k) for k in _recorded_meta_keys()}
    assert recorded - set(PORTABLE_META) == set()


def test_the_command_line_exports_and_names_what_it_copied(tmp_path, capsys, monkeypatch):
    _source(tmp_path / "src").close()
    from hippo_engine.cli import main
    from hippo_engine.models.encoder import TransformersEncoder

    def no_model(*a, **k):
        raise AssertionError("an export loads no model")

    monkeypatch.setattr(TransformersEncoder, "__init__", no_model)     # nothing is encoded again
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "out"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "exported 7 passages" in out and "nothing was extracted or encoded again" in out
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "out"), "--quiet"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "x"), "--to", "mysql://h/db"]) == 2
    assert "--to takes a storage backend's name or a server URL" in capsys.readouterr().err
    assert main(["export", "--save-dir", str(tmp_path / "src"), str(tmp_path / "y"), "--to", "nosuch"]) == 2
    assert "registered backends: sqlite, postgres" in capsys.readouterr().err
