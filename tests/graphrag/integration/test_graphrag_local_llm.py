"""graphrag_global and graphrag_local end to end on the real default models, offline: the bundled sample
corpus indexed with ``extractor="ner"`` (spaCy, all-MiniLM-L6-v2), communities built explicitly with
an LLM report for one of them, then questions answered by the packaged Qwen2.5-Coder-0.5B (map-reduce
for global, one reader call for local). Slow (minutes on 2 cores)."""
from __future__ import annotations

import json
from importlib import resources

import pytest

from hippo_engine import HippoRAG
from hippo_engine.config import QueryParam

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_graphrag_modes_with_the_default_local_llm(tmp_path):
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    questions = [q["question"] for q in data["questions"][:1]]
    rag = HippoRAG(tmp_path, extractor="ner", show_progress=False, max_new_tokens=64,
                   community_report_max_new_tokens=120, graphrag_global_max_batches=1, graphrag_report_tokens=500,
                   graphrag_map_max_new_tokens=96)     # (short outputs: CI's 2 cores run the model on transformers)
    rag.index(docs)
    summary = rag.build_communities(max_llm_reports=1)     # one LLM report (the rest: member listings)
    assert summary
    glob, responses, meta = rag.rag_qa(questions, param=QueryParam(mode="graphrag_global"))
    for m in meta:
        assert m["map_calls"] == 1 and m["llm_calls"] == m["map_calls"] + (m["points_used"] > 0)
        assert m["prompt_tokens"] > 0 and m["error"] is None
    assert all(isinstance(r, str) for r in responses)
    local, _, lmeta = rag.rag_qa(questions, param=QueryParam(mode="graphrag_local"))
    assert all(m["llm_calls"] == 1 and m["prompt_tokens"] > 0 for m in lmeta)
    assert all(s.docs for s in local) and all(s.answer is not None for s in local)
    rag.close()
