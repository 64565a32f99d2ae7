"""The cancel token of LLM calls (hippo_engine/llm/cancel.py): a call whose caller went away stops. The
OpenAI-compatible client against a real slow server on 127.0.0.1 (the server sees the connection close),
the cache's shared wait, a local model's lock, the pool of ``generate_many``; without a token nothing changes."""
from __future__ import annotations

import threading
import time

import pytest
from fakes import ScriptedLLM

from hippo_engine.llm import cancel
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.llm.cache import CachedLLM

MESSAGES = [{"role": "user", "content": "What is the capital of France? [abuse-7]"}]


def _set_after(event: threading.Event, seconds: float) -> None:
    threading.Timer(seconds, event.set).start()


def _slow_llm(delay: float):
    from reproduce.serve_abuse_llm import SlowLLM
    return SlowLLM(delay=delay, answer="Answer: Paris")


def test_an_openai_request_stops_and_closes_its_connection_when_cancelled():
    pytest.importorskip("openai")
    from hippo_engine.llm.openai_client import OpenAIClient
    with _slow_llm(20) as server:
        client = OpenAIClient("m", base_url=server.base_url, api_key="none", timeout=60, max_retries=0)
        token = threading.Event()
        _set_after(token, 0.5)
        t0 = time.monotonic()
        with cancel.cancel_on(token), pytest.raises(cancel.LLMCancelled):
            client.generate(MESSAGES)
        assert time.monotonic() - t0 < 1.5
        deadline = time.monotonic() + 2
        while server.calls()[0].how == "running":
            assert time.monotonic() < deadline, "the server never saw the connection close"
            time.sleep(0.02)
        call = server.calls()[0]
        assert call.how == "closed" and call.end - call.start < 1.5
        client.close()


def test_an_openai_reply_is_the_same_with_a_token_that_is_never_set():
    pytest.importorskip("openai")
    from hippo_engine.llm.openai_client import OpenAIClient
    with _slow_llm(0.05) as server:
        client = OpenAIClient("m", base_url=server.base_url, api_key="none", timeout=30, max_retries=0)
        plain = client.generate(MESSAGES)
        with cancel.cancel_on(threading.Event()):
            tokened = client.generate(MESSAGES)
        assert plain == tokened and plain.text == "Answer: Paris" and plain.prompt_tokens == 1
        client.close()


def test_a_set_token_stops_the_call_before_it_is_sent():
    pytest.importorskip("openai")
    from hippo_engine.llm.openai_client import OpenAIClient
    with _slow_llm(5) as server:
        client = OpenAIClient("m", base_url=server.base_url, api_key="none", timeout=30, max_retries=0)
        token = threading.Event()
        token.set()
        with cancel.cancel_on(token), pytest.raises(cancel.LLMCancelled):
            client.generate(MESSAGES)
        assert server.calls() == []
        client.close()


class _Gated(LLMClient):
    """Replies once ``gate`` is set, or stops when the caller's token is."""

    def __init__(self):
        self.gate, self.calls = threading.Event(), 0
        self.model_name = "gated"

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        self.calls += 1
        while not self.gate.wait(0.01):
            cancel.check()
        return LLMResponse(text="done", prompt_tokens=3, completion_tokens=1)


def test_a_waiter_on_a_shared_cached_request_stops_on_its_own_token(tmp_path):
    inner = _Gated()
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    out = {}
    owner = threading.Thread(target=lambda: out.setdefault("owner", llm.generate(MESSAGES)))
    owner.start()
    time.sleep(0.2)
    token = threading.Event()
    _set_after(token, 0.2)
    t0 = time.monotonic()
    with cancel.cancel_on(token), pytest.raises(cancel.LLMCancelled):
        llm.generate(MESSAGES)              # the same request: waits for the owner's, until its token is set
    assert time.monotonic() - t0 < 1.0
    inner.gate.set()
    owner.join(5)
    assert out["owner"].text == "done" and inner.calls == 1


def test_when_the_owner_of_a_shared_request_is_cancelled_a_waiter_asks_again(tmp_path):
    inner = _Gated()
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    token, errors = threading.Event(), []

    def owner():
        with cancel.cancel_on(token):
            try:
                llm.generate(MESSAGES)
            except cancel.LLMCancelled as e:
                errors.append(e)
    t = threading.Thread(target=owner)
    t.start()
    time.sleep(0.2)
    _set_after(token, 0.2)
    threading.Timer(0.6, inner.gate.set).start()
    got = llm.generate(MESSAGES)            # no token of its own: gets a reply
    t.join(5)
    assert got.text == "done" and len(errors) == 1 and inner.calls == 2
    assert len(llm) == 1                    # the cancelled call stored nothing


def test_a_call_waiting_for_a_local_models_lock_stops_on_its_token():
    lock = threading.Lock()
    lock.acquire()
    token = threading.Event()
    _set_after(token, 0.2)
    t0 = time.monotonic()
    with cancel.cancel_on(token), pytest.raises(cancel.LLMCancelled), cancel.holding(lock):
        pass
    assert time.monotonic() - t0 < 1.0
    lock.release()
    with cancel.holding(lock):              # without a token: a plain ``with lock``
        assert lock.locked()


def test_generate_many_passes_the_token_to_its_threads():
    inner = _Gated()
    inner.max_concurrency = 3
    token = threading.Event()
    _set_after(token, 0.2)
    with cancel.cancel_on(token):
        out = inner.generate_many([MESSAGES] * 3)
    assert all(isinstance(r, cancel.LLMCancelled) for r in out)


def test_nothing_is_cancelled_without_a_token():
    assert cancel.current() is None and not cancel.requested()
    cancel.check()
    llm = ScriptedLLM(lambda m: "ok")
    assert llm.generate(MESSAGES).text == "ok"


def _stops_on_a_set_token(client) -> None:
    """A local client: a set token stops the generation by its first token (llama.cpp checks it before the
    first one); a later call without one gives the reply it gave before."""
    ask = [{"role": "user", "content": "Write a long poem about the sea."}]
    before = client.generate(ask, max_new_tokens=8)
    token = threading.Event()
    token.set()
    t0 = time.monotonic()
    with cancel.cancel_on(token), pytest.raises(cancel.LLMCancelled, match="stopped after [012] new token"):
        client.generate(ask, max_new_tokens=400)
    assert time.monotonic() - t0 < 30
    assert client.generate(ask, max_new_tokens=8) == before


@pytest.mark.slow
def test_llama_cpp_stops_on_the_token():
    from hippo_engine.llm.llamacpp import LlamaCppClient, llama_cpp_available
    if not llama_cpp_available():
        pytest.skip("llama-cpp-python not installed")
    _stops_on_a_set_token(LlamaCppClient(max_new_tokens=24, n_ctx=2048).load())


@pytest.mark.slow
def test_transformers_stops_on_the_token():
    pytest.importorskip("transformers")
    from hippo_engine.llm.local import LocalHFClient
    _stops_on_a_set_token(LocalHFClient(num_threads=1, max_new_tokens=16).load())
