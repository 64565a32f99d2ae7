"""LlamaCppClient: name resolution (fast) and real runs of the packaged 0.5B GGUF (skipped when
``llama-cpp-python``, the ``fast`` extra, is not installed)."""
from __future__ import annotations

import pytest

from hippo_engine.llm import LlamaCppClient, LLMError, LLMTimeoutError
from hippo_engine.llm.llamacpp import llama_cpp_available, resolve_gguf
from hippo_engine.models import assets as ma


def test_resolution_without_loading(tmp_path):
    c = LlamaCppClient(max_new_tokens=7, num_threads=2)
    assert c.model_name == ma.DEFAULT_LLM and not c.loaded and c.max_concurrency == 1
    p = c.generation_params()
    assert p == {"max_new_tokens": 7, "temperature": 0.0, "backend": "llama_cpp",
                 "weights": ma.PACKAGED_LLMS[ma.DEFAULT_LLM].sha256[:16]}
    assert LlamaCppClient("Qwen2.5-Coder-1.5B-Instruct").model_name == "Qwen2.5-Coder-1.5B-Instruct"
    g = tmp_path / "m.gguf"
    g.write_bytes(b"GGUF")
    assert resolve_gguf(str(g)) == (None, g)
    assert LlamaCppClient(str(g)).model_name == str(g)
    assert resolve_gguf("some-org/some-model") == (None, None)
    with pytest.raises(LLMError, match="GGUF"):
        LlamaCppClient("some-org/some-model")
    with pytest.raises(ValueError):
        LlamaCppClient(timeout=0)


def test_broken_gguf_file_raises_llm_error(tmp_path):
    if not llama_cpp_available():
        pytest.skip("llama-cpp-python not installed (pip install 'hippo-engine[fast]')")
    g = tmp_path / "broken.gguf"
    g.write_bytes(b"not a gguf at all")
    with pytest.raises(LLMError, match="cannot load"):
        LlamaCppClient(str(g)).generate([{"role": "user", "content": "hi"}])


@pytest.fixture(scope="module")
def qwen():
    if not llama_cpp_available():
        pytest.skip("llama-cpp-python not installed (pip install 'hippo-engine[fast]')")
    return LlamaCppClient(max_new_tokens=24, n_ctx=2048).load()


@pytest.mark.slow
def test_packaged_gguf_generates_deterministically(qwen):
    q = [{"role": "system", "content": "You answer in one short sentence."},
         {"role": "user", "content": "What is the capital of France?"}]
    first = qwen.generate(q)
    assert "Paris" in first.text and first.finish_reason == "stop" and not first.cached
    assert first.prompt_tokens > 5 and 0 < first.completion_tokens <= 24
    # another prompt in between (the evaluated prefix differs), then the same prompt again
    other = qwen.generate([{"role": "user", "content": "Name a colour."}])
    assert other.text
    assert qwen.generate(q).text == first.text

    cut = qwen.generate([{"role": "user", "content": "Count from 1 to 50, comma separated."}],
                        max_new_tokens=3)
    assert cut.finish_reason == "length" and 1 <= cut.completion_tokens <= 4


@pytest.mark.slow
def test_a_streamed_reply_comes_in_pieces_that_make_the_same_text(qwen):
    from test_streaming import check_streamed_reply
    check_streamed_reply(qwen)


@pytest.mark.slow
def test_packaged_gguf_timeout_and_context_overflow(qwen):
    old = qwen.timeout
    qwen.timeout = 1e-4
    try:
        with pytest.raises(LLMTimeoutError, match="timeout"):
            qwen.generate([{"role": "user", "content": "Write a long poem about the sea."}])
    finally:
        qwen.timeout = old
    with pytest.raises(LLMError, match=r"the prompt is 5,0\d\d tokens, more than the 2,048-token context window"):
        qwen.generate([{"role": "user", "content": "word " * 5000}])


def test_default_threads_leave_busy_cores_alone(monkeypatch):
    from hippo_engine.llm import llamacpp
    monkeypatch.setattr(llamacpp, "usable_cpus", lambda: 4)
    for load, want in ((0.0, 4), (0.4, 4), (1.2, 3), (2.6, 1), (9.0, 1)):
        monkeypatch.setattr(llamacpp.os, "getloadavg", lambda load=load: (load, load, load))
        assert llamacpp.default_threads() == want
    monkeypatch.setenv("HIPPO_ENGINE_LLM_THREADS", "2")
    assert LlamaCppClient().num_threads == 2


@pytest.mark.slow
def test_the_reader_fits_a_long_context_into_the_packaged_models_window(qwen):
    """A context longer than the window (n_ctx 2,048 here) is cut by lines to leave the reply room,
    counted with the model's own tokenizer and chat template: an answer instead of an error (each call's prompt
    within the window; a reply without its answer line is asked once more, a second call)."""
    from hippo_engine.datatypes import QuerySolution
    from hippo_engine.qa.fit import REPLY_ROOM
    from hippo_engine.qa.reader import answer_questions
    lines = ["Velor is a town on the river Brask. Its fair is held in spring."] * 5 + \
        [f"Line {i}: the weather in the hills was mild that year, and the roads were open." for i in range(300)]
    sol = QuerySolution("Where is Velor?", [], [])
    _, meta = answer_questions(qwen, [sol], contexts=["\n".join(lines)])
    assert meta[0]["error"] is None and meta[0]["context_cut"] > 100
    calls = meta[0].get("llm_calls", 1)
    assert meta[0]["prompt_tokens"] <= calls * 2048 and (calls > 1 or meta[0]["prompt_tokens"] <= 2048 - REPLY_ROOM)
    assert sol.answer
