"""Micro-batching of concurrent retrieves (hippo_engine/service/batching.py): a fake engine that records its calls
shows what is gathered (one key, several keys, blocks of queries, the cap, window 0) and that a failing batch gives
each caller its own result or error; then Memory over a real index (fake models) answers concurrent retrieves
in one batch with exactly the single-query answers; and the setting flows from ``serve``'s flag."""
from __future__ import annotations

import argparse
import threading
import time

import pytest
from helpers import CORPUS, make_rag, together

from hippo_engine.cli import serve as cli_serve
from hippo_engine.service import results
from hippo_engine.service.batching import Gatherer
from hippo_engine.service.memory import Memory
from hippo_engine.service.settings import ServiceSettings

LONG_S = 30.0       # a window no test waits for: its batches run once full


class FakeRag:
    """Records every retrieve; answers each query with what it would answer alone (the query and the options);
    a query in ``bad`` makes the whole call fail."""

    def __init__(self, bad: tuple[str, ...] = ()):
        self.calls: list[tuple[list[str], tuple]] = []
        self.bad = bad
        self._lock = threading.Lock()

    def retrieve(self, queries: list[str], top_k: int, mode: str = "hipporag2", where: dict | None = None) -> list:
        with self._lock:
            self.calls.append((list(queries), (top_k, mode, repr(where))))
        for q in queries:
            if q in self.bad:
                raise ValueError(f"cannot answer {q!r}")
        return [f"{q}|{top_k}|{mode}|{where}" for q in queries]

    def caller(self, top_k: int = 5, mode: str = "hipporag2", where: dict | None = None):
        """The key of these options and the call that answers a batch of queries with them."""
        return (top_k, mode, repr(where)), lambda batch: self.retrieve(batch, top_k, mode, where)


def test_concurrent_calls_of_one_key_run_as_one_batch_and_each_gets_its_own_answer():
    rag, g = FakeRag(), Gatherer(LONG_S, max_queries=8)
    key, call = rag.caller()
    queries = [f"q{i}" for i in range(8)]
    got = together([lambda q=q: g.run(key, [q], call) for q in queries])
    assert got == [[f"{q}|5|hipporag2|None"] for q in queries]
    assert len(rag.calls) == 1 and sorted(rag.calls[0][0]) == sorted(queries)
    stats = g.stats()
    assert (stats["requests"], stats["batches"], stats["queries"], stats["largest_batch"]) == (8, 1, 8, 8)
    assert stats["mean_batch_queries"] == 8.0 and stats["isolated_reruns"] == 0


def test_window_zero_runs_each_request_as_its_own_call():
    rag, g = FakeRag(), Gatherer(0.0)
    key, call = rag.caller()
    got = together([lambda i=i: g.run(key, [f"q{i}", f"r{i}"], call) for i in range(6)])
    assert got == [[f"q{i}|5|hipporag2|None", f"r{i}|5|hipporag2|None"] for i in range(6)]
    assert sorted(c[0] for c in rag.calls) == sorted([f"q{i}", f"r{i}"] for i in range(6))
    assert g.stats()["batches"] == 6


def test_different_options_are_never_mixed_in_one_batch():
    rag, g = FakeRag(), Gatherer(LONG_S, max_queries=3)
    options = [{"top_k": 3}, {"top_k": 7}, {"mode": "naive"}, {"where": {"n": 1}}, {"where": {"n": True}}]
    jobs = []
    for opts in options:
        key, call = rag.caller(**opts)
        jobs += [lambda i=i, key=key, call=call: g.run(key, [f"q{i}"], call) for i in range(3)]
    got = together(jobs)
    for j, opts in enumerate(options):
        want = rag.caller(**opts)[1]
        assert got[3 * j:3 * j + 3] == [want([f"q{i}"]) for i in range(3)]
    batches = [c for c in rag.calls if len(c[0]) > 1]
    assert len(batches) == len(options) and len({c[1] for c in batches}) == len(options)    # 1 and True apart


