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


def test_server_slower_than_timeout_raises_timeout_error_without_a_second_copy():
    with FakeOpenAIServer([("sleep", 3.0)]) as srv:
        c = client(srv, timeout=0.3, max_retries=3)
        t0 = time.perf_counter()
        with pytest.raises(LLMTimeoutError) as ei:
            c.generate(MSGS)
        elapsed = time.perf_counter() - t0
        assert srv.count == 1        # a timed-out request is never sent again
    msg = str(ei.value)
    assert "test-model" in msg and "no reply within 0.3s" in msg and "not sent again" in msg
    assert "still be processing" in msg
    for hint in ("llm.timeout", "--llm-timeout", "HIPPO_LLM_TIMEOUT", "--llm-concurrency", "HIPPO_LLM_CONCURRENCY"):
        assert hint in msg
    assert elapsed < 2.0


def test_concurrent_requests_to_a_slow_server_are_each_sent_once():
    """8 requests in flight, a server slower than the timeout: 8 requests reach it, none twice
    (the openai package's own retries re-sent each one while the server was still working)."""
    with FakeOpenAIServer([("sleep", 2.0)], max_requests=100) as srv:
        c = client(srv, timeout=0.3, max_retries=5, max_concurrency=8)
        assert c._client.max_retries == 0
        out = c.generate_many([[{"role": "user", "content": f"q{i}"}] for i in range(8)])
        assert all(isinstance(r, LLMTimeoutError) for r in out)
        assert srv.count == 8 and set(srv.attempts.values()) == {1} and srv.overlaps == 0


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


@pytest.fixture()
def fast_backoff(monkeypatch):
    import hippo_engine.llm.openai_client as oc
    monkeypatch.setattr(oc, "RETRY_INITIAL_DELAY", 0.01)
    monkeypatch.setattr(oc, "RETRY_MAX_DELAY", 0.02)


def test_retry_after_seconds_is_honoured_and_capped(monkeypatch):
    import hippo_engine.llm.openai_client as oc
    with FakeOpenAIServer([("status", 429, {"Retry-After": "1"}), ("ok", "after", "stop")]) as srv:
        assert client(srv, max_retries=2).generate(MSGS).text == "after"
        gap = srv.requests[1]["t"] - srv.requests[0]["t"]
    assert srv.count == 2 and gap >= 0.9
    monkeypatch.setattr(oc, "RETRY_AFTER_CAP", 0.2)
    with FakeOpenAIServer([("status", 503, {"Retry-After": "3600"}), ("ok", "after", "stop")]) as srv:
        t0 = time.perf_counter()
        assert client(srv, max_retries=2).generate(MSGS).text == "after"
        assert time.perf_counter() - t0 < 2.0 and srv.count == 2


@pytest.mark.parametrize("code", [408, 409, 429, 500, 502, 503])
def test_retryable_statuses_are_sent_again(code, fast_backoff):
    with FakeOpenAIServer([("status", code), ("status", code), ("ok", "fine", "stop")]) as srv:
        assert client(srv, max_retries=2).generate(MSGS).text == "fine"
        assert srv.count == 3
    with FakeOpenAIServer([("status", code)]) as srv:
        with pytest.raises(LLMError, match=f"HTTP {code} on each of 3 tries"):
            client(srv, max_retries=2).generate(MSGS)
        assert srv.count == 3


def test_gateway_timeout_is_not_sent_again():
    with FakeOpenAIServer([("status", 504)]) as srv:
        with pytest.raises(LLMTimeoutError, match="HTTP 504.*not sent again.*--llm-timeout"):
            client(srv, max_retries=3).generate(MSGS)
        assert srv.count == 1


@pytest.mark.parametrize("code", [401, 403])
def test_refused_api_key_says_how_to_set_it(code):
    with FakeOpenAIServer([("status", code)]) as srv:
        with pytest.raises(LLMError) as ei:
            client(srv, max_retries=3).generate(MSGS)
        assert srv.count == 1
    msg = str(ei.value)
    assert f"HTTP {code}" in msg and "API key was refused" in msg and "OPENAI_API_KEY" in msg and "--api-key" in msg


