"""``python -m reproduce`` table commands end to end on a tiny synthetic dataset (fake LLM and
fake embedder; seconds)."""
import json
import re

import pytest
from fakes import NgramEncoder, NoCallLLM, ScriptedLLM
from helpers import CORPUS, toy_respond

from hippo_engine import HippoRAG
from hippo_engine.evaluation.metrics import recall_at_k
from hippo_engine.llm.base import LLMResponse
from reproduce import tables
from reproduce.tables import MeteredLLM, ResultCache, main, paired_difference, paper_column, recall_curve

# (question, gold passage indices into helpers.CORPUS, answer)
QUESTIONS = [("Where was Ilse Marrow born?", [1], "Velor"),
             ("Who founded Tamsin College?", [3], "Oren Pike"),
             ("In which country is the town where Ilse Marrow was born?", [1, 2], "Kaldavia"),
             ("Who founded the fair held in Velor?", [6], "Mira Olt"),
             ("Whom did the founder of the Amber Fair marry?", [6, 7], "Oren Pike"),
             ("Which river does the capital of Kaldavia lie on?", [5], "Tamsin River")]


def make_dataset(folder, name="toyset", gold=True, questions=QUESTIONS):
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [{"title": d.split("\n", 1)[0], "text": d.split("\n", 1)[1]} for d in CORPUS]
    qs = []
    for i, (q, g, a) in enumerate(questions):
        item = {"id": f"q{i}", "question": q, "answer": a, "answer_aliases": []}
        if gold:
            item["paragraphs"] = [{"title": c["title"], "paragraph_text": c["text"], "is_supporting": j in g}
                                  for j, c in enumerate(corpus)]
        qs.append(item)
    (folder / f"{name}.json").write_text(json.dumps(qs))
    (folder / f"{name}_corpus.json").write_text(json.dumps(corpus))
    return folder


def respond(messages):
    """OpenIE and query NER (toy), the DSPy filter (keeps the first two candidates), the reader
    (answers with the title of the first passage it sees)."""
    user = messages[-1]["content"]
    if "[[ ## candidate_facts ## ]]" in user:
        body = user.split("[[ ## candidate_facts ## ]]", 1)[1].split("[[ ##", 1)[0]
        facts = json.loads(body.strip().split("\n\n", 1)[0])
        return f"[[ ## relevant_facts ## ]]\n{json.dumps(facts[:2])}\n\n[[ ## completed ## ]]"
    if "Question:" in user and "Thought:" in user:
        m = re.search(r"Wikipedia Title: ([^\n]+)", user)
        return f"The passages say so. Answer: {m.group(1) if m else 'unknown'}"
    return toy_respond(messages)


class CountingLLM(ScriptedLLM):
    """ScriptedLLM that reports the second identical prompt as cached, like the engine's cache."""

    def __init__(self):
        super().__init__(respond, name="toy-llm")
        self.seen = set()

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        key = json.dumps(messages, sort_keys=True)
        with self._lock:
            cached = key in self.seen
            self.seen.add(key)
        r = super().generate(messages)
        return LLMResponse(r.text, prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                           cached=cached)


@pytest.fixture()
def env(tmp_path):
    data = make_dataset(tmp_path / "data" / "toyset")
    return {"data": data, "save": tmp_path / "index", "out": tmp_path / "results", "tmp": tmp_path}


def run(env, command, *extra, llm=None, encoder=None, dataset=None):
    argv = [command, "--dataset", str(dataset or env["data"]), "--save-dir", str(env["save"]),
            "--out", str(env["out"]), "--quiet", *extra]
    return main(argv, llm=llm or CountingLLM(), encoder=encoder or NgramEncoder(), )


def test_every_table_end_to_end(env):
    llm, enc = CountingLLM(), NgramEncoder()
    paths = {c: run(env, c, llm=llm, encoder=enc) for c in tables.TABLES}
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


