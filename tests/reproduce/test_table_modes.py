"""reproduce/table_modes.py on the toy index (fakes): every mode's recall row (with a sampled mode), the QA
rows with LLM calls and tokens per query, and the README rendered from the saved JSON parts (the MuSiQue and
2Wiki runs themselves: reproduce/results/modes/README.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakes import ScriptedLLM

from hippo_engine.evaluation.datasets import Dataset
from reproduce.modes_qa import qa_rows
from reproduce.modes_report import _scores, load_parts, render, save_part, shown_command
from reproduce.table_modes import MODES, recall_rows

sys.path.insert(0, str(Path(__file__).parents[1] / "graphrag"))
from peer_fakes import PeerResponder, built_rag  # noqa: E402


def _entry(kind, rows, **kw):
    return {"kind": kind, "dataset": "MuSiQue", "variant": "openie", "questions": 2, "passages": 6, "rows": rows,
            "comm": {"communities": 3, "levels": {"0": 3}, "seconds": 0.1, "built": True}, "command": "c",
            "commit": "abc", "machine": "m", "wall_s": 1.0, "load_before": "a", "load_after": "b", **kw}


def test_rows_parts_and_readme_of_every_mode(tmp_path):
    from helpers import CORPUS
    rag, resp = built_rag(tmp_path / "idx")
    qs = ["Who founded Tamsin College?", "Where was Ilse Marrow born?"]
    ds = Dataset(name="toy", docs=list(CORPUS), questions=qs,
                 gold_docs=[[CORPUS[3], CORPUS[4]], [CORPUS[1]]], gold_answers=[["Oren Pike"], ["Velor"]])
    rows = recall_rows(rag, ds, MODES, sample=1, sampled=["graphrag_global"])
    assert set(rows) == set(MODES)
    assert all(0 <= r["recall"][2] <= r["recall"][5] <= 100 and r["llm_calls"] == 0 for r in rows.values())
    assert rows["graphrag_global"]["questions"] == 1 and rows["naive"]["questions"] == 2
    assert all(set(r["recall_sample"]) == {2, 5} for r in rows.values())
    rag._llm = ScriptedLLM(PeerResponder())
    qa = qa_rows(rag, ds, 2, ["naive", "graphrag_local", "graphrag_global"], sample=1, sampled=["graphrag_global"])
    assert qa["naive"]["calls"] == 1 and qa["graphrag_local"]["calls"] == 1 and qa["graphrag_global"]["calls"] > 1
    assert qa["graphrag_global"]["questions"] == 1 and qa["naive"]["questions"] == 2
    assert all(q["tokens"] == 15 * q["calls"] for q in qa.values())
    assert all(len(q["answers"]) == len(q["calls_each"]) == q["questions"] for q in qa.values())
    assert _scores(qa["naive"]["answers"], ds.gold_answers) == (qa["naive"]["em"], qa["naive"]["f1"])
    # a run stopped after its first question keeps it and the next run continues from the second
    partial: dict = {}

    def stop(mode, state):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qa_rows(rag, ds, 2, ["naive"], partial=partial, on_question=stop)
    assert len(partial["naive"]["answers"]) == 1 and partial["naive"]["context_cut"] == [0]
    del partial["naive"]["context_cut"]             # a state saved before the field existed continues
    again = qa_rows(rag, ds, 2, ["naive"], partial=partial)["naive"]
    assert again["contexts_cut"] == 0
    assert partial == {}
    keys = ("answers", "em", "f1", "calls", "tokens", "questions", "calls_each")
    assert {k: again[k] for k in keys} == {k: qa["naive"][k] for k in keys}

    save_part(tmp_path / "parts", _entry("recall", rows, sample={"n": 1, "modes": ["graphrag_global"],
                                                                  "reason": "slow"}))
    session = {"command": "c", "commit": "abc", "load_before": "a", "load_after": "b", "wall_s": 2, "modes": list(qa)}
    save_part(tmp_path / "parts", _entry("qa", qa, llm="x", llm_client="Scripted", qa_top_k=5, sessions=[session],
                                         gold_answers=ds.gold_answers, sample_reason="slow",
                                         partial={"hi": {"answers": ["Velor"]}, "hi_local": {"answers": []}}))
    parts = load_parts(tmp_path / "parts")
    assert [p["kind"] for p in parts] == ["recall", "qa"] and parts[0]["rows"]["naive"]["recall"].keys() == {2, 5}
    text = render(parts, "## Notes\n\nhand-written")
    assert text.count("\n| ") == (len(MODES) + 2) + (3 + 2)
    recall_md, qa_md = text.split("## QA")
    assert "| graphrag_global * | 1 |" in recall_md and "| graphrag_global * | 1 | " in qa_md
    assert "**LLM-bound**" in text and text.endswith("hand-written\n")
    assert "continues from the next): hi 1 of 2." in qa_md and "Modes finished: naive, graphrag_local" in qa_md


def test_command_shown_without_folders():
    argv = ["table-modes", "--work", "/tmp/x", "--qa", "20", "--parts=/y", "--twowiki-data", "/d", "--variant", "ner"]
    assert shown_command(argv) == ("python -m reproduce table-modes --work DIR --qa 20 --parts DIR --twowiki-data DIR "
                                   "--variant ner")
    assert shown_command(["--qa-sample-reason", "slow here"]).endswith("--qa-sample-reason 'slow here'")


def test_a_mode_with_a_smaller_row_continues_from_its_answered_questions():
    """A mode whose saved row covers fewer questions than asked (an earlier sample) keeps the questions
    a later run answered (its ``partial``); a finished mode's leftover state is dropped."""
    from reproduce.modes_qa import kept_partial
    partial = {"graphrag_global": {"answers": ["a"]}, "naive": {"answers": ["b"]}, "hi": {"answers": []}}
    rows = {"graphrag_global": {"questions": 3}, "naive": {"questions": 20}}
    assert kept_partial(partial, rows, ["graphrag_global", "hi"]) == {"graphrag_global": {"answers": ["a"]},
                                                                     "hi": {"answers": []}}


