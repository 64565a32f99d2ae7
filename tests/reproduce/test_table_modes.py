"""reproduce/table_modes.py on the toy index (fakes): every mode's recall row, the QA rows with LLM calls
and tokens per query, and the markdown (the MuSiQue run itself: reproduce/results/modes/README.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fakes import ScriptedLLM

from hippo_engine.evaluation.datasets import Dataset
from reproduce.table_modes import MODES, _markdown, qa_rows, recall_rows

sys.path.insert(0, str(Path(__file__).parents[1] / "graphrag"))
from peer_fakes import PeerResponder, built_rag  # noqa: E402


def test_rows_and_markdown_of_every_mode(tmp_path):
    from helpers import CORPUS
    rag, resp = built_rag(tmp_path)
    qs = ["Who founded Tamsin College?", "Where was Ilse Marrow born?"]
    ds = Dataset(name="toy", docs=list(CORPUS), questions=qs,
                 gold_docs=[[CORPUS[3], CORPUS[4]], [CORPUS[1]]], gold_answers=[["Oren Pike"], ["Velor"]])
    rows = recall_rows(rag, ds, MODES)
    assert set(rows) == set(MODES)
    assert all(0 <= r["recall"][2] <= r["recall"][5] <= 100 and r["llm_calls"] == 0 for r in rows.values())
    rag._llm = ScriptedLLM(PeerResponder())
    qa = qa_rows(rag, ds, 2, ["naive", "graphrag_local", "graphrag_global"])
    assert qa["naive"]["calls"] == 1 and qa["graphrag_local"]["calls"] == 1 and qa["graphrag_global"]["calls"] > 1
    assert all(q["tokens"] == 15 * q["calls"] for q in qa.values())
    entry = {"dataset": "MuSiQue", "variant": "openie", "questions": 2,
             "comm": {"communities": 3, "levels": {0: 3}, "seconds": 0.1}, "rows": rows, "qa": qa}
    text = _markdown([entry], ["table-modes", "--qa", "2"], "load a", "load b", argparse.Namespace(qa=2, llm="x"))
    assert text.count("\n| ") >= len(MODES) + 3 and "graphrag_global" in text and "reference" in text
