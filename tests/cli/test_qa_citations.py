"""``hippo-engine qa`` prints the answer with its cited sources (title, first line) and, with
``--json``, every solution with its citations (fake models, no network)."""
import json

from helpers import CORPUS, make_rag, toy_respond

import hippo_engine.cli.common as cli
from hippo_engine.cli import main
from hippo_engine.ids import chunk_id


def respond(messages):
    user = messages[-1]["content"]
    if "Question:" not in user:
        return toy_respond(messages)
    lines = [ln for ln in user.splitlines() if ln.startswith("[")]
    n = next((ln for ln in lines if "Ilse Marrow\n" in ln or ln.endswith("Ilse Marrow")), lines[0])[1]
    return f"It says so [{n}], not [42].\nAnswer: Ilse Marrow [{n}]"


def test_qa_prints_cited_sources_and_json(tmp_path, capsys, monkeypatch):
    from fakes import ScriptedLLM

    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(args.save_dir, llm=ScriptedLLM(respond)))
    corpus, queries = tmp_path / "c.json", tmp_path / "q.json"
    corpus.write_text(json.dumps(CORPUS))
    queries.write_text(json.dumps(["Who mapped Lake Veloria?"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx]) == 0
    capsys.readouterr()
    assert main(["qa", "--save-dir", idx, "--queries", str(queries), "--no-filter"]) == 0
    out = capsys.readouterr().out
    assert "A: Ilse Marrow" in out
    assert "Ilse Marrow: Ilse Marrow was born in Velor. Ilse Marrow studied at Tamsin College." in out
    assert "source [" in out and "1 citation(s) to no shown passage dropped" in out
    assert main(["qa", "--save-dir", idx, "--queries", str(queries), "--no-filter", "--json"]) == 0
    sol = json.loads(capsys.readouterr().out)["solutions"][0]
    assert sol["answer"] == "Ilse Marrow" and sol["invalid_citations"] == 1
    assert sol["citations"] == [chunk_id(CORPUS[1])] and sol["citations"][0] in sol["passage_ids"][:5]
