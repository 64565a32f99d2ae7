"""Evidence-derived gold passages (2WikiMultihopQA without supporting_facts): each matching rule on
a small synthetic corpus, the dataset format rule, LinearRAG's layout, and the real shared file."""
import json
from collections import Counter
from pathlib import Path

import pytest

from hippo_engine.evaluation.datasets import DatasetError, load_dataset, parse_questions
from hippo_engine.evaluation.evidence_gold import chain_sources, derive_gold, fold, has_evidence_only, strip_parens

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

PAGES = {
    "Lothair II": "Lothair II was a king. His mother was Ermengarde of Tours.",
    "Ermengarde of Tours": "Ermengarde of Tours died on 20 March 851. Her father was Hugh of Tours.",
    "Hugh of Tours": "Hugh of Tours was a count.",
    "976-Evil II": "976-Evil II is a 1991 horror film.",
    "Get Carter": "Get Carter is a 1971 British crime film.",
    "Get Carter (2000 film)": "Get Carter is a 2000 American action film starring Sylvester Stallone.",
    "Damage (Pharoahe Monch song)": "Damage is a song by Pharoahe Monch.",
    "Bogislaw XIII, Duke of Pomerania": "Bogislaw XIII was born on 9 August 1544.",
    "Edsel Ford": "Edsel Bryant Ford was an American businessman born in Detroit.",
    "Irina Paley": "Princess Irina Paley was born in Paris in 1903.",
    "Sherry Hormann": "Sherry Hormann is a film director born in Kingston.",
    "Charles Howard, 10th Earl of Carlisle": "Charles Howard, styled Viscount Morpeth until 1738, was born in London.",
    "Phoolwari": "Phoolwari is a film directed by Zabou Breitman.",
    "Zabou Breitman": "Isabelle Breitman, known as Zabou, was born on 30 October 1959.",
    "Lisbeth Palme": "Lisbeth Palme was a Swedish child psychologist.",
    "Maurice, Prince of Orange": "Maurice was born in Dillenburg and died on 23 April 1625.",
}
DOCS = [f"{t}\n{x}" for t, x in PAGES.items()]


def doc(title):
    return f"{title}\n{PAGES[title]}"


def q(qid, question, evidence, qtype="comparison"):
    return {"id": qid, "question": question, "answer": "x", "question_type": qtype, "evidence": evidence}


QUESTIONS = [
    q("exact", "When did Lothair II's mother die?",
      [["Lothair II", "mother", "Ermengarde of Tours"], ["Ermengarde of Tours", "father", "Hugh of Tours"]],
      "compositional"),
    q("variant", "Which film came out first, 976-Evil II or Get Carter (2000 Film)?",
      [["976-EVIL II", "publication date", "1991"], ["Get Carter", "cast member", "Sylvester Stallone"]]),
    q("paren_comma", "Who was born first?",
      [["Damage", "performer", "Pharoahe Monch"], ["Bogislaw XIII", "date of birth", "9 August 1544"]]),
    q("prefix_tokens", "Who was born first, Edsel Bryant Ford or Irina Pavlovna Paley?",
      [["Edsel Bryant Ford", "place of birth", "Detroit"], ["Irina Pavlovna Paley", "place of birth", "Paris"]]),
    q("fuzzy_mention", "Were Sherry Horman and Viscount Morpeth born in the same place?",
      [["Sherry Horman", "place of birth", "Kingston"], ["Viscount Morpeth", "place of birth", "London"]]),
    q("chain", "When was the director of film Phoolwari born?",
      [["Phoolwari", "director", "Zabou Breitman"], ["Zabou", "date of birth", "30 October 1959"]], "compositional"),
    q("question_title", "When was Lisbeth Palme born?", [["Lisbet Palme", "date of birth", "14 March 1931"]]),
    q("named_label", "When did Maurice, Prince Of Orange die?",
      [["Maurice of Nassau", "date of death", "23 April 1625"]]),
    q("same_label", "Where was Maurice of Nassau born?", [["Maurice of Nassau", "place of birth", "Dillenburg"]]),
    q("partial", "Who was born first, Lothair II or Nobody Known?",
      [["Lothair II", "date of birth", "835"], ["Nobody Known", "date of birth", "1900"]]),
]


