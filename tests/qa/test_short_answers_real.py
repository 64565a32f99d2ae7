"""The packaged reader on the demo's showcase question (issue 39, item 4): indexed as ``hippo-engine demo``
indexes the bundled sample (``extractor="ner"``), the real packaged Qwen2.5-Coder-0.5B GGUF answers "Who was
the husband of the author of The Glass Orchard?" with the husband, not the author, in a short reply that is
no fragment (skipped without llama-cpp-python)."""
import json
from importlib import resources

import pytest

from hippo_engine.evaluation.metrics import normalize_answer
from hippo_engine.llm.llamacpp import LlamaCppClient, llama_cpp_available
from hippo_engine.qa.reader import answer_questions
from reproduce.reader_choice_data import fragment

SHOWCASE = "Who was the husband of the author of The Glass Orchard?"


@pytest.mark.slow
def test_the_packaged_reader_answers_the_showcase_question_briefly_and_right(tmp_path):
    if not llama_cpp_available():
        pytest.skip("llama-cpp-python not installed (pip install 'hippo-engine[fast]')")
    from hippo_engine import HippoRAG

    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    gold = next(q["answers"] for q in data["questions"] if q["question"] == SHOWCASE)
    llm = LlamaCppClient()                       # the engine's defaults: max_new_tokens 2048, temperature 0
    rag = HippoRAG(tmp_path / "demo", extractor="ner", llm=llm, show_progress=False)
    try:
        rag.index(docs)
        sols = rag.retrieve([SHOWCASE])
    finally:
        rag.close()
    responses, meta = answer_questions(llm, sols, 5, max_new_tokens=2048, temperature=0.0)
    sol = sols[0]
    assert normalize_answer(sol.answer) in {normalize_answer(g) for g in gold}, (sol.answer, responses[0])
    assert not fragment(sol.answer, responses[0], meta[0]["finish_reason"])
    assert meta[0]["completion_tokens"] <= LlamaCppClient.reader_reply_tokens
