"""OpenAIClient against a real HTTP server on 127.0.0.1 (no mocks of the openai package)."""
from __future__ import annotations

import socket
import time

import pytest
from openai_server import FakeOpenAIServer

from hippo_engine.llm import LLMError, LLMTimeoutError, OpenAIClient

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]


def client(server, **kw) -> OpenAIClient:
    kw = {"timeout": 0.5, "max_retries": 1, **kw}
    return OpenAIClient("test-model", base_url=server.base_url, **kw)


def test_success_fills_response_and_sends_request(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer([("ok", "Hello there.", "stop")]) as srv:
        c = client(srv, max_new_tokens=33, temperature=0.0)
        r = c.generate(MSGS)
        r2 = c.generate(MSGS, max_new_tokens=5, temperature=0.7)
    assert r.text == "Hello there."
    assert (r.prompt_tokens, r.completion_tokens, r.finish_reason, r.cached) == (11, 7, "stop", False)
    assert srv.count == 2
    req = srv.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["messages"] == MSGS
    assert req["body"]["max_tokens"] == 33 and req["body"]["temperature"] == 0.0
    assert srv.requests[1]["body"]["max_tokens"] == 5 and srv.requests[1]["body"]["temperature"] == 0.7
    assert srv.headers[0]["Authorization"] == "Bearer EMPTY"  # local-server default key
    assert r2.text == "Hello there."


def test_api_key_from_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with FakeOpenAIServer([("ok", "x", "stop")]) as srv:
        client(srv).generate(MSGS)
        OpenAIClient("m", base_url=srv.base_url, api_key="explicit", timeout=0.5).generate(MSGS)
    assert srv.headers[0]["Authorization"] == "Bearer sk-from-env"
    assert srv.headers[1]["Authorization"] == "Bearer explicit"


def test_length_finish_reason():
    with FakeOpenAIServer([("ok", "cut", "length")]) as srv:
        assert client(srv).generate(MSGS).finish_reason == "length"


def test_429_then_success_is_retried():
    with FakeOpenAIServer([("status", 429, {"retry-after-ms": "20"}), ("ok", "after retry", "stop")]) as srv:
        r = client(srv, max_retries=2).generate(MSGS)
    assert r.text == "after retry"
    assert srv.count == 2


def test_always_500_raises_clear_llm_error():
    with FakeOpenAIServer([("status", 500)]) as srv:
        c = client(srv, max_retries=1)
        t0 = time.perf_counter()
        with pytest.raises(LLMError) as ei:
            c.generate(MSGS)
        elapsed = time.perf_counter() - t0
    assert not isinstance(ei.value, LLMTimeoutError)
    msg = str(ei.value)
    assert "HTTP 500" in msg and "test-model" in msg and srv.base_url in msg and "2 tries" in msg
    assert srv.count == 2  # first try + one retry
    assert elapsed >= 0.2  # the openai client backed off between tries


def test_400_is_not_retried():
    with FakeOpenAIServer([("status", 400)]) as srv:
        with pytest.raises(LLMError, match="HTTP 400"):
            client(srv, max_retries=3).generate(MSGS)
    assert srv.count == 1


def test_server_slower_than_timeout_raises_timeout_error():
    with FakeOpenAIServer([("sleep", 3.0)]) as srv:
        c = client(srv, timeout=0.3, max_retries=1)
        t0 = time.perf_counter()
        with pytest.raises(LLMTimeoutError) as ei:
            c.generate(MSGS)
        elapsed = time.perf_counter() - t0
    assert "2 tries" in str(ei.value) and "test-model" in str(ei.value)
    assert srv.count == 2
    assert elapsed < 3.0


def test_connection_refused_raises_llm_error():
    with socket.socket() as s:  # find a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = OpenAIClient("m", base_url=f"http://127.0.0.1:{port}/v1", timeout=0.5, max_retries=0)
    with pytest.raises(LLMError, match="connection failed"):
        c.generate(MSGS)


def test_generate_many_concurrent_keeps_order_and_failures():
    with FakeOpenAIServer([("ok", "fine", "stop")]) as srv:
        c = client(srv, max_concurrency=4)
        batch = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
        out = c.generate_many(batch)
    assert [r.text for r in out] == ["fine"] * 10
    assert sorted(r["body"]["messages"][0]["content"] for r in srv.requests) == sorted(f"q{i}" for i in range(10))


def test_generation_params_fill_defaults():
    c = OpenAIClient("m", base_url="http://127.0.0.1:9/v1", max_new_tokens=64, temperature=0.2,
                     extra_body={"top_k": 1})
    assert c.generation_params() == {"max_new_tokens": 64, "temperature": 0.2, "extra_body": {"top_k": 1}}
    assert c.generation_params(max_new_tokens=8, temperature=0.0)["max_new_tokens"] == 8


@pytest.mark.parametrize("body", ['{"id": "x", "choices": [{"index": 0, "mess', "<html>502 Bad Gateway</html>",
                                  "", '{"choices": "oops"}'])
def test_unreadable_body_is_retried_then_reported(body):
    with FakeOpenAIServer([("raw", body), ("ok", "fine", "stop")]) as srv:
        assert client(srv, max_retries=2).generate(MSGS).text == "fine"   # retried, then read
        assert srv.count == 2
    with FakeOpenAIServer([("raw", body)]) as srv:
        with pytest.raises(LLMError, match="unreadable reply body on each of 2 tries"):
            client(srv, max_retries=1).generate(MSGS)
        assert srv.count == 2