def test_404_suggests_the_v1_url():
    with FakeOpenAIServer([("status", 404)]) as srv:
        root = srv.base_url[: -len("/v1")]
        with pytest.raises(LLMError) as ei:
            OpenAIClient("test-model", base_url=root, timeout=0.5, max_retries=3).generate(MSGS)
        assert f"did you mean {root}/v1?" in str(ei.value) and srv.count == 1
        with pytest.raises(LLMError) as ei:
            OpenAIClient("test-model", base_url=root + "/api", timeout=0.5).generate(MSGS)
        assert f"did you mean {root}/api/v1?" in str(ei.value)
        with pytest.raises(LLMError) as ei:
            client(srv).generate(MSGS)          # already /v1: the model name is the suspect
        assert "HTTP 404" in str(ei.value) and "did you mean" not in str(ei.value)
        assert "'test-model'" in str(ei.value)


def test_connection_refused_is_retried_with_backoff(fast_backoff, caplog):
    import logging
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = OpenAIClient("m", base_url=f"http://127.0.0.1:{port}/v1", timeout=0.5, max_retries=2)
    with caplog.at_level(logging.INFO, logger="hippo_engine.llm.openai_client"):
        with pytest.raises(LLMError, match="connection failed on each of 3 tries"):
            c.generate(MSGS)
    assert caplog.text.count("connection failed") == 2      # two re-sends logged


def test_connection_cut_after_sending_is_not_sent_again():
    with FakeOpenAIServer([("truncated", "connection"), ("ok", "second copy", "stop")],
                          responder=lambda m: "a reply long enough to be cut in half") as srv:
        with pytest.raises(LLMError, match="connection broke after the request was sent") as ei:
            client(srv, max_retries=3).generate(MSGS)
        assert srv.count == 1
    assert not isinstance(ei.value, LLMTimeoutError)


def test_server_that_starts_after_a_refused_request_gets_it_and_answers(monkeypatch):
    """An LLM server still starting: the first try is refused (nothing was sent), the backoff
    sleep lets the server come up on that port, and the re-sent request is answered once."""
    import hippo_engine.llm.openai_client as oc
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started: list[FakeOpenAIServer] = []

    def start_server_instead_of_sleeping(seconds: float) -> None:
        if not started:
            started.append(FakeOpenAIServer([("ok", "up now", "stop")], port=port).__enter__())

    from types import SimpleNamespace
    monkeypatch.setattr(oc, "time", SimpleNamespace(sleep=start_server_instead_of_sleeping))
    try:
        c = OpenAIClient("m", base_url=f"http://127.0.0.1:{port}/v1", timeout=5, max_retries=2)
        assert c.generate(MSGS).text == "up now"
        assert len(started) == 1 and started[0].count == 1      # refused once, then sent once
    finally:
        for srv in started:
            srv.__exit__(None, None, None)


def test_a_server_echoing_the_api_key_never_gets_it_into_errors_or_replies():
    """Servers that echo request headers (in an error body or a completion) must not carry the
    key into ``LLMError``, logs or the text handed on (OpenIE errors and CLI stderr quote both)."""
    key = "sk-secret-0123456789"
    echo = f"bad request; headers were Authorization: Bearer {key}"
    with FakeOpenAIServer([("status", 400, {}, echo), ("ok", echo, "stop")]) as srv:
        c = OpenAIClient("m", base_url=srv.base_url, api_key=key, timeout=5, max_retries=0)
        with pytest.raises(LLMError) as ei:
            c.generate(MSGS)
        assert key not in str(ei.value) and "redacted" in str(ei.value)
        reply = c.generate(MSGS).text
    assert key not in reply and "redacted" in reply