def test_a_request_of_several_queries_joins_as_one_block():
    rag, g = FakeRag(), Gatherer(LONG_S, max_queries=6)
    key, call = rag.caller()
    blocks = [["a1", "a2", "a3"], ["b1", "b2"], ["c1"]]
    got = together([lambda b=b: g.run(key, b, call) for b in blocks])
    assert got == [[f"{q}|5|hipporag2|None" for q in b] for b in blocks]
    [(sent, _)] = rag.calls
    for b in blocks:        # each block whole, in its order
        i = sent.index(b[0])
        assert sent[i:i + len(b)] == b


def test_a_failing_batch_is_run_again_caller_by_caller():
    rag, g = FakeRag(bad=("bad",)), Gatherer(LONG_S, max_queries=3)
    key, call = rag.caller()
    got = together([lambda q=q: g.run(key, [q], call) for q in ("a", "bad", "c")])
    assert got[0] == ["a|5|hipporag2|None"] and got[2] == ["c|5|hipporag2|None"]
    assert isinstance(got[1], ValueError) and "'bad'" in str(got[1])
    assert len(rag.calls) == 4 and sorted(len(c[0]) for c in rag.calls) == [1, 1, 1, 3]
    assert g.stats()["isolated_reruns"] == 3


def test_a_lone_failing_call_gets_its_error_without_a_rerun():
    rag, g = FakeRag(bad=("bad",)), Gatherer(0.001)
    key, call = rag.caller()
    with pytest.raises(ValueError, match="bad"):
        g.run(key, ["bad"], call)
    assert len(rag.calls) == 1 and g.stats()["isolated_reruns"] == 0


def test_a_call_that_answers_the_wrong_number_of_queries_is_an_error():
    g = Gatherer(0.001)
    with pytest.raises(RuntimeError, match="2 results for 1 queries"):
        g.run("k", ["q"], lambda batch: ["x", "y"])


def test_batches_are_capped_and_a_larger_request_runs_alone():
    rag, g = FakeRag(), Gatherer(0.3, max_queries=4)
    key, call = rag.caller()
    got = together([lambda i=i: g.run(key, [f"q{i}"], call) for i in range(10)])
    assert got == [[f"q{i}|5|hipporag2|None"] for i in range(10)]
    assert max(len(c[0]) for c in rag.calls) <= 4 and sum(len(c[0]) for c in rag.calls) == 10
    assert len(rag.calls) >= 3
    t0 = time.monotonic()
    big = [f"b{i}" for i in range(5)]
    assert g.run(key, big, call) == [f"{q}|5|hipporag2|None" for q in big]
    assert time.monotonic() - t0 < 0.3 and rag.calls[-1][0] == big       # no window: it runs at once


def test_the_window_and_cap_are_checked():
    with pytest.raises(ValueError, match="non-negative"):
        Gatherer(-1.0)
    with pytest.raises(ValueError, match="max_queries"):
        Gatherer(0.0, max_queries=0)


# ---------------------------------------------------------------------------- Memory over a real index

@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    rag = make_rag(tmp_path_factory.mktemp("batching") / "m", use_filter=False)
    rag.index(CORPUS)
    yield rag
    rag.close()


QUESTIONS = ["Who founded Tamsin College?", "Where was Ilse Marrow born?", "What is the capital of Kaldavia?",
             "Who married Oren Pike?", "Where is the Amber Fair held?", "Who mapped Lake Veloria?"]


def recording(rag, monkeypatch) -> list[list[str]]:
    """The queries of every ``rag.retrieve`` call from now on (the test's end restores the method)."""
    calls: list[list[str]] = []
    real = rag.retrieve

    def recorded(queries, *a, **k):
        calls.append(list(queries))
        return real(queries, *a, **k)

    monkeypatch.setattr(rag, "retrieve", recorded)
    return calls


