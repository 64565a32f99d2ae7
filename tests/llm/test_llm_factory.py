"""make_llm: which client is built, and the cache around it (end to end with a real server)."""
from __future__ import annotations

from hippo_engine.config import HippoConfig
from hippo_engine.llm import CachedLLM, LocalHFClient, OpenAIClient, make_llm
from hippo_engine.model_assets import DEFAULT_LLM

from openai_server import FakeOpenAIServer


def test_default_is_cached_lazy_local_model(tmp_path):
    llm = make_llm(None, HippoConfig(max_new_tokens=99, llm_timeout=7.0), tmp_path)
    assert isinstance(llm, CachedLLM) and llm.path == tmp_path / "llm_cache.sqlite"
    assert llm.path.exists()
    inner = llm.inner
    assert isinstance(inner, LocalHFClient) and not inner.loaded  # nothing loaded yet
    assert llm.model_name == DEFAULT_LLM and llm.max_concurrency == 1
    assert inner.default_max_new_tokens == 99 and inner.timeout == 7.0


def test_no_cache_when_disabled_or_no_dir(tmp_path):
    assert isinstance(make_llm(None, HippoConfig(llm_cache=False), tmp_path), LocalHFClient)
    assert isinstance(make_llm("qwen2.5-coder-0.5b", HippoConfig(), None), LocalHFClient)
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
