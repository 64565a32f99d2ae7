"""python -m reproduce table-modes end to end on a tiny MuSiQue-format dataset with the real embedder and spaCy
pipeline (``ner`` index built, communities built once), a "2Wiki" part over a copy of that index with one mode
sampled, and QA in two modes through a scripted OpenAI-compatible server on 127.0.0.1: every JSON part written,
the README rendered from them, no LLM call while retrieving, map calls counted on the server."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from openai_server import FakeOpenAIServer
from test_table_recall_llm_free import make_data

from reproduce.cli import main
from reproduce.table_modes import AUTO_ROW, MODES

sys.path.insert(0, str(Path(__file__).parents[1] / "graphrag"))
from peer_fakes import MAP_SYSTEM, PeerResponder  # noqa: E402


def test_table_modes_on_a_tiny_dataset(tmp_path):
    make_data(tmp_path / "data")
    data, work, parts = tmp_path / "data" / "musique" / "hipporag_v1_train", tmp_path / "work", tmp_path / "parts"
    peer = PeerResponder()

    def respond(messages):
        system = messages[0]["content"]
        return peer(messages) if system == MAP_SYSTEM or "key points" in system else "Thought: so.\nAnswer: Nice"

    with FakeOpenAIServer(responder=respond, max_requests=100) as srv:
        argv = ["table-modes", "--variant", "ner", "--work", str(work), "--data", str(data), "--parts", str(parts),
                "--twowiki-index", str(work / "ner" / "index-ner"), "--twowiki-data", str(data),
                "--twowiki-sample", "1", "--twowiki-sample-modes", "graphrag_global",
                "--qa", "2", "--qa-variant", "ner", "--qa-modes", "naive,graphrag_global",
                "--qa-sample", "1", "--qa-sample-modes", "graphrag_global",
                "--llm", "scripted", "--llm-base-url", srv.base_url]
        assert main(argv) == 0
        maps = [r for r in srv.requests if r["body"]["messages"][0]["content"] == MAP_SYSTEM]
        before = len(srv.requests)
        again = ["table-modes", "--variant", "none", "--work", str(work), "--data", str(data), "--parts", str(parts),
                 "--qa", "2", "--qa-only", "--qa-variant", "ner", "--qa-modes", "naive,kb_vector,graphrag_global",
                 "--llm", "scripted", "--llm-base-url", srv.base_url]
        sampled = json.loads((parts / "qa-musique-ner.json").read_text(encoding="utf-8"))["rows"]["graphrag_global"]
        assert sampled["questions"] == 1
        assert main(again) == 0
        qa = json.loads((parts / "qa-musique-ner.json").read_text(encoding="utf-8"))
        # kb_vector's two questions and graphrag_global's map-reduce over both; naive's row kept
        assert len(srv.requests) - before == 2 + sum(qa["rows"]["graphrag_global"]["calls_each"])
    names = sorted(p.name for p in parts.glob("*.json"))
    assert names == ["2wiki-ner.json", "musique-ner.json", "qa-musique-ner.json"]
    recall = json.loads((parts / "musique-ner.json").read_text(encoding="utf-8"))
    assert list(recall["rows"]) == ["hipporag2", AUTO_ROW, *MODES[1:]]
    assert recall["comm"]["built"] and recall["comm"]["communities"] > 0
    assert all(r["llm_calls"] == 0 and r["questions"] == 2 for r in recall["rows"].values())
    two = json.loads((parts / "2wiki-ner.json").read_text(encoding="utf-8"))
    assert two["rows"]["graphrag_global"]["questions"] == 1 and two["rows"]["naive"]["questions"] == 2
    assert not two["comm"]["built"]             # the copied index keeps its communities
    assert qa["rows"]["naive"]["calls"] == 1 and qa["rows"]["naive"]["answers"] == ["Nice", "Nice"]
    g = qa["rows"]["graphrag_global"]
    assert g["questions"] == 2 and len(maps) == sampled["calls_each"][0] - 1 > 0     # one reduce
    assert list(qa["rows"]) == ["naive", "graphrag_global", "kb_vector"] and len(qa["sessions"]) == 2
    assert qa["sessions"][1]["modes"] == qa["sessions"][1]["done"] == ["kb_vector", "graphrag_global"]
    assert qa["llm_client"] == "OpenAIClient"
    assert set(qa["contexts"]) == set(MODES) and qa["contexts"]["graphrag_global"]["batches_mean"] >= 1
    assert all(0 < c["mean"] <= c["max"] for c in qa["contexts"].values())
    text = (parts / "README.md").read_text(encoding="utf-8")
    assert two["rows"][AUTO_ROW]["questions"] == 2 and "hipporag2 (auto)" in text
    assert "## 2Wiki" in text and "map batches / query" in text and "graphrag_global *" in text
    assert "## QA: the first 2 MuSiQue" in text
    assert str(tmp_path) not in text            # folder options are not shown
