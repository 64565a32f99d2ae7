"""Table 2, QA (reproduce/tables/qa.py)."""
from toy_tables import QUESTIONS, CountingLLM, respond, run

from reproduce.tables.results import ResultCache


def test_reader_and_metrics_values(env):
    path = run(env, "table-qa")
    rows = {ln.split("|")[1].strip(): ln for ln in path.read_text().splitlines()
            if ln.startswith("| ") and "reader |" in ln}
    assert set(rows) == {"Dense retrieval (fake-ngram) + reader", "HippoRAG 2 + reader"}
    cache = sorted((env["save"] / "reproduce_runs").glob("qa-*.jsonl"))
    assert len(cache) == 2
    for f in cache:
        entries = ResultCache(f, {}).load()
        assert len(entries) == len(QUESTIONS)
        assert all(0.0 <= e["em"] <= e["f1"] <= 1.0 for e in entries.values())


def test_failed_reader_call_is_reported_and_retried_on_rerun(env):
    from hippo_engine.llm.base import LLMError

    def flaky(messages):
        if "Question: Who founded Tamsin College?" in messages[-1]["content"]:
            raise LLMError("timeout")
        return respond(messages)

    llm = CountingLLM()
    llm.respond = flaky
    first = run(env, "table-qa", llm=llm).read_text()
    rows = [ln for ln in first.splitlines() if ln.startswith("| ") and "reader |" in ln]
    assert all(ln.rstrip(" |").endswith("1") for ln in rows)  # one reader error per method
    again = run(env, "table-qa").read_text()
    assert "qa:dense: 1 question(s)" in again and "qa:hipporag2: 1 question(s)" in again
    rows = [ln for ln in again.splitlines() if ln.startswith("| ") and "reader |" in ln]
    assert all(ln.rstrip(" |").endswith("0") for ln in rows)
