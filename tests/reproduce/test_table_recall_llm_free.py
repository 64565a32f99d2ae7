"""python -m reproduce table-recall-llm-free on a tiny MuSiQue-format dataset, with the real spaCy pipeline
and embedder: titled and untitled indexes built once and reused, every row measured, the new default row
(the engine's defaults) checked against HippoRAG.retrieve, the table and its JSON written, no LLM call."""
import json

from reproduce.cli import main

PASSAGES = [("Green (album)", "Green is the fourth studio album by the English guitarist Steve Hillage."),
            ("Steve Hillage", "Steve Hillage is an English musician. He married Miquette Giraudy in 1979."),
            ("Miquette Giraudy", "Miquette Giraudy is a French keyboard player, born in Nice."),
            ("Green", "Green is the colour between cyan and yellow."),
            ("Gong (band)", "Gong is a rock band formed in Paris by Daevid Allen."),
            ("Nice", "Nice is a city on the French Riviera.")]
QUESTIONS = [("Who is the spouse of the Green performer?", [0, 1], "Miquette Giraudy"),
             ("Where was the wife of Steve Hillage born?", [1, 2], "Nice")]


def make_data(root):
    folder = root / "musique" / "hipporag_v1_train"
    folder.mkdir(parents=True)
    corpus = [{"title": t, "text": x} for t, x in PASSAGES]
    (folder / "musique_train_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    qs = [{"id": f"q{i}", "question": q, "answer": a,
           "paragraphs": [{"title": PASSAGES[g][0], "paragraph_text": PASSAGES[g][1], "is_supporting": True}
                          for g in gold]} for i, (q, gold, a) in enumerate(QUESTIONS)]
    (folder / "musique_train.json").write_text(json.dumps(qs), encoding="utf-8")


def test_table_on_a_tiny_dataset(tmp_path, capsys):
    make_data(tmp_path / "data")
    out = tmp_path / "table.md"
    argv = ["table-recall-llm-free", "--datasets", "musique", "--work", str(tmp_path / "work"),
            "--data", str(tmp_path / "data"), "--out", str(out)]
    assert main(argv) == 0
    text = out.read_text(encoding="utf-8")
    for heading in ("musique, titled passages", "musique, untitled passages"):
        assert heading in text
    results = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert [r["titles"] for r in results] == [True, False]
    for r in results:
        assert set(r["rows"]) == {"dense", "ner", "ner+df1", "ner+agree2", "topic", "wide", "bridge", "reseed", "old",
                                  "new"}
        assert all(0 <= v <= 100 for row in r["rows"].values() for v in row["recall"].values())
        assert r["rows"]["ner"]["recall"]["20"] == 100.0          # six passages: everything in the top 20
        assert "new default" in r["rows"]["new"]["label"] and "one walk" in r["rows"]["ner"]["label"]
    assert results[0]["build"]["passages"] == 6 and results[1]["build"]["cached_texts"] > 0
    assert main(argv + ["--rows", "ner,default", "--titles", "titled"]) == 0    # reused; "default" is "new"
    again = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert set(again[0]["rows"]) == {"ner", "new"} and again[0]["build"] == results[0]["build"]
    assert "unknown row" in str(_error(argv + ["--rows", "nope"]))


def _error(argv):
    try:
        main(argv)
    except SystemExit as e:
        return e
    return None
