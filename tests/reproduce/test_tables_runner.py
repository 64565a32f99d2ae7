"""The shared index, the result caches and the report header (reproduce/tables/runner.py)."""
import json

import pytest
from fakes import NoCallLLM
from toy_tables import CountingLLM, make_dataset, run


def test_rerun_uses_cached_results_and_resumes_after_crash(env):
    llm = CountingLLM()
    first = run(env, "table-recall", llm=llm).read_text()
    calls = llm.calls
    assert calls > 0
    again = run(env, "table-recall", llm=llm).read_text()
    assert llm.calls == calls  # nothing recomputed
    assert "nothing (all results cached)" in again
    def table(text):  # method, R@2, R@5 (times differ between runs)
        return [ln.split("|")[1:4] for ln in text.splitlines() if ln.startswith(("| HippoRAG 2", "| Dense"))]
    assert table(first) == table(again)
    # crash: keep the header and two results of the HippoRAG 2 run, then a torn line
    (f,) = [p for p in (env["save"] / "reproduce_runs").glob("retrieval-default-*.jsonl")]
    lines = f.read_text().splitlines()
    f.write_text("\n".join(lines[:3]) + '\n{"key": "torn', encoding="utf-8")
    llm2 = CountingLLM()
    resumed = run(env, "table-recall", llm=llm2).read_text()
    assert "hipporag2: 4 question(s)" in resumed
    assert table(resumed) == table(first)
    assert 0 < llm2.calls < calls


def test_save_dir_built_from_other_inputs_is_refused(env):
    run(env, "table-graph", "--no-filter")
    other = env["tmp"] / "other"
    other.mkdir()
    (other / "toyset.json").write_text((env["data"] / "toyset.json").read_text())
    (other / "toyset_corpus.json").write_text(json.dumps([{"title": "X", "text": "Y."}]))
    with pytest.raises(RuntimeError, match="corpus_sha256"):
        run(env, "table-graph", "--no-filter", dataset=other)


def test_openie_file_is_imported_and_no_llm_is_needed(env):
    run(env, "table-graph", "--no-filter")
    (openie,) = env["save"].glob("openie_results_ner_*.json")
    data = make_dataset(env["tmp"] / "with_openie", name="toyset")
    (data / "openie_toy_results.json").write_text(openie.read_text())
    env2 = dict(env, save=env["tmp"] / "index2")
    text = run(env2, "table-graph", "--no-filter", llm=NoCallLLM(), dataset=data).read_text()
    assert "`openie_toy_results.json` (file, imported; no LLM call)" in text
    assert "| passages sent to the LLM for OpenIE | 0 |" in text
