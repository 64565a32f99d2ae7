"""The command line on real parts: the packaged embedder and spaCy (extractor=ner: no LLM)."""
import json

import pytest

from hippo_engine import __version__
from hippo_engine.cli import main

DOCS = [{"title": "Barack Obama", "text": "Barack Obama was born in Honolulu, Hawaii. He was president."},
        {"title": "Honolulu", "text": "Honolulu is the capital of Hawaii."},
        {"title": "Angela Merkel", "text": "Angela Merkel was chancellor of Germany."}]


@pytest.mark.slow
def test_index_retrieve_stats_with_ner_extractor(tmp_path, capsys):
    corpus, queries, out = tmp_path / "c.json", tmp_path / "q.json", tmp_path / "out.json"
    corpus.write_text(json.dumps(DOCS))
    queries.write_text(json.dumps(["Where was Barack Obama born?"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    assert "indexed 3 new passage(s)" in capsys.readouterr().out
    # an existing index keeps its extractor: no --extractor needed, and no LLM is loaded
    assert main(["retrieve", "--save-dir", idx, "--queries", str(queries), "--top-k", "2", "--quiet",
                 "--output", str(out)]) == 0
    sol = json.loads(out.read_text())["solutions"][0]
    assert sol["docs"][0].startswith("Barack Obama") and not sol["used_fallback"]
    from hippo_engine.index.documents import document_id  # records without "id": ids from their texts
    assert sol["doc_ids"][0] == [document_id(sol["docs"][0])]
    capsys.readouterr()
    assert main(["stats", "--save-dir", idx]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["passage_nodes"] == 3 and stats["entity_nodes"] >= 4 and stats["context_edges"] > 0


def test_version_and_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    assert main(["index", str(tmp_path / "missing.json"), "--save-dir", str(tmp_path / "i")]) == 2
    assert "missing.json" in capsys.readouterr().err


@pytest.mark.parametrize("k", ["0", "-3", "two"])
def test_top_k_must_be_positive(tmp_path, capsys, k):
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--save-dir", str(tmp_path), "--queries", "q.json", "--top-k", k])
    assert e.value.code == 2 and "--top-k" in capsys.readouterr().err


def test_file_and_folder_errors_name_the_file_and_line_and_create_nothing(tmp_path, capsys):
    bad = tmp_path / "c.jsonl"
    bad.write_text('"one"\n{"title": "x", \n"three"\n')
    assert main(["index", str(bad), "--save-dir", str(tmp_path / "e1")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}, line 2" in err and not (tmp_path / "e1").exists()
    other = tmp_path / "notes.dat"            # (.txt and .md files are documents; other files are read as JSON)
    other.write_text("plain text, not JSON")
    assert main(["index", str(other), "--save-dir", str(tmp_path / "e2")]) == 2
    err = capsys.readouterr().err
    assert f"{other}, line 1" in err and "folder of .txt/.md files" in err and not (tmp_path / "e2").exists()
    assert main(["stats", "--save-dir", str(tmp_path / "typo")]) == 2
    assert "no index in" in capsys.readouterr().err and not (tmp_path / "typo").exists()


@pytest.mark.slow
def test_llm_down_exits_non_zero_and_names_the_queries(tmp_path, capsys, monkeypatch):
    """retrieve with the filter on and qa against a server that only answers 500 (every retry made,
    without the backoff's waits)."""
    from openai_server import FakeOpenAIServer

    from hippo_engine.llm import openai_client
    monkeypatch.setattr(openai_client, "RETRY_INITIAL_DELAY", 0.001)
    monkeypatch.setattr(openai_client, "RETRY_MAX_DELAY", 0.002)

    corpus, queries, out = tmp_path / "c.json", tmp_path / "q.json", tmp_path / "out.json"
    corpus.write_text(json.dumps(DOCS))
    queries.write_text(json.dumps(["Where was Barack Obama born?", "Who was chancellor of Germany?"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    with FakeOpenAIServer([("status", 500)], max_requests=100) as srv:
        common = ["--save-dir", idx, "--queries", str(queries), "--quiet", "--llm", "m", "--llm-base-url",
                  srv.base_url]
        capsys.readouterr()
        assert main(["retrieve", *common, "--filter", "--output", str(out)]) == 1
        err = capsys.readouterr().err
        assert "query 0" in err and "query 1" in err and "LLM calls failed for 2 of 2 queries" in err
        sols = json.loads(out.read_text())["solutions"]
        assert all(s["errors"] and "recognition filter" in s["errors"][0] for s in sols)
        assert main(["qa", *common]) == 1
        assert "reader" in capsys.readouterr().err


@pytest.mark.slow
def test_llm_flags_reach_the_server_and_announcements_say_the_llm_calls(tmp_path, capsys):
    """--api-key / --llm-timeout / --llm-concurrency are used; the LLM calls to come are announced
    on stderr before they start, and --quiet silences the announcements."""
    from openai_server import FakeOpenAIServer

    corpus, queries = tmp_path / "c.json", tmp_path / "q.json"
    corpus.write_text(json.dumps(DOCS))
    queries.write_text(json.dumps(["Where was Barack Obama born?", "Who was chancellor of Germany?"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    assert "hippo-engine:" not in capsys.readouterr().err                  # --quiet: no announcements
    with FakeOpenAIServer([("ok", "Answer: Honolulu", "stop")], max_requests=10) as srv:
        assert main(["qa", "--save-dir", idx, "--queries", str(queries), "--llm", "m", "--llm-base-url", srv.base_url,
                     "--api-key", "sk-test-key", "--llm-timeout", "30", "--llm-concurrency", "1"]) == 0
        err = capsys.readouterr().err
        assert "reader: 2 LLM calls ('m', top 5 passages each)" in err
        assert len(srv.requests) == 2
        assert all(h.get("Authorization") == "Bearer sk-test-key" for h in srv.headers)
        assert main(["qa", "--save-dir", idx, "--queries", str(queries), "--llm", "m", "--llm-base-url", srv.base_url,
                     "--top-k", "1", "--quiet"]) == 0               # --top-k: what the reader reads
        last = srv.requests[-1]["body"]["messages"][-1]["content"]
        assert last.count("Wikipedia Title: ") == 1
        assert "reader: 2 LLM calls ('m', top 1 passages each)" not in capsys.readouterr().err   # --quiet
    for bad in (["--llm-timeout", "nan"], ["--llm-timeout", "0"], ["--llm-concurrency", "0"]):
        with pytest.raises(SystemExit) as e:
            main(["qa", "--save-dir", idx, "--queries", str(queries), *bad])
        assert e.value.code == 2


def test_document_ids_index_retrieve_and_delete_by_id(tmp_path, capsys, monkeypatch):
    """Corpus records with "id": indexed under them, printed beside each passage and written to
    --output; ``delete --ids`` / ``--ids-file`` / a corpus with ids remove by id (fakes: no models)."""
    from helpers import CORPUS, make_rag

    import hippo_engine.cli.common as cli

    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(args.save_dir))
    records = [{"id": f"doc{i}", "title": d.split("\n")[0], "text": d.split("\n", 1)[1]} for i, d in enumerate(CORPUS)]
    corpus, queries, out = tmp_path / "c.jsonl", tmp_path / "q.json", tmp_path / "out.json"
    corpus.write_text("\n".join(json.dumps(r) for r in records))
    queries.write_text(json.dumps(["Who mapped Lake Veloria?"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx]) == 0
    assert "documents: 8 added, 0 replaced, 0 unchanged" in capsys.readouterr().out
    assert main(["retrieve", "--save-dir", idx, "--queries", str(queries), "--top-k", "2", "--no-filter",
                 "--output", str(out)]) == 0
    sol = json.loads(out.read_text())["solutions"][0]
    assert sol["doc_ids"][0] == [f"doc{CORPUS.index(sol['docs'][0])}"] and len(sol["passage_ids"]) == 2
    assert f"({sol['doc_ids'][0][0]})" in capsys.readouterr().out
    assert main(["delete", "--save-dir", idx, "--ids", "doc0", "doc1", "nope"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert report["documents"] == {"removed": ["doc0", "doc1"], "unknown": ["nope"]} and report["removed"] == 2
    (tmp_path / "ids.txt").write_text("doc2\n\ndoc3\n")
    assert main(["delete", "--save-dir", idx, "--ids-file", str(tmp_path / "ids.txt")]) == 0
    (tmp_path / "part.json").write_text(json.dumps(records[4:6]))
    assert main(["delete", str(tmp_path / "part.json"), "--save-dir", idx]) == 0
    assert make_rag(idx).index_state.stored_documents([r["id"] for r in records])[0].keys() == {"doc6", "doc7"}
    capsys.readouterr()
    assert main(["delete", str(corpus), "--ids", "doc6", "--save-dir", idx]) == 2
    assert "give one of a corpus file, --ids" in capsys.readouterr().err


def test_corpus_ids_must_be_all_or_none(tmp_path):
    from hippo_engine.cli.inputs import read_documents, read_ids
    f = tmp_path / "c.json"
    f.write_text(json.dumps([{"id": 7, "text": "a"}, {"id": "b", "title": "T", "text": "x"}]))
    assert read_documents(f) == (["a", "T\nx"], ["7", "b"])
    f.write_text(json.dumps([{"id": "a", "text": "a"}, "plain"]))
    with pytest.raises(ValueError, match="item 1 has no 'id' but item 0 has one"):
        read_documents(f)
    f.write_text(json.dumps([{"id": ["x"], "text": "a"}]))
    with pytest.raises(ValueError, match="item 0 has an 'id' that is neither"):
        read_documents(f)
    f.write_text(json.dumps(["a", {"id": "b"}, 3]))
    with pytest.raises(ValueError, match="item 2 is neither an id string"):
        read_ids(f)
