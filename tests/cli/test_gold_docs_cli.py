"""Gold documents of a questions file (``retrieve``/``qa --queries``) given by document id, by a document's
text or by a passage's text score the same Recall@k; an entry that matches nothing in the index is refused
with a message naming the file and the entry (issue 39, item 2: ids scored 0.000 without a word). Fake
models first; the last test on the real path (extractor=ner, the packaged encoder)."""
import json

import pytest
from fakes import ScriptedLLM
from helpers import CORPUS, make_rag, toy_respond

import hippo_engine.cli.common as cli
from hippo_engine.cli import main
from hippo_engine.datatypes import QuerySolution

QUESTIONS = ["Who mapped Lake Veloria?", "Where is Velor?"]


def reader(messages):
    return "Answer: Velor [1]" if "Question" in messages[-1]["content"] else toy_respond(messages)


@pytest.fixture
def idx(tmp_path, monkeypatch, capsys):
    """CORPUS indexed from JSONL records with ids doc0..doc7 (one passage each)."""
    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(args.save_dir, llm=ScriptedLLM(reader),
                                                                      use_filter=False))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": f"doc{i}", "title": d.split("\n")[0], "text": d.split("\n", 1)[1]})
                                for i, d in enumerate(CORPUS)))
    path = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", path]) == 0
    capsys.readouterr()
    return path


def _recall(idx, tmp_path, capsys, gold, command="retrieve") -> dict:
    qfile = tmp_path / f"q-{command}.json"
    qfile.write_text(json.dumps([{"question": q, "gold_docs": g, "answer": "Velor"}
                                 for q, g in zip(QUESTIONS, gold, strict=True)]))
    assert main([command, "--save-dir", idx, "--queries", str(qfile), "--top-k", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return data["metrics"] if command == "retrieve" else data["metrics"][0]


def test_gold_documents_by_id_score_as_their_texts(idx, tmp_path, capsys):
    by_text = _recall(idx, tmp_path, capsys, [[CORPUS[0]], [CORPUS[2]]])
    by_id = _recall(idx, tmp_path, capsys, [["doc0"], ["doc2"]])
    mixed = _recall(idx, tmp_path, capsys, [["doc0", CORPUS[1]], [CORPUS[2]]])
    assert by_text["Recall@5"] > 0 and by_id == by_text
    assert 0 < mixed["Recall@1"] <= by_text["Recall@1"]
    assert _recall(idx, tmp_path, capsys, [["doc0"], ["doc2"]], "qa")["Recall@5"] == by_text["Recall@5"]


def test_the_text_output_marks_gold_passages_given_by_id(idx, tmp_path, capsys):
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps([{"question": QUESTIONS[0], "gold_docs": ["doc0"]}]))
    assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile), "--top-k", "8"]) == 0
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if " *  (" in line]
    assert len(marked) == 1 and "Lake Veloria *  (doc0)" in marked[0]
    assert "retrieval: Recall@1 " in out


@pytest.mark.parametrize("command", ["retrieve", "qa"])
def test_gold_documents_that_match_nothing_are_refused_by_name(idx, tmp_path, capsys, command):
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps([{"question": QUESTIONS[0], "gold_docs": ["doc0"]},
                                 {"question": QUESTIONS[1], "gold_docs": ["rsync", "Velor\nno such text"]}]))
    assert main([command, "--save-dir", idx, "--queries", str(qfile)]) == 2
    err = capsys.readouterr().err
    assert f"{qfile}: 2 gold document(s) match nothing in the index" in err
    assert "question 2: 'rsync', 'Velor no such text'" in err and "doc0" not in err
    assert "a document id or the text of a document or passage" in err


def test_bad_gold_docs_in_a_questions_file_name_the_file_and_item(idx, tmp_path, capsys):
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps([{"question": QUESTIONS[0], "gold_docs": [3]}]))
    assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile)]) == 2
    assert f"{qfile}: item 0: 'gold_docs' must be a list of document ids or texts" in capsys.readouterr().err


def test_gold_found_matches_texts_ids_and_document_texts():
    from hippo_engine.ids import document_id
    from hippo_engine.qa.evaluate import gold_found, retrieval_metrics
    sol = QuerySolution("q", docs=["A\npassage one", "B\npassage two"], doc_scores=[2.0, 1.0],
                        doc_ids=[["a"], [document_id("B\nthe whole of b"), "b2"]])
    assert gold_found(sol, ["B\npassage two", "a", "B\nthe whole of b", "zzz", "a"]) == [1, 0, 1, float("inf")]
    m = retrieval_metrics([sol], [["a", "b2"]], "retrieve", top_k=2)
    assert m == {"Recall@1": 0.5, "Recall@2": 1.0} and sol.gold_docs == ["a", "b2"]


@pytest.mark.slow
def test_gold_ids_on_the_real_ner_path(tmp_path, capsys):
    """The packaged encoder and the ner extractor, documents with ids: gold ids score as the texts do."""
    docs = [{"id": "obama", "title": "Barack Obama", "text": "Barack Obama was born in Honolulu, Hawaii."},
            {"id": "honolulu", "title": "Honolulu", "text": "Honolulu is the capital of Hawaii."},
            {"id": "merkel", "title": "Angela Merkel", "text": "Angela Merkel was chancellor of Germany."}]
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(docs))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    capsys.readouterr()
    out = {}
    for name, gold in (("ids", ["obama"]), ("texts", [f"{docs[0]['title']}\n{docs[0]['text']}"])):
        qfile = tmp_path / f"{name}.json"
        qfile.write_text(json.dumps([{"question": "Where was Barack Obama born?", "gold_docs": gold}]))
        assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile), "--json", "--quiet"]) == 0
        out[name] = json.loads(capsys.readouterr().out)["metrics"]
    assert out["ids"]["Recall@1"] == 1.0 and out["ids"] == out["texts"]
    qfile = tmp_path / "bad.json"
    qfile.write_text(json.dumps([{"question": "Where was Barack Obama born?", "gold_docs": ["rsync"]}]))
    assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile), "--quiet"]) == 2
    assert f"{qfile}: 1 gold document(s) match nothing in the index" in capsys.readouterr().err