def test_recall_curve_matches_engine_metrics(env):
    run(env, "table-recall", "--no-filter", llm=NoCallLLM() if False else CountingLLM())
    (f,) = [p for p in (env["save"] / "reproduce_runs").glob("retrieval-use_filter=False-*.jsonl")]
    entries = list(ResultCache(f, {}).load().values())
    rag = HippoRAG(env["save"], llm=NoCallLLM(), encoder=NgramEncoder(), use_filter=False, show_progress=False)
    qs = [q for q, _, _ in QUESTIONS]
    gold = [[CORPUS[j] for j in g] for _, g, _ in QUESTIONS]
    _, metrics = rag.retrieve(qs, gold_docs=gold)
    ks = [1, 2, 5, 10]
    ours = recall_curve(entries, ks)
    assert {f"Recall@{k}": ours[k] for k in ks} == pytest.approx({f"Recall@{k}": metrics[f"Recall@{k}"] for k in ks})
    assert recall_at_k([[]], [[]], ks=[1]) == {"Recall@1": 0.0}
    assert recall_curve([{"gold_ranks": [], "n_gold": 0}], [1]) == {1: 0.0}


def test_limit_and_paper_figures_for_musique_like_name(env):
    data = make_dataset(env["tmp"] / "data2", name="musique_toy")
    path = run(env, "table-ablations", "--limit", "3", "--no-filter", "--only", "full,query,no_passage",
               dataset=data)
    text = path.read_text()
    assert "first 3 of 6 questions (`--limit 3`)" in text
    assert "73.0" in text and "44.9" in text and "63.7" in text  # paper Table 4, MuSiQue column
    assert "not `musique_toy`" in text
    assert path == env["out"] / "musique_toy" / "ablations-no-filter-first3.md"


def test_dataset_without_gold(env):
    data = make_dataset(env["tmp"] / "nogold", name="toyqa", gold=False)
    with pytest.raises(SystemExit, match="no gold passages"):
        run(env, "table-recall", dataset=data)
    qa = run(env, "table-qa", dataset=data).read_text()
    assert "R@5 of passages read" in qa and "| n/a |" in qa


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


def test_metered_llm_counts_cache_hits_and_loads_lazily():
    made = []

    def factory():
        made.append(1)
        return CountingLLM()

    m = MeteredLLM(factory, "toy")
    assert not m.loaded and not made
    msgs = [{"role": "user", "content": "Passage:\nIlse Marrow"}]
    m.generate(msgs)
    m.generate_many([msgs, msgs])
    c = m.snapshot()
    assert made == [1] and c["calls"] == 3 and c["cache_hits"] == 2
    assert c["prompt_tokens"] == 10 and c["cached_prompt_tokens"] == 20


def test_paper_column():
    assert paper_column("musique") == "MuSiQue" and paper_column("musique_train") == "MuSiQue"
    assert paper_column("2wikimultihopqa") == "2Wiki" and paper_column("hotpotqa") == "HotpotQA"
    assert paper_column("nq_rear") == "NQ" and paper_column("popqa") == "PopQA"
    assert paper_column("lveval") is None and paper_column("narrativeqa_dev_10_doc") is None


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


def test_paired_difference():
    a = [{"gold_ranks": [1], "n_gold": 1}, {"gold_ranks": [None], "n_gold": 1}, {"gold_ranks": [3, 9], "n_gold": 2}]
    b = [{"gold_ranks": [7], "n_gold": 1}, {"gold_ranks": [2], "n_gold": 1}, {"gold_ranks": [3, 4], "n_gold": 2}]
    p = paired_difference(a, b, k=5)
    assert p["better"] == 1 and p["worse"] == 2
    assert p["mean"] == pytest.approx((1 - 1 - 0.5) / 3)
    assert p["low"] <= p["mean"] <= p["high"]
    assert paired_difference(a, b, k=5) == p  # deterministic