def test_each_rule_on_a_small_corpus():
    gold, stats = derive_gold(QUESTIONS, DOCS)
    by_id = {x["id"]: g for x, g in zip(QUESTIONS, gold, strict=True)}
    # subjects' pages in evidence order; the final object's page (Hugh of Tours) is not gold
    assert by_id["exact"] == [doc("Lothair II"), doc("Ermengarde of Tours")]
    assert by_id["variant"] == [doc("976-Evil II"), doc("Get Carter (2000 film)")]
    assert by_id["paren_comma"] == [doc("Damage (Pharoahe Monch song)"), doc("Bogislaw XIII, Duke of Pomerania")]
    assert by_id["prefix_tokens"] == [doc("Edsel Ford"), doc("Irina Paley")]
    assert by_id["fuzzy_mention"] == [doc("Sherry Hormann"), doc("Charles Howard, 10th Earl of Carlisle")]
    assert by_id["chain"] == [doc("Phoolwari"), doc("Zabou Breitman")]
    assert by_id["question_title"] == [doc("Lisbeth Palme")]
    assert by_id["named_label"] == by_id["same_label"] == [doc("Maurice, Prince of Orange")]
    assert by_id["partial"] == [doc("Lothair II")]          # the unmatched subject: partial gold, kept
    assert stats["rules"] == {"exact": 4, "normalized": 1, "named_variant": 1, "paren": 1, "comma_head": 1,
                              "text_prefix": 1, "tokens": 1, "fuzzy": 1, "text_mention": 1, "chain": 1,
                              "question_title": 2, "same_label": 1, "unmatched": 1}
    assert stats["complete"] == [True] * 9 + [False]
    assert stats["coverage"]["all"] == {"questions": 10, "complete": 9}
    assert stats["coverage"]["compositional"] == {"questions": 2, "complete": 2}
    assert stats["unmatched"] == [{"id": "partial", "subject": "Nobody Known", "reason": "unmatched"}]


def test_results_do_not_depend_on_question_or_corpus_order():
    gold, stats = derive_gold(QUESTIONS, DOCS)
    gold_r, stats_r = derive_gold(QUESTIONS[::-1], DOCS[::-1])
    assert gold_r[::-1] == gold and Counter(stats_r["rules"]) == Counter(stats["rules"])


def test_unconfirmed_pick_is_refused():
    # "Bogislaw XIII" -> the comma title by rule comma_head, but nothing confirms it here
    gold, stats = derive_gold([q("x", "Who?", [["Bogislaw XIII", "spouse", "Anna"]])], DOCS)
    assert gold == [[]] and stats["rules"] == {"unmatched": 1}


def test_helpers():
    assert fold("976-EVIL  Ïí & co.") == "976 evil ii and co"
    assert strip_parens("Geoffrey III (died 1202), Count of Perche") == "Geoffrey III, Count of Perche"
    assert chain_sources([["A", "r", "B"], ["B", "s", "x"]], "compositional") == {0: None, 1: 0}
    bridge = [["F1", "director", "P"], ["F2", "director", "Q"], ["P", "born", "x"], ["Q", "born", "y"]]
    assert chain_sources(bridge, "bridge_comparison") == {0: None, 1: None, 2: 0, 3: 1}
    assert has_evidence_only({"evidence": [["a", "r", "b"]]})
    assert not has_evidence_only({"evidence": [["a", "r", "b"]], "context": []})
    assert not has_evidence_only({"evidence": []})
    with pytest.raises(ValueError, match="duplicate corpus title"):
        derive_gold(QUESTIONS[:1], ["A\none", "A\ntwo"])


