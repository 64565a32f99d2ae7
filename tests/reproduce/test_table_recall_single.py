"""python -m reproduce table-recall-llm-free on the single-relation sets (issue 38) of a tiny 2Wiki-format dataset
(LinearRAG's layout, evidence triples only), real spaCy and embedder: the set and its half are generated, share
the 2Wiki index (built once per titled / untitled variant), and get per-gold-kind recall; no LLM call."""
import json

from reproduce.cli import main
from reproduce.recall_data import load

PAGES = {
    "Lothair II": "Lothair II was a Frankish king. His mother was Ermengarde of Tours.",
    "Ermengarde of Tours": "Ermengarde of Tours was a queen who died on 20 March 851.",
    "Phoolwari": "Phoolwari is a 1946 Indian film directed by Zabou Breitman.",
    "Zabou Breitman": "Zabou Breitman is a French actress and director born in Paris.",
    "Edsel Ford": "Edsel Bryant Ford was an American businessman, the son of Henry Ford.",
    "Henry Ford": "Henry Ford was an American industrialist born in Springwells.",
}
EVIDENCE = [
    [["Lothair II", "mother", "Ermengarde of Tours"], ["Ermengarde of Tours", "date of death", "20 March 851"]],
    [["Phoolwari", "director", "Zabou Breitman"], ["Zabou Breitman", "place of birth", "Paris"]],
    [["Edsel Ford", "father", "Henry Ford"], ["Henry Ford", "place of birth", "Springwells"]],
]


def make_data(root):
    folder = root / "2wikimultihopqa"
    (folder / "linearrag_format").mkdir(parents=True)
    (root / "musique").mkdir()
    corpus = [{"title": t, "text": x} for t, x in PAGES.items()]
    (folder / "2wikimultihopqa_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    qs = [{"id": f"q{i}", "question": f"Question {i} about {ev[0][0]}?", "answer": ev[1][2],
           "question_type": "compositional", "evidence": ev} for i, ev in enumerate(EVIDENCE)]
    (folder / "linearrag_format" / "questions.json").write_text(json.dumps(qs), encoding="utf-8")


def test_the_loader_generates_the_set_its_halves_and_the_untitled_variant(tmp_path):
    make_data(tmp_path)
    full = load("2wiki_single", True, tmp_path)
    first, second = load("2wiki_single_first", True, tmp_path), load("2wiki_single_second", True, tmp_path)
    assert len(full.questions) == 6 and full.questions == first.questions + second.questions
    assert full.docs == load("2wiki", True, tmp_path).docs                     # the same shuffled corpus
    lothair = full.questions.index(next(q for q in full.questions if "Lothair II" in q))
    assert [g.split("\n")[0] for g in full.gold_docs[lothair]] == ["Lothair II", "Ermengarde of Tours"]
    assert full.gold_answers[lothair] == ["Ermengarde of Tours"]
    untitled = load("2wiki_single", False, tmp_path)
    assert untitled.questions == full.questions
    assert untitled.gold_docs[lothair] == [PAGES["Lothair II"], PAGES["Ermengarde of Tours"]]
    assert load("2wiki_single", True, tmp_path, limit=2).questions == full.questions[:2]
    assert [i.split(":")[0] for i in full.question_ids] == ["first"] * len(first.questions) + ["second"] * 3
    assert full.question_ids[lothair].endswith(":Lothair II|mother")


def test_table_on_the_single_relation_sets(tmp_path, capsys):
    make_data(tmp_path / "data")
    out, work = tmp_path / "table.md", tmp_path / "work"
    argv = ["table-recall-llm-free", "--datasets", "2wiki_single,2wiki_single_first", "--rows", "dense,ner,new",
            "--work", str(work), "--data", str(tmp_path / "data"), "--out", str(out)]
    assert main(argv) == 0
    text = out.read_text(encoding="utf-8")
    for heading in ("2wiki_single, titled passages", "2wiki_single, untitled passages",
                    "2wiki_single_first, titled passages", "Per gold kind"):
        assert heading in text
    results = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert [(r["dataset"], r["titles"]) for r in results] == [
        ("2wiki_single", True), ("2wiki_single", False), ("2wiki_single_first", True), ("2wiki_single_first", False)]
    assert results[0]["questions"] == 6 and 3 <= results[2]["questions"] < 6
    for r in results:
        assert set(r["rows"]) == {"dense", "ner", "new"}
        for row in r["rows"].values():
            assert set(row["recall"]) == {"1", "2", "5", "10", "20"}
            assert set(row["kinds"]) == {"subject", "answer"}
            assert row["kinds"]["subject"]["20"] == 100.0                     # six passages: all in the top 20
            assert set(row["halves"]) == ({"first", "second"} if r["dataset"] == "2wiki_single" else {"first"})
    assert "Per half" in text and "first R@1" in text
    assert results[0]["rows"]["ner"]["halves"]["first"] == results[2]["rows"]["ner"]["recall"]
    # one index per variant, shared by the set, its half (and 2Wiki itself)
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == ["2wiki-titled-shuffle12345",
                                                                      "2wiki-untitled-shuffle12345"]
    assert results[0]["build"] == results[2]["build"] and results[0]["build"]["passages"] == 6
    try:
        main(argv[:2] + ["2wiki_single,nope"] + argv[3:])
    except SystemExit as e:
        assert "2wiki_single" in str(e)
    else:
        raise AssertionError("an unknown dataset name must be refused")
