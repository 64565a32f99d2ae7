"""Explanations say what a score is made of in a reader's words; the settings' names (second_hop,
second_hop_head, head_weight, dense_weight, dense_agree, ...) are kept on a line and in a field of their
own (``walk_detail``), and the numbers and the other fields stay as they were (issue 39, item 8). The
words of each second hop and the CLI tree on fakes; then a real extractor="ner" index (spaCy and the
packaged encoder) through ``HippoRAG.retrieve(explain=True)`` and ``hippo-engine explain``."""
import json

import numpy as np
import pytest

from hippo_engine.datatypes import Explanation

#: names of settings and code words that must not be in the reader's words
CODE_WORDS = ("second_hop", "head_weight", "dense_weight", "dense_temperature", "dense_agree", "dense_first",
              "='", "one score =", "P / max P", "over its largest")

#: Explanation.to_dict()'s keys before this change (all kept)
KEYS = {"passage_id", "query", "mode", "rank", "score", "ranked_score", "placed_by", "walk", "seeds", "dense_prior",
        "dense_term", "check", "paths", "dense_score", "dense_rank", "used_fallback", "fallback_reason",
        "candidate_facts"}


def _plain(text: str) -> None:
    assert text and not any(w in text for w in CODE_WORDS), text


@pytest.mark.parametrize("hop,said", [
    ("wide", "The second walk is seeded like the first from the query's 2 best sentences instead of its best one."),
    ("bridge", "The second walk starts from the first walk's seeds plus the entities activated from them"),
    ("reseed", "The second walk starts from the first walk's seeds plus the bridge entities"),
    ("none", None)])
def test_each_second_hop_in_words_with_its_setting_apart(hop, said):
    from hippo_engine.retrieve.explain.fusion import FusedTerms
    from hippo_engine.retrieve.second.fusion import Fusion
    from hippo_engine.retrieve.second.second_hop import make_second_hop
    strategy = make_second_hop(hop)
    tr = {"ppr": np.array([0.1, 0.2, 0.05]), "dense": np.array([0.5, 0.4, 0.1]),
          "first": (None, np.array([0.3, 0.1, 0.2])) if strategy else None,
          "hop": strategy.describe() if strategy else None}
    terms = FusedTerms(Fusion(2, 2.0, 1.5, 0.015), tr, [0, 1, 2], lambda j, row: ([], 0.0, [], 0.0),
                       (lambda j, row: ([], 0.0, [], 0.0)) if strategy else None, [0, 2] if strategy else [])
    _plain(terms.note)
    assert terms.note.startswith("The score adds " + ("three" if strategy else "two") + " parts: how likely a ")
    assert "up to 1.5 for being about as close to the query as the closest passage" in terms.note
    if said:
        assert said in terms.note and "up to 2 if the first walk ranks it among its 2 likeliest" in terms.note
    assert terms.detail.endswith(f"; second_hop='{hop}'")
    assert "dense_weight=1.5 x exp((cos - best cos) / dense_temperature=0.015)" in terms.detail
    assert ("head_weight=2 x P1 / max P1 on the first walk's second_hop_head=2 best passages" in terms.detail) \
        == bool(strategy)


def test_the_cli_tree_says_the_placement_in_words_and_the_settings_on_their_own_line():
    from hippo_engine.cli.explain import passage_lines
    base = dict(passage_id="p", score=0.2, seeds=[], dense_prior=0.2, paths=[], dense_score=0.9, dense_rank=1,
                rank=1, ranked_score=3.0, walk="The score adds two parts: ...", walk_detail="score = P / max P")
    for placed in ("ppr", "score", "dense_first", "dense_agree"):
        lines = passage_lines(Explanation(**base, placed_by=placed), "T")
        placement = lines[1].split(";", 1)[0] if placed != "dense_first" else lines[1]
        assert f"by {placed}" not in placement and f"placed by {placed}" not in lines[1], lines[1]
        if placed.startswith("dense_"):
            assert f"(setting {placed})" in lines[1] or f"; setting {placed})" in lines[1], lines[1]
        assert lines[2] == "├─ how it is scored: The score adds two parts: ..."
        assert lines[3] == "├─ settings: score = P / max P"


@pytest.fixture(scope="module")
def ner_index(tmp_path_factory):
    from test_cli import DOCS

    from hippo_engine.cli import main
    folder = tmp_path_factory.mktemp("words")
    corpus = folder / "c.json"
    corpus.write_text(json.dumps(DOCS))
    assert main(["index", str(corpus), "--save-dir", str(folder / "idx"), "--extractor", "ner", "--quiet"]) == 0
    return str(folder / "idx")


@pytest.mark.slow
def test_real_explanations_speak_plainly_and_keep_their_numbers(ner_index):
    from hippo_engine import HippoRAG
    with HippoRAG(ner_index) as rag:
        sol = rag.retrieve(["Where was Barack Obama born?"], 3, explain=True)[0]
    assert sol.explanations
    for e in sol.explanations:
        _plain(e.walk)
        d = e.to_dict()
        assert set(d) == KEYS | {"walk_detail"} and Explanation.from_dict(d) == e
        assert "second_hop='wide'" in e.walk_detail and "second_hop_head=2" in e.walk_detail
        assert abs(sum(s.contribution for s in e.seeds) + e.dense_prior + e.dense_term - e.score) == \
            pytest.approx(e.check, abs=1e-12)


@pytest.mark.slow
def test_real_cli_tree_has_the_words_and_a_settings_line(ner_index, capsys):
    from hippo_engine.cli import main
    assert main(["explain", "--save-dir", ner_index, "-q", "Where was Barack Obama born?", "--top-k", "2",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    words = [ln for ln in out.splitlines() if ln.startswith("├─ how it is scored: ")]
    settings = [ln for ln in out.splitlines() if ln.startswith("├─ settings: score = ")]
    assert len(words) == 2 and len(settings) == 2
    for ln in words:
        _plain(ln)
    assert all("second_hop='wide'" in ln for ln in settings)
