"""The table commands end to end through ``python -m reproduce`` (reproduce/tables/cli.py)."""
import json

import pytest
from fakes import NgramEncoder, NoCallLLM
from helpers import CORPUS
from toy_tables import CountingLLM, make_dataset, run

from reproduce.tables.cli import TABLES


def test_every_table_end_to_end(env):
    llm, enc = CountingLLM(), NgramEncoder()
    paths = {c: run(env, c, llm=llm, encoder=enc) for c in TABLES}
    for cmd, path in paths.items():
        text = path.read_text()
        assert path.parent == env["out"] / "toyset"
        assert f"python -m reproduce {cmd} --dataset" in text and "git commit" in text
        assert "wall time" in text and "LLM tokens" in text and "fake-ngram" in text
    assert {p.name for p in (env["out"] / "toyset").iterdir()} == {
        "recall.md", "recall.png", "ablations.md", "ablations.png", "weights.md", "weights.png", "qa.md", "graph.md"}
    recall = paths["table-recall"].read_text()
    assert "HippoRAG 2 |" in recall and "Dense retrieval (fake-ngram)" in recall and "n/a" in recall
    abl = paths["table-ablations"].read_text()
    for row in ("NER-to-node", "Query-to-node", "w/o passage nodes", "w/o recognition filter", "Ordering check"):
        assert row in abl
    assert "not run" not in abl
    weights = paths["table-weights"].read_text()
    assert all(f"| {w}" in weights for w in ("0.01", "0.05 (default)", "0.1", "0.3", "0.5"))
    qa = paths["table-qa"].read_text()
    assert "HippoRAG 2 + reader" in qa and "EM" in qa and "toy-llm" in qa
    graph = paths["table-graph"].read_text()
    assert "entity nodes" in graph and "indexing wall time" in graph
    # the index was built once and reused by every table and configuration
    manifest = json.loads((env["save"] / "reproduce_manifest.json").read_text())
    assert len(manifest["builds"]) == 1 and manifest["graph"]["passage_nodes"] == len(CORPUS)


def test_no_filter_tables_never_call_the_llm(env):
    run(env, "table-graph", "--no-filter")  # builds the index with the toy OpenIE
    for cmd, extra in (("table-recall", []), ("table-weights", []), ("table-graph", []),
                       ("table-ablations", ["--only", "full,query,no_passage"])):
        path = run(env, cmd, "--no-filter", *extra, llm=NoCallLLM())
        text = path.read_text()
        assert "recognition filter | off" in text and "0 tokens spent" in text
    abl = (env["out"] / "toyset" / "ablations-no-filter.md").read_text()
    assert "Filter off in every row" in abl and "not run (add `--only ner`)" in abl
    assert "w/o recognition filter" not in abl
    assert (env["out"] / "toyset" / "recall-no-filter.md").exists()
    assert "HippoRAG 2 (filter off)" in (env["out"] / "toyset" / "recall-no-filter.md").read_text()


def test_dataset_without_gold(env):
    data = make_dataset(env["tmp"] / "nogold", name="toyqa", gold=False)
    with pytest.raises(SystemExit, match="no gold passages"):
        run(env, "table-recall", dataset=data)
    qa = run(env, "table-qa", dataset=data).read_text()
    assert "R@5 of passages read" in qa and "| n/a |" in qa
