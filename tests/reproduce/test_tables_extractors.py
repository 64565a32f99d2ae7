"""--extractor, --dense-first, --shuffle-corpus and --forbid-llm of the table commands, and the
reference rows of table-recall (reproduce/tables/cli.py, runner.py, recall.py)."""
import json

import pytest
from fakes import NgramEncoder, NoCallLLM
from toy_tables import CountingLLM, make_dataset, run

from reproduce.common import ForbiddenLLM


def test_ner_extractor_needs_no_llm_and_has_its_own_index(env):
    calls = ForbiddenLLM.calls
    path = run(env, "table-recall", "--extractor", "ner", "--dense-first", "1", "--forbid-llm", llm=NoCallLLM())
    assert path.name == "recall-ner-dense-first1.md"
    text = path.read_text()
    for row in ("| Dense retrieval (fake-ngram) |", '| HippoRAG 2, "ner" index (spaCy, no LLM, filter off) |',
                '| HippoRAG 2, "ner" index (spaCy, no LLM, filter off) + dense_first=1 |'):
        assert row in text
    assert "spaCy NER + sentences as facts, no LLM" in text and "0 tokens spent" in text
    assert "none: `--forbid-llm` made every LLM call an error" in text
    assert "recognition filter | off (the `ner` index never uses it" in text and ForbiddenLLM.calls == calls
    manifest = json.loads((env["tmp"] / "index-ner" / "reproduce_manifest.json").read_text())
    assert manifest["fingerprint"]["extractor"] == "ner" and manifest["builds"][0]["extractor"] == "ner"
    assert not (env["save"] / "reproduce_manifest.json").exists()   # the openie folder was not touched


def test_recall_side_by_side_and_fusion_rows(env):
    llm, enc = CountingLLM(), NgramEncoder()
    path = run(env, "table-recall", "--no-filter", "--extractor", "openie,ner", "--dense-first", "1",
               llm=llm, encoder=enc)
    assert path.name == "recall-openie-ner-dense-first1-no-filter.md"
    text = path.read_text()
    labels = ["Dense retrieval (fake-ngram)", "HippoRAG 2 (filter off)", "HippoRAG 2 (filter off) + dense_first=1",
              'HippoRAG 2, "ner" index (spaCy, no LLM, filter off)',
              'HippoRAG 2, "ner" index (spaCy, no LLM, filter off) + dense_first=1']
    table = text.split("## Recall@k")[1]
    assert [line.split(" | ")[0][2:] for line in table.splitlines() if line.startswith("| ")][2:] == labels
    assert "| openie: `" in text and "; ner: `" in text   # both indexes in the header
    assert "ner:hipporag2: 6 question(s)" in text and "hipporag2+df1: 6 question(s)" in text
    # dense_first=1 puts dense's first passage first: Recall@1 equals dense's on both indexes
    r1 = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in table.splitlines() if line.startswith("| ")}
    assert r1[labels[2]] == r1[labels[4]] == r1[labels[0]]
    # a rerun of the openie table alone reuses the cached results
    again = run(env, "table-recall", "--no-filter", llm=NoCallLLM(), encoder=enc).read_text()
    assert "nothing (all results cached)" in again


def test_dense_first_in_other_tables_and_one_extractor_only(env):
    enc = NgramEncoder()
    text = run(env, "table-weights", "--no-filter", "--dense-first", "2", "--weights", "0.05", encoder=enc).read_text()
    assert "| 0.05 (default) |" in text and "passage_node_weight = 0.05 (filter off) + dense_first=2" in text
    assert list((env["save"] / "reproduce_runs").glob("retrieval-dense_first=2_*"))
    with pytest.raises(SystemExit, match="only table-recall"):
        run(env, "table-graph", "--extractor", "openie,ner")
    with pytest.raises(SystemExit):
        run(env, "table-recall", "--extractor", "ner,ner")


def test_shuffled_corpus_gives_the_same_recall(env):
    enc = NgramEncoder()
    plain = run(env, "table-recall", "--extractor", "ner", "--forbid-llm", encoder=enc).read_text()
    shuffled = run(env, "table-recall", "--extractor", "ner", "--forbid-llm", "--shuffle-corpus", "7",
                   encoder=enc)
    assert shuffled.name == "recall-ner-shuffle7.md" and (env["tmp"] / "index-ner-shuffle7").is_dir()
    text = shuffled.read_text()
    assert "shuffled with seed 7" in text
    assert plain.split("## Recall@k")[1] == text.split("## Recall@k")[1].replace("recall-ner-shuffle7", "recall-ner")


def test_linearrag_reference_rows_only_for_musique_train(env):
    data = make_dataset(env["tmp"] / "mt", name="musique_train")
    text = run(env, "table-recall", "--extractor", "ner", dataset=data).read_text()
    assert "not computed by this command" in text and "| 31.3 | 50.5 | 66.8 | 76.7 | 84.0 |" in text
    assert "measured elsewhere with LinearRAG's public code" in text
    part = run(env, "table-recall", "--extractor", "ner", "--limit", "3", dataset=data).read_text()
    assert "LinearRAG" not in part
    assert "LinearRAG" not in run(env, "table-recall", "--extractor", "ner").read_text()