def test_format_rule_in_parse_questions():
    samples = QUESTIONS[:2] + [{"question": "plain?", "answer": "a"},
                               {"question": "ctx?", "answer": "a", "evidence": [["Phoolwari", "director", "Z"]],
                                "context": [["Edsel Ford", ["x"]]], "supporting_facts": [["Edsel Ford", 0]]}]
    _, gold, _, _, counts = parse_questions(samples, DOCS, "2wikimultihopqa")
    assert gold[0] == [doc("Lothair II"), doc("Ermengarde of Tours")]
    assert gold[2] == [] and gold[3] == [doc("Edsel Ford")]      # context rule wins over evidence
    assert counts == {"by_title": 1, "evidence_exact": 2, "evidence_normalized": 1, "evidence_named_variant": 1,
                      "evidence_questions": 2, "evidence_complete": 2}
    with pytest.raises(DatasetError, match="duplicate corpus title"):
        parse_questions(QUESTIONS[:1], ["A\none", "A\ntwo"])


def _linearrag_layout(root: Path) -> Path:
    folder = root / "2wikimultihopqa"
    (folder / "linearrag_format").mkdir(parents=True)
    (folder / "2wikimultihopqa_corpus.json").write_text(
        json.dumps([{"title": t, "text": x} for t, x in PAGES.items()]), encoding="utf-8")
    (folder / "linearrag_format" / "questions.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return folder


def test_linearrag_layout_by_name_folder_and_file(tmp_path):
    folder = _linearrag_layout(tmp_path)
    ds = load_dataset("2wikimultihopqa", data_root=tmp_path)
    assert ds.name == "2wikimultihopqa" and len(ds) == 10 and ds.docs == DOCS
    assert ds.path == folder / "linearrag_format" / "questions.json"
    assert ds.corpus_path == folder / "2wikimultihopqa_corpus.json"
    assert ds.gold_match["evidence_questions"] == 10 and ds.gold_match["evidence_complete"] == 9
    assert ds.gold_docs[0] == [doc("Lothair II"), doc("Ermengarde of Tours")] and ds.gold_docs[9]
    assert load_dataset(folder).name == load_dataset(ds.path).name == "2wikimultihopqa"
    # the folder's own <name>.json, when there is one, comes before its LinearRAG copy
    (folder / "2wikimultihopqa.json").write_text(json.dumps([{"question": "q", "answer": "a"}]), encoding="utf-8")
    assert load_dataset(folder).path == folder / "2wikimultihopqa.json"


def test_explicit_corpus_file(tmp_path):
    folder = _linearrag_layout(tmp_path)
    qfile = tmp_path / "my_questions.json"
    qfile.write_text(json.dumps(QUESTIONS[:1]), encoding="utf-8")
    ds = load_dataset(qfile, corpus=folder / "2wikimultihopqa_corpus.json", name="toy")
    assert ds.name == "toy" and ds.gold_docs == [[doc("Lothair II"), doc("Ermengarde of Tours")]]
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(qfile, corpus=tmp_path / "missing.json")


def test_real_2wiki_questions():
    if not (DATA / "2wikimultihopqa" / "linearrag_format" / "questions.json").is_file():
        pytest.skip(f"2WikiMultihopQA data not found under {DATA}")
    ds = load_dataset("2wikimultihopqa", data_root=DATA)
    assert len(ds) == 1000 and len(ds.docs) == 6119
    assert ds.gold_match["evidence_questions"] == ds.gold_match["evidence_complete"] == 1000
    assert ds.gold_match["evidence_exact"] == 2199 and "evidence_unmatched" not in ds.gold_match
    assert [d.split("\n", 1)[0] for d in ds.gold_docs[0]] == ["Lothair II", "Ermengarde of Tours"]
    sizes = Counter(len(g) for g in ds.gold_docs)
    assert sizes == {2: 765, 4: 235}