def test_a_session_without_a_finished_mode_says_so():
    from reproduce.modes_report import _session_line
    going = {"command": "c", "commit": "abc", "load_before": "up 1", "modes": ["hi"], "done": []}
    assert "stopped or still running" in _session_line(going, "m") and "wall" not in _session_line(going, "m")
    done = {**going, "done": ["hi"], "wall_s": 12.4, "load_after": "up 2", "llm_threads": 2}
    assert _session_line(done, "m") == ("Modes finished: hi; engine commit `abc`; LLM threads: 2; wall 12 s; load "
                                        "(`uptime`) before: `up 1`; after: `up 2`.")
    # a session on another machine than the file's says which (one on the same machine, or from before
    # sessions kept theirs, does not)
    assert _session_line({**done, "machine": "m"}, "m") == _session_line(done, "m")
    assert _session_line({**done, "machine": "AMD"}, "m").startswith(
        "Modes finished: hi; engine commit `abc`; machine: AMD; LLM threads: 2;")


def test_contexts_cut_to_the_window_are_counted_and_shown():
    from reproduce.modes_qa import _row
    from reproduce.modes_report import _cut_note
    st = {"answers": ["a", "b", "c"], "em": [0, 0, 1], "f1": [0, 0, 1], "calls": [1, 1, 1], "prompt_tokens": [1, 2, 3],
          "completion_tokens": [1, 1, 1], "errors": [None] * 3, "context_cut": [None, 4, 0], "seconds": 3.0}
    row = _row(st, 3)
    assert row["contexts_cut"] == 1 and _cut_note(row, 3) == "; context cut to the reader's window in 1 of 3 questions"
    assert _cut_note({"contexts_cut": 0}, 3) == _cut_note({}, 3) == ""
