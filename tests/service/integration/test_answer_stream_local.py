"""``POST /answer`` streamed from the default reader, for real: ``hippo-engine serve`` in a subprocess
on 127.0.0.1 with no LLM flag, so the reader is the packaged local model (llama.cpp where installed,
else ``transformers``); the memory holds the bundled sample corpus's passages for one question. The
reader's text arrives as ``delta`` events while it is written (several events, before the answer),
and the pieces hold the answer the ``answer`` event gives."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("uvicorn", reason="the server extra")
httpx = pytest.importorskip("httpx")

from test_http_server import BY_TITLE, DOCS, QUESTIONS, Serve, add_and_wait  # noqa: E402

pytestmark = pytest.mark.slow


def _timed_events(response) -> list[tuple[float, str, dict]]:
    """(seconds since the request, event, data) of each event of a streamed reply, as it arrives."""
    t0, out, name = time.monotonic(), [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: ") and name:
            out.append((time.monotonic() - t0, name, json.loads(line.removeprefix("data: "))))
            name = None
    return out


def test_the_local_readers_text_streams_as_it_is_written(tmp_path):
    q = QUESTIONS[0]
    docs = [d for d in DOCS if d["title"] in q["supporting_titles"]]
    srv = Serve(tmp_path / "memory", None)
    try:
        job = add_and_wait(srv.client, docs)
        assert job["status"] == "done", job
        body = {"question": q["question"], "top_k": len(docs), "stream": True}
        with srv.client.stream("POST", "/answer", json=body, timeout=900) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = _timed_events(r)
    finally:
        srv.stop()
    names = [e[1] for e in events]
    deltas = [e for e in events if e[1] == "delta"]
    assert names[-3:] == ["passages", "answer", "done"] and names[:len(deltas)] == ["delta"] * len(deltas), names
    # written as it came: pieces sent apart (all at the end would be one event) and before the answer
    assert len(deltas) >= 3 and deltas[0][0] < events[-2][0], [(round(t, 2), n) for t, n, _ in events]
    text = "".join(e[2]["text"] for e in deltas)
    answer = events[-2][2]
    assert answer["answer"] and answer["answer"] in text, (text, answer)
    assert {d for c in answer["citations"] for d in c["doc_ids"]} <= {BY_TITLE[t] for t in q["supporting_titles"]}
