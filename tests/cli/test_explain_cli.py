"""``hippo-engine explain``: the tree per passage and the ``--json`` list (fake models), the hi_* modes'
context items with their reasons (``--mode``), and the real small path (extractor=ner with the packaged
encoder, slow)."""
import json

import pytest
from helpers import CORPUS, cli_index, make_rag

import hippo_engine.cli.common as cli
from hippo_engine.cli import main
from hippo_engine.datatypes import Explanation

QUERY = "Who mapped Lake Veloria?"


@pytest.fixture
def idx(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(
        args.save_dir, use_filter=not getattr(args, "no_filter", False),
        dense_first=getattr(args, "dense_first", None) or 0))
    return cli_index(main, CORPUS, tmp_path / "idx", capsys)


def test_explain_prints_a_tree_per_passage(idx, capsys):
    assert main(["explain", "--save-dir", idx, "--query", QUERY, "--top-k", "3", "--no-filter"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"query: {QUERY}\ncandidate facts: ")
    assert "#1  score " in out and "#3  score " in out and "#4  score " not in out
    assert "placed by the graph walk (PPR)" in out and "├─ seeds (" in out and "dense prior" in out
    assert "check |terms - score|" in out
    assert "top paths" in out and " -> passage: " in out
    assert "Lake Veloria" in out.split("#1  score ", 1)[1].splitlines()[0]   # the title on the rank line
    assert '"' in out          # a fact or sentence on an edge


def test_explain_json_is_the_to_dict_list(idx, capsys):
    assert main(["explain", "--save-dir", idx, "-q", QUERY, "--top-k", "2", "--json", "--no-filter"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["rank"] for d in data] == [1, 2]
    exps = [Explanation.from_dict(d) for d in data]
    assert [e.to_dict() for e in exps] == data
    assert all(abs(sum(s.contribution for s in e.seeds) + e.dense_prior - e.score) == pytest.approx(e.check, abs=1e-15)
               for e in exps)


def test_explain_dense_fallback_and_dense_first(idx, capsys):
    assert main(["explain", "--save-dir", idx, "--query", "zzzz qqqq", "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "dense fallback: " in out and "placed by its closeness to the query alone" in out and "top paths" not in out
    assert main(["explain", "--save-dir", idx, "--query", QUERY, "--top-k", "3", "--dense-first", "1",
                 "--no-filter"]) == 0
    out = capsys.readouterr().out
    assert "placed among the first by its closeness to the query (dense rank 1; setting dense_first)" in out
    assert "placed by the graph walk (PPR)" in out


def test_explain_names_the_rule_and_the_one_scores_terms():
    from hippo_engine.cli.explain import passage_lines
    base = Explanation(passage_id="p", score=0.2, seeds=[], dense_prior=0.2, paths=[], dense_score=0.9,
                       dense_rank=1, rank=1, ranked_score=3.0)
    agreed = passage_lines(Explanation(**{**base.__dict__, "placed_by": "dense_agree", "walk": "the first walk"}), "T")
    assert "placed first: the closest passage to the query" in agreed[1] and "(setting dense_agree)" in agreed[1]
    assert agreed[2] == "├─ how it is scored: the first walk"
    scored = passage_lines(Explanation(**{**base.__dict__, "placed_by": "score", "score": 3.0, "dense_term": 1.5,
                                          "walk": "one score, the sum of: ..."}), "T")
    assert "placed by its score" in scored[1] and "seeds (0, 0.0% of the score 3)" in scored[3]
    assert any(x.startswith("├─ dense term 50.0% of the score (1.5") for x in scored)


def test_explain_hi_mode_prints_each_context_item_with_its_reason(idx, capsys):
    assert main(["explain", "--save-dir", idx, "--query", QUERY, "--top-k", "3", "--mode", "hi_local"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"query: {QUERY}\nmode: hi_local (sections: entities, relations, passages)\n")
    assert "-----Entities----- (" in out and "-----Relations----- (" in out
    assert "   1. entity: " in out and "matched the query by vector search (similarity " in out
    assert "relation: " in out and "relations are ordered by" in out
    sources = out.split("-----Sources----- (3 ranked, ", 1)[1]
    assert "#1  " in sources and "#3  " in sources and "#4  " not in sources
    assert "a text unit of top entity " in sources
    assert "seeds (" not in out and "placed by PPR" not in out          # not the hipporag2 tree


def test_explain_hi_mode_json_and_bridge(idx, capsys):
    from hippo_engine.datatypes import ContextItem
    assert main(["explain", "--save-dir", idx, "--query", QUERY, "--top-k", "2", "--mode", "hi_bridge", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    items = [ContextItem.from_dict(d) for d in data]
    assert [i.to_dict() for i in items] == data
    assert {i.section for i in items} == {"bridge", "passages"}
    assert [i.rank for i in items if i.kind == "passage"] == [1, 2]
    assert any(i.kind == "path_entity" for i in items)
    # hi_bridge shows no reports: its communities only chose the key entities
    assert all(not i.shown for i in items if i.kind == "community")
    assert main(["explain", "--save-dir", idx, "--query", QUERY, "--top-k", "2", "--mode", "hi_bridge"]) == 0
    out = capsys.readouterr().out
    assert "-----Reasoning Path----- (" in out and "path entity: " in out and "[not in the context]" in out


def test_explain_modes_are_hipporag2_and_the_hi_modes(idx, capsys):
    from hippo_engine.cli.explain import explain_modes
    from hippo_engine.modes import mode_names
    assert explain_modes() == ("hipporag2", *(m for m in mode_names() if m == "hi" or m.startswith("hi_")))
    with pytest.raises(SystemExit):
        main(["explain", "--save-dir", idx, "--query", QUERY, "--mode", "naive"])
    assert "invalid choice" in capsys.readouterr().err


def test_explain_refuses_a_missing_index(tmp_path, capsys):
    assert main(["explain", "--save-dir", str(tmp_path / "typo"), "--query", QUERY]) == 2
    assert "no index in" in capsys.readouterr().err


@pytest.mark.slow
def test_explain_on_real_ner_index(tmp_path, capsys):
    from test_cli import DOCS
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(DOCS))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["explain", "--save-dir", idx, "--query", "Where was Barack Obama born?", "--top-k", "2",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "#1  score " in out and "Barack Obama" in out.split("#1  score ", 1)[1].splitlines()[0]
    # the ner index's default: one score of the second walk's term, the first walk's head term and the dense term
    assert "placed by its score" in out and "how it is scored: The score adds three parts: " in out
    assert "settings: score = P / max P of the second walk" in out and "top paths" in out
    assert "dense term" in out
    assert main(["explain", "--save-dir", idx, "--query", "Where was Barack Obama born?", "--top-k", "2",
                 "--mode", "hi_local", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "   1. entity: barack obama" in out and "matched the query by vector search" in out
    assert "Barack Obama" in out.split("  #1  ", 1)[1].splitlines()[0]


def test_explain_takes_top_k_and_its_old_name_top_with_a_note(idx, capsys):
    """One vocabulary (issue 39): ``--top-k`` as ``retrieve``'s; ``--top`` still works with a deprecation note;
    both at once is an error."""
    assert main(["explain", "--save-dir", idx, "-q", QUERY, "--top-k", "2", "--json", "--no-filter"]) == 0
    new = capsys.readouterr()
    assert main(["explain", "--save-dir", idx, "-q", QUERY, "--top", "2", "--json", "--no-filter"]) == 0
    old = capsys.readouterr()
    assert json.loads(new.out) == json.loads(old.out) and len(json.loads(new.out)) == 2
    assert "--top is deprecated, use --top-k" in old.err and "deprecated" not in new.err
    assert main(["explain", "--save-dir", idx, "-q", QUERY, "--top", "2", "--top-k", "2"]) == 2
    assert "not both" in capsys.readouterr().err