def test_memory_answers_concurrent_retrieves_in_one_batch_exactly_as_alone(indexed, monkeypatch):
    alone = {q: results.retrieval(indexed.retrieve([q], 3, explain=True)[0], "hipporag2", True) for q in QUESTIONS}
    mem = Memory(indexed, worker=False, batch_window_ms=LONG_S * 1000, batch_max_queries=len(QUESTIONS))
    calls = recording(indexed, monkeypatch)
    got = together([lambda q=q: mem.retrieve([q], top_k=3, explain=True) for q in QUESTIONS])
    assert [g[0] for g in got] == [alone[q] for q in QUESTIONS]     # same ids, scores and explanations
    assert len(calls) == 1 and sorted(calls[0]) == sorted(QUESTIONS)
    assert mem.stats()["batching"]["batches"] == 1


def test_memory_with_window_zero_calls_the_engine_once_per_request(indexed, monkeypatch):
    mem = Memory(indexed, worker=False, batch_window_ms=0)
    calls = recording(indexed, monkeypatch)
    got = together([lambda q=q: mem.retrieve([q], top_k=2) for q in QUESTIONS[:4]])
    assert [g[0]["query"] for g in got] == QUESTIONS[:4]
    assert sorted(calls) == sorted([q] for q in QUESTIONS[:4])


def test_a_filter_that_is_not_plain_json_is_never_batched(indexed, monkeypatch):
    mem = Memory(indexed, worker=False, batch_window_ms=LONG_S * 1000)
    t0 = time.monotonic()
    with pytest.raises((ValueError, TypeError)):
        mem.retrieve(["Who founded Tamsin College?"], where={"n": object()})
    assert time.monotonic() - t0 < LONG_S / 2


# ---------------------------------------------------------------------------- the setting

def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_serve.add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", "--save-dir", "idx", *argv])


def test_the_flag_sets_the_window_of_every_memory_and_bad_values_are_refused():
    assert cli_serve.build_settings(_serve_args("--batch-window-ms", "0"), environ={}).memory_options == {
        "batch_window_ms": 0.0}
    assert "batch_window_ms" not in cli_serve.build_settings(_serve_args(), environ={}).memory_options
    with pytest.raises(SystemExit):
        _serve_args("--batch-window-ms", "-1")
    with pytest.raises(ValueError, match="batch window"):
        ServiceSettings(save_dir="x", memory_options={"batch_window_ms": -1})


def test_several_workers_split_the_cores_between_their_encoders():
    assert cli_serve.worker_share({"a": 1}, 1, cpus=16) == {"a": 1}
    assert cli_serve.worker_share({"a": 1}, 4, cpus=16) == {"a": 1, "embedding_num_workers": 4}
    assert cli_serve.worker_share({}, 4, cpus=2) == {"embedding_num_workers": 2}
    assert cli_serve.build_settings(_serve_args("--workers", "3"), environ={}).rag_options["embedding_num_workers"] >= 2


def test_mcp_recalls_at_once_run_as_one_batch(indexed, monkeypatch):
    from hippo_engine.service.mcp_server import MemoryTools

    class OneMemory:
        def __init__(self, memory: Memory):
            self.memory = memory

        def get(self, name, *, create: bool) -> Memory:
            return self.memory

    alone = MemoryTools(OneMemory(Memory(indexed, worker=False, batch_window_ms=0)))
    want = [alone.recall(q, 3, None) for q in QUESTIONS]
    tools = MemoryTools(OneMemory(Memory(indexed, worker=False, batch_window_ms=LONG_S * 1000,
                                         batch_max_queries=len(QUESTIONS))))
    calls = recording(indexed, monkeypatch)
    assert together([lambda q=q: tools.recall(q, 3, None) for q in QUESTIONS]) == want
    assert len(calls) == 1 and sorted(calls[0]) == sorted(QUESTIONS)
