"""Every error is JSON {"error": {"type", "message"}} with the right status, never a traceback;
a streamed answer that fails ends with an error event."""
import json
import logging

import pytest

from hippo_engine.service import sse
from hippo_engine.service.errors import ApiError


def _json_error(r, status, type_=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    if type_:
        assert err["type"] == type_
    return err


@pytest.mark.parametrize("exc, status, type_", [
    (ValueError("where: unknown operator $foo"), 422, "invalid_request"),
    (KeyError("no such thing"), 404, "not_found"),
    (ApiError(409, "busy"), 409, "conflict"),
    (RuntimeError("secret internals at /srv/x.py line 3"), 500, "internal_error"),
    (ZeroDivisionError("division by zero"), 500, "internal_error"),
])
def test_an_exception_in_the_memory_becomes_a_json_error(client, ws, exc, status, type_, caplog):
    ws.memories[None].raise_on["retrieve"] = exc
    with caplog.at_level(logging.ERROR, logger="hippo_engine.service"):
        err = _json_error(client.post("/retrieve", json={"query": "a"}), status, type_)
    if status == 500:
        assert "secret" not in err["message"] and "server's log" in err["message"]
        assert any(r.exc_info and r.exc_info[1] is exc for r in caplog.records)   # the traceback is logged
    else:
        assert err["message"] == (exc.args[0] if not isinstance(exc, ApiError) else "busy")


def test_malformed_json_and_wrong_types_name_the_field(client):
    err = _json_error(client.post("/retrieve", content=b"{nope", headers={"Content-Type": "application/json"}), 422)
    assert err["type"] == "validation_error" and "JSON" in err["message"]
    err = _json_error(client.post("/documents", json={"documents": [{"text": "a"}, {"txt": "b"}]}), 422)
    assert "body.documents[1].text: Field required" in err["message"]
    assert {"loc": "body.documents[1].txt", "message": "Extra inputs are not permitted"} in err["details"]
    err = _json_error(client.post("/documents", json={"documents": [{"text": "a", "title": "x\ny"}]}), 422)
    assert "body.documents[0].title" in err["message"]


def test_unknown_paths_and_methods(client):
    _json_error(client.get("/nowhere"), 404, "not_found")
    err = _json_error(client.put("/documents"), 405, "method_not_allowed")
    r = client.put("/documents")
    assert r.headers["allow"] == "GET, POST" and "allowed: GET, POST" in err["message"]
    assert client.patch("/w/x/documents/abc").headers["allow"] == "DELETE, GET"


def test_a_non_finite_number_is_sent_as_null(client, ws):
    client.post("/documents", json={"documents": [{"id": "a", "text": "alpha"}]})
    ws.memories[None].raise_on.clear()
    orig = ws.memories[None].retrieve

    def nan_scores(*a, **k):
        out = orig(*a, **k)
        out[0]["passages"][0]["score"] = float("nan")
        out[0]["extra"] = [float("inf")]
        return out
    ws.memories[None].retrieve = nan_scores
    r = client.post("/retrieve", json={"query": "alpha"})
    assert r.status_code == 200 and "NaN" not in r.text and "Infinity" not in r.text
    body = json.loads(r.text)
    assert body["results"][0]["passages"][0]["score"] is None and body["results"][0]["extra"] == [None]


def _events(text):
    out = []
    for block in text.strip().split("\n\n"):
        lines = [ln for ln in block.split("\n") if not ln.startswith(":")]
        if lines:
            out.append((lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))))
    return out


def test_streamed_answer_sends_passages_answer_done(client):
    client.post("/documents", json={"documents": [{"id": "b", "text": "Berlin is in Germany"}]})
    for kwargs in ({"json": {"question": "Germany?", "stream": True}},
                   {"json": {"question": "Germany?"}, "headers": {"Accept": "text/event-stream"}}):
        r = client.post("/answer", **kwargs)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _events(r.text)
        assert [e[0] for e in events] == ["passages", "answer", "done"]
        assert events[0][1]["passages"][0]["doc_ids"] == ["b"]
        assert events[1][1]["answer"] == "Berlin" and events[1][1]["citations"][0]["doc_ids"] == ["b"]
    r = client.post("/answer", json={"question": "Germany?"}, headers={"Accept": "application/json"})
    assert r.json()["answer"] == "Berlin"


def test_a_failure_during_the_stream_is_an_error_event_without_internals(client, ws, caplog):
    ws.memories[None].raise_on["answer"] = RuntimeError("secret detail")
    with caplog.at_level(logging.ERROR, logger="hippo_engine.service"):
        r = client.post("/answer", json={"question": "x", "stream": True})
    events = _events(r.text)
    assert events == [("error", {"error": {"type": "internal_error",
                                           "message": "internal server error (the server's log has the details)"}})]
    assert "secret" not in r.text and any("streamed answer failed" in rec.message for rec in caplog.records)
    ws.memories[None].raise_on["answer"] = ValueError("where: bad filter")
    assert _events(client.post("/answer", json={"question": "x", "stream": True}).text)[0][1]["error"] == {
        "type": "invalid_request", "message": "where: bad filter"}


def test_keep_alive_comments_while_the_answer_is_made():
    import asyncio
    import time

    def slow():
        time.sleep(0.35)
        return {"question": "q", "answer": "a", "citations": [], "passages": [], "notes": []}

    async def collect():
        return [c async for c in sse.stream_call(slow, keepalive_s=0.1)]
    chunks = asyncio.run(collect())
    assert chunks[0] == b": started\n\n" and chunks.count(b": keep-alive\n\n") >= 2
    assert chunks[-1].startswith(b"event: done")


def test_the_readers_pieces_stream_as_delta_events_before_the_answer():
    import asyncio
    import threading

    from hippo_engine.llm.streaming import current_sink, streamed_replies
    release = threading.Event()

    def answering():              # as a local reader does: pieces to the sink of the call, in its thread
        assert current_sink() is None          # only the reader's replies are streamed
        with streamed_replies():
            sink = current_sink()
            assert sink is not None
            sink("Thought: Berlin is the capital. ")
            release.wait(5)
            sink("Answer: Berlin")
        return {"question": "q", "answer": "Berlin", "citations": [], "passages": [], "notes": []}

    async def collect():
        out, stream = [], sse.stream_call(answering, keepalive_s=0.05)
        async for c in stream:
            out.append(c)
            if c.startswith(b"event: delta"):
                release.set()     # the first piece arrived while the call still runs
        return out
    chunks = asyncio.run(collect())
    events = _events(b"".join(c for c in chunks if not c.startswith(b":")).decode())
    assert [e[0] for e in events] == ["delta", "delta", "passages", "answer", "done"]
    assert "".join(e[1]["text"] for e in events[:2]) == "Thought: Berlin is the capital. Answer: Berlin"
    assert current_sink() is None


def test_an_unknown_query_parameter_is_422_naming_it(client):
    err = _json_error(client.get("/documents", params={"lmit": 5}), 422, "validation_error")
    assert err["message"] == "unknown query parameter(s): 'lmit'; this route takes: limit, offset, status"
    assert client.get("/documents", params={"limit": 5}).status_code == 200
    assert "takes: none" in _json_error(client.get("/w/x/health", params={"verbose": 1}), 422)["message"]
