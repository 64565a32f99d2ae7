"""``hippo-engine index`` of folders, JSONL and CSV with metadata, then ``retrieve``/``qa`` with inline
questions (``-q``), snippets, ``--json`` on stdout, ``--mode`` and ``--where`` (fake models; the real
default path is the slow test at the end)."""
import json

import pytest
from fakes import ScriptedLLM
from helpers import CORPUS, make_rag, toy_respond

import hippo_engine.cli.common as cli
from hippo_engine.cli import build_parser, main
from hippo_engine.config import MODES


def reader(messages):
    """The toy OpenIE replies, and "Answer: Velor" to the reader."""
    return "Answer: Velor [1]" if "Answer" in messages[0]["content"] or "Question" in messages[-1]["content"] \
        else toy_respond(messages)


@pytest.fixture
def idx(tmp_path, monkeypatch, capsys):
    """An index of a folder (CORPUS[0:4] as .md files) and a JSONL file (CORPUS[4:8]) whose records
    carry metadata: user alice for the folder (--metadata), bob for the JSONL records."""
    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(args.save_dir, llm=ScriptedLLM(reader),
                                                                      use_filter=False))
    folder = tmp_path / "notes"
    folder.mkdir()
    for i, doc in enumerate(CORPUS[:4]):
        title, text = doc.split("\n", 1)
        (folder / f"n{i}.md").write_text(f"# {title}\n\n{text}\n")
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text("\n".join(json.dumps({"id": f"doc{i}", "title": d.split("\n")[0], "text": d.split("\n", 1)[1],
                                           "metadata": {"user": "bob"}}) for i, d in enumerate(CORPUS[4:], 4)))
    path = str(tmp_path / "idx")
    assert main(["index", str(folder), str(jsonl), "--save-dir", path, "--metadata", '{"user": "alice"}']) == 0
    out = capsys.readouterr().out
    assert "documents: 8 added, 0 replaced, 0 unchanged" in out and "extractor=openie" in out
    return path


def test_inline_questions_print_rank_score_title_id_and_a_snippet(idx, capsys):
    assert main(["retrieve", "--save-dir", idx, "-q", "Who mapped Lake Veloria?", "-q", "Where is Velor?",
                 "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "Q: Who mapped Lake Veloria?" in out and "Q: Where is Velor?" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("   1. ["))
    assert "Lake Veloria  (n0.md)" in lines[first]
    assert lines[first + 1].strip() == CORPUS[0].split("\n", 1)[1]          # the snippet: the text after the title


def test_json_on_stdout_and_every_mode_from_the_command_line(idx, capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["retrieve"]
    assert next(a for a in sub._actions if a.dest == "mode").choices == MODES
    for mode in ("hipporag2", "naive", "hi_local", "hi_bridge", "hi"):
        assert main(["retrieve", "--save-dir", idx, "-q", "Who mapped Lake Veloria?", "--mode", mode, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        (sol,) = data["solutions"]
        assert sol["question"] == "Who mapped Lake Veloria?" and sol["docs"] and data["metrics"] == {}
    dense = make_rag(idx, use_filter=False).retrieve_dpr(["Who mapped Lake Veloria?"], 5)[0].docs
    assert main(["retrieve", "--save-dir", idx, "-q", "Who mapped Lake Veloria?", "--dense", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["solutions"][0]["docs"][:5] == dense


def test_where_filters_by_document_metadata(idx, capsys):
    for user, ids in (("alice", {"n0.md", "n1.md", "n2.md", "n3.md"}), ("bob", {"doc4", "doc5", "doc6", "doc7"})):
        assert main(["retrieve", "--save-dir", idx, "-q", "Who founded Tamsin College?", "--json", "--top-k", "8",
                     "--where", json.dumps({"user": user})]) == 0
        sol = json.loads(capsys.readouterr().out)["solutions"][0]
        assert {d for ds in sol["doc_ids"] for d in ds} == ids
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--save-dir", idx, "-q", "x", "--where", '{"user": {"$like": "a"}}'])
    assert e.value.code == 2 and "$like" in capsys.readouterr().err


def test_qa_takes_inline_questions_and_json(idx, capsys):
    assert main(["qa", "--save-dir", idx, "-q", "Where is the Amber Fair held?", "--json", "--where",
                 '{"user": "alice"}']) == 0
    (sol,) = json.loads(capsys.readouterr().out)["solutions"]
    assert sol["answer"] == "Velor" and all(ds[0].endswith(".md") for ds in sol["doc_ids"])


def test_a_question_is_needed(idx, capsys):
    assert main(["retrieve", "--save-dir", idx]) == 2
    assert 'give a question with -q "..."' in capsys.readouterr().err


@pytest.mark.slow
def test_the_default_path_from_a_folder_makes_no_llm_call(tmp_path, monkeypatch, capsys):
    """The real embedder and spaCy, no LLM configured: ``index FOLDER`` builds an extractor=ner index
    (said on stderr), a long file becomes several passages with its title, ``retrieve -q`` and
    ``stats`` work, and the engine's LLM is never built."""
    made = []
    monkeypatch.setattr("hippo_engine.llm.factory.make_llm", lambda *a, **kw: made.append(a))
    folder = tmp_path / "notes"
    folder.mkdir()
    for i, doc in enumerate(CORPUS):
        (folder / f"n{i}.txt").write_text(doc.split("\n", 1)[1])
    (folder / "chronicle.md").write_text("# Kaldavia Chronicle\n\n" + " ".join(
        f"In year {1800 + i} the town of Velor held its Amber Fair and Brask sent {i} merchants." for i in range(150)))
    idx = str(tmp_path / "idx")
    assert main(["index", str(folder), "--save-dir", idx]) == 0
    captured = capsys.readouterr()
    assert "no LLM server configured" in captured.err and "extractor=ner: 0 sent to the LLM" in captured.out
    assert main(["retrieve", "--save-dir", idx, "-q", "Which town holds the Amber Fair?", "--top-k", "3",
                 "--json"]) == 0
    sol = json.loads(capsys.readouterr().out)["solutions"][0]
    assert sol["docs"] and not sol["errors"]
    assert main(["stats", "--save-dir", idx]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["extractor"] == "ner" and stats["passage_nodes"] > len(CORPUS) + 1   # the chronicle was cut
    assert made == []


def test_a_questions_file_with_gold_documents_prints_the_top_k_asked_for(idx, tmp_path, capsys):
    """Recall@k reads up to 200 passages; the output is the first --top-k of the ranking (issue 38's doors)."""
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps([{"question": "Who mapped Lake Veloria?", "gold_docs": [CORPUS[1]]},
                                 {"question": "Where is Velor?", "gold_docs": [CORPUS[2]]}]))
    assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile), "--top-k", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    sols = data["solutions"] if isinstance(data, dict) else data
    assert [len(s["docs"]) for s in sols] == [2, 2] and all(len(s["doc_scores"]) == 2 for s in sols)
    assert main(["retrieve", "--save-dir", idx, "--queries", str(qfile), "--top-k", "8", "--json"]) == 0
    wide = json.loads(capsys.readouterr().out)
    wide_sols = wide["solutions"] if isinstance(wide, dict) else wide
    assert [s["docs"][:2] for s in wide_sols] == [s["docs"] for s in sols]       # a prefix of the ranking
