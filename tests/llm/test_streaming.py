"""The pieces of a streamed reply (:mod:`hippo_engine.llm.streaming`): UTF-8 split across tokens,
the final text's rest, a failing sink, and one sink per call across threads; :func:`check_streamed_reply`
is the check the local clients' real-model tests run (tests/llm/test_llamacpp.py, test_local_llm.py)."""
from __future__ import annotations

import logging
import threading

from hippo_engine.llm.streaming import TextPieces, current_sink, streamed_replies, streaming_to


def check_streamed_reply(client) -> None:
    """A real client's reply streamed: in pieces (about one a token) that make the text ``generate``
    returns, the same as without streaming; a call outside the block sends nothing."""
    q = [{"role": "user", "content": "List three colours, comma separated."}]
    whole = client.generate(q)
    pieces: list[str] = []
    with streaming_to(pieces.append), streamed_replies():
        streamed = client.generate(q)
    assert streamed.text == whole.text and streamed.completion_tokens == whole.completion_tokens
    assert len(pieces) >= 3 and "".join(pieces) == whole.text
    client.generate(q)
    assert "".join(pieces) == whole.text


def test_a_character_split_across_tokens_is_sent_whole():
    got: list[str] = []
    p = TextPieces(got.append)
    data = "Zürich → Genève".encode()
    for i in range(len(data)):            # one byte at a time, as byte-level tokens may come
        p.feed(data[i:i + 1])
    assert "".join(got) == "Zürich → Genève" and "\ufffd" not in "".join(got)
    assert p.sent == "Zürich → Genève"


def test_finish_sends_the_rest_and_text_only_extends():
    got: list[str] = []
    p = TextPieces(got.append)
    p.text("Thought: x.")
    p.text("Thought: y")                  # not an extension of what was sent: nothing
    p.finish("Thought: x. Answer: 3")
    assert got == ["Thought: x.", " Answer: 3"]
    p.finish("Thought: x. Answer: 3")     # nothing new
    assert got == ["Thought: x.", " Answer: 3"]


def test_a_failing_sink_is_dropped_and_generation_goes_on(caplog):
    calls: list[str] = []

    def broken(text):
        calls.append(text)
        raise RuntimeError("client went away")
    p = TextPieces(broken)
    with caplog.at_level(logging.WARNING, logger="hippo_engine.llm.streaming"):
        p.feed(b"a")
        p.feed(b"b")
        p.finish("abc")
    assert calls == ["a"] and p.sent == ""
    assert sum("text sink failed" in r.message for r in caplog.records) == 1


def test_each_thread_streams_to_its_own_sink():
    seen: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def worker(name):
        with streaming_to(lambda t, n=name: None), streamed_replies():
            barrier.wait(5)
            seen[name] = current_sink()
            barrier.wait(5)
        seen[name + "-after"] = current_sink()
    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not None and seen["b"] is not None and seen["a"] is not seen["b"]
    assert seen["a-after"] is None and seen["b-after"] is None and current_sink() is None


def test_only_the_marked_replies_reach_the_sink():
    def sink(text):
        return None
    with streaming_to(sink):
        assert current_sink() is None                 # e.g. a recognition filter's call in the same request
        with streamed_replies():
            assert current_sink() is sink             # the reader's
        assert current_sink() is None
    with streamed_replies():
        assert current_sink() is None                 # nobody asked for pieces
