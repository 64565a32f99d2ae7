"""make_llm: which client is built, and the cache around it (end to end with a real server)."""
from __future__ import annotations

import pytest
from openai_server import FakeOpenAIServer

from hippo_engine.config import HippoConfig
from hippo_engine.llm import CachedLLM, LlamaCppClient, LLMError, LocalHFClient, OpenAIClient, factory, make_llm
from hippo_engine.models.assets import DEFAULT_LLM


def test_default_is_cached_lazy_local_model(tmp_path):
    llm = make_llm(None, HippoConfig(max_new_tokens=99, llm_timeout=7.0, llm_backend="transformers"),
                   tmp_path)
    assert isinstance(llm, CachedLLM) and llm.path == tmp_path / "llm_cache.sqlite"
    assert llm.path.exists()
    inner = llm.inner
    assert isinstance(inner, LocalHFClient) and not inner.loaded  # nothing loaded yet
    assert llm.model_name == DEFAULT_LLM and llm.max_concurrency == 1
    assert inner.default_max_new_tokens == 99 and inner.timeout == 7.0


def test_no_cache_when_disabled_or_no_dir(tmp_path):
    cfg = HippoConfig(llm_backend="transformers")
    assert isinstance(make_llm(None, cfg.replace(llm_cache=False), tmp_path), LocalHFClient)
    assert isinstance(make_llm("qwen2.5-coder-0.5b", cfg, None), LocalHFClient)
    assert not (tmp_path / "llm_cache.sqlite").exists()


def test_base_url_gives_openai_client(tmp_path):
    cfg = HippoConfig(llm_base_url="http://127.0.0.1:9/v1", llm_api_key="k", llm_max_concurrency=3,
                      llm_timeout=2.5, llm_max_retries=1, llm_cache=False)
    llm = make_llm("served-model", cfg, tmp_path)
    assert isinstance(llm, OpenAIClient)
    assert (llm.model_name, llm.max_concurrency, llm.timeout, llm.max_retries) == ("served-model", 3, 2.5, 1)


def test_openai_through_cache_end_to_end(tmp_path):
    with FakeOpenAIServer([("ok", "cached answer", "stop")]) as srv:
        cfg = HippoConfig(llm_base_url=srv.base_url, llm_timeout=1.0, llm_max_retries=0)
        llm = make_llm("served-model", cfg, tmp_path)
        msgs = [{"role": "user", "content": "q"}]
        first, second = llm.generate(msgs), llm.generate(msgs)
        again = make_llm("served-model", cfg, tmp_path).generate(msgs)  # a new process would see it too
    assert srv.count == 1
    assert not first.cached and second.cached and again.cached
    assert second.text == again.text == "cached answer"
    assert llm.stats()["total_tokens"] == 18


def test_auto_backend_prefers_llama_cpp_for_gguf_when_installed(tmp_path, monkeypatch):
    from hippo_engine.llm import llamacpp
    cfg = HippoConfig(llm_cache=False, llm_threads=3)
    monkeypatch.setattr(llamacpp, "llama_cpp_available", lambda: True)
    llm = make_llm(None, cfg, tmp_path)
    assert isinstance(llm, LlamaCppClient) and not llm.loaded and llm.num_threads == 3
    assert llm.generation_params()["backend"] == "llama_cpp"
    # a model llama.cpp cannot run (a hub name / plain directory) stays on transformers
    assert factory.local_backend("some-org/some-model", cfg) == "transformers"
    monkeypatch.setattr(llamacpp, "llama_cpp_available", lambda: False)
    assert isinstance(make_llm(None, cfg, tmp_path), LocalHFClient)
    # an explicit choice is obeyed
    assert factory.local_backend(None, cfg.replace(llm_backend="transformers")) == "transformers"


def test_llama_cpp_backend_rejects_non_gguf_models(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(LLMError, match="GGUF"):
        make_llm(str(tmp_path / "model"), HippoConfig(llm_backend="llama_cpp", llm_cache=False))


def test_a_llama_cpp_build_with_amx_kernels_is_never_run_unasked(tmp_path, monkeypatch, caplog):
    """ggml's AMX matrix product kills the process on some Sapphire Rapids-class CPUs (a build
    made with -march=native there has it): auto falls back to transformers with the rebuild
    command, an explicit llama_cpp refuses to load, HIPPO_ENGINE_LLAMA_AMX=1 opts in."""
    import logging
    import sys
    import types

    from hippo_engine.llm import llamacpp
    fake = types.SimpleNamespace(llama_print_system_info=lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 | OPENMP = 1 |",
                                 Llama=None)
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    monkeypatch.setattr(llamacpp, "llama_cpp_available", lambda: True)
    monkeypatch.delenv("HIPPO_ENGINE_LLAMA_AMX", raising=False)
    cfg = HippoConfig(llm_cache=False)
    with caplog.at_level(logging.WARNING, logger="hippo_engine.llm.factory"):
        assert factory.local_backend(None, cfg) == "transformers"
    assert "AMX" in caplog.text and "GGML_NATIVE=OFF" in caplog.text
    with pytest.raises(LLMError, match="AMX"):
        LlamaCppClient(None).load()
    monkeypatch.setenv("HIPPO_ENGINE_LLAMA_AMX", "1")
    assert factory.local_backend(None, cfg) == "llama_cpp"
    fake.llama_print_system_info = lambda: b"CPU : AVX2 = 1 | OPENMP = 1 |"
    monkeypatch.delenv("HIPPO_ENGINE_LLAMA_AMX")
    assert factory.local_backend(None, cfg) == "llama_cpp"
