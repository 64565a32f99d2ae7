"""LocalHFClient: name resolution (fast) and one real run of the packaged 0.5B model (slow).

The slow test uses the real model cache (``HIPPO_ENGINE_CACHE`` or ~/.cache/hippo-engine): the
first run converts the packaged GGUF once (about a minute on 2 cores), later runs load the
converted bfloat16 safetensors in seconds.
"""
from __future__ import annotations

import json
import time

import pytest

from hippo_engine.llm import LLMError, LLMTimeoutError, LocalHFClient
from hippo_engine.models import assets as ma


def test_names_resolve_without_loading(tmp_path):
    c = LocalHFClient()
    assert c.model_name == ma.DEFAULT_LLM and not c.loaded and c.max_concurrency == 1
    assert LocalHFClient("qwen2.5-coder-0.5b-instruct-q4_k_m").model_name == ma.DEFAULT_LLM
    assert LocalHFClient("Qwen2.5-Coder-1.5B-Instruct").model_name == "Qwen2.5-Coder-1.5B-Instruct"
    assert LocalHFClient(str(tmp_path)).model_name == str(tmp_path)
    with pytest.raises(LLMError, match="unknown local model 'some-org/some-model'"):
        LocalHFClient("some-org/some-model")
    p = LocalHFClient(max_new_tokens=7, temperature=0.3).generation_params()
    assert p == {"max_new_tokens": 7, "temperature": 0.3, "backend": "transformers", "dtype": "float32"}
    with pytest.raises(ValueError):
        LocalHFClient(dtype="int3")


def test_unloadable_directory_raises_llm_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(LLMError, match="cannot load local model"):
        LocalHFClient(str(tmp_path)).generate([{"role": "user", "content": "hi"}])


@pytest.fixture()
def empty_hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants
    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture()
def no_network(monkeypatch):
    import socket

    def refuse(*a, **k):
        raise AssertionError(f"network access attempted: {a!r}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-Coder-0.5B-Instrct", "qwen2.5-coder-05b", "./no/such/dir"])
def test_mistyped_model_name_fails_fast_naming_it_and_the_packaged_models(name, empty_hub_cache, no_network):
    from hippo_engine.config import HippoConfig
    from hippo_engine.llm import make_llm
    t0 = time.perf_counter()
    for make in (lambda: LocalHFClient(name),
                 lambda: make_llm(name, HippoConfig(llm_backend="auto", llm_cache=False))):
        with pytest.raises(LLMError) as ei:
            make()
        msg = str(ei.value)
        assert repr(name) in msg and all(p in msg for p in ma.PACKAGED_LLMS) and "nothing is downloaded" in msg
    assert time.perf_counter() - t0 < 5.0


def test_hub_model_in_the_local_cache_loads_from_its_snapshot(empty_hub_cache, no_network):
    snap = empty_hub_cache / "models--some-org--cached-model" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("abc123")
    c = LocalHFClient("some-org/cached-model")
    assert c.model_name == "some-org/cached-model" and c._source == str(snap)
    with pytest.raises(LLMError, match="cannot load local model 'some-org/cached-model'"):
        c.load()            # an empty config: not loadable, but no download was tried


def test_a_failed_load_is_one_attempt(tmp_path, monkeypatch):
    calls = []

    def broken(self):
        calls.append(1)
        raise LLMError("cannot load local model 'x': broken weights")

    monkeypatch.setattr(LocalHFClient, "_load", broken)
    c = LocalHFClient(str(tmp_path))
    msgs = [{"role": "user", "content": "hi"}]
    out = c.generate_many([msgs, msgs, msgs])
    assert all(isinstance(r, LLMError) and "broken weights" in str(r) for r in out)
    with pytest.raises(LLMError, match="broken weights"):
        c.load()
    assert len(calls) == 1


@pytest.fixture(scope="module")
def qwen():
    # One thread: on a shared 2-core box, two OpenMP threads fighting other processes run
    # several times slower than one.
    return LocalHFClient(num_threads=1, max_new_tokens=16).load()


@pytest.mark.slow
def test_packaged_model_generates(qwen):
    d = ma.converted_llm_dir(ma.DEFAULT_LLM)
    assert (d / "model.safetensors").is_file() and (d / "config.json").is_file()
    info = json.loads((d / "hippo_conversion.json").read_text())
    assert info["source_sha256"] == ma.PACKAGED_LLMS[ma.DEFAULT_LLM].sha256
    assert info["dtype"] == "bfloat16"

    import torch
    threads = torch.get_num_threads()
    r = qwen.generate([{"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
    assert torch.get_num_threads() == threads  # the generation's thread setting was scoped
    assert "Paris" in r.text
    assert r.prompt_tokens > 10 and 0 < r.completion_tokens <= 16
    assert r.finish_reason == "stop" and not r.cached

    cut = qwen.generate([{"role": "user", "content": "Count from 1 to 50, comma separated."}],
                        max_new_tokens=3)
    assert cut.finish_reason == "length" and cut.completion_tokens == 3


@pytest.mark.slow
def test_a_streamed_reply_comes_in_pieces_that_make_the_same_text(qwen):
    from test_streaming import check_streamed_reply
    check_streamed_reply(qwen)


@pytest.mark.slow
def test_packaged_model_timeout(qwen):
    old = qwen.timeout
    qwen.timeout = 1e-4  # max_time stops generation after the first token
    try:
        with pytest.raises(LLMTimeoutError, match="timeout"):
            qwen.generate([{"role": "user", "content": "Write a long poem about the sea."}],
                          max_new_tokens=16)
    finally:
        qwen.timeout = old
