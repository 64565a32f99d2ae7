"""``python -m reproduce encoder-runtime`` (reproduce/encoder_runtime.py): its arguments, today's batching over a
fake forward pass, the timing loop with a fake clock, the exactness counts, and (slow) the command with the packaged
encoder on the toy data set (no assertion on any real timing)."""
import itertools
import json

import numpy as np
import pytest
from toy_tables import QUESTIONS, make_dataset

from hippo_engine.models.encoder import _MIN_GEMM_ROWS, TransformersEncoder
from reproduce import encoder_runtime as er
from reproduce.cli import build_parser


class WordEncoder:
    """What :class:`er.Batched` reads of an encoder: one token id per word plus two specials, today's batch plan."""

    dim = 4
    max_batch_tokens = 64
    texts_per_batch = TransformersEncoder.texts_per_batch
    plan_batches = TransformersEncoder.plan_batches

    def tokenize(self, texts):
        return [[101, *(len(w) for w in t.split()), 102] for t in texts]


def test_arguments_and_defaults():
    args = build_parser().parse_args(["encoder-runtime"])
    assert (args.limit, args.rounds, args.skip) == (50, 3, [])
    args = build_parser().parse_args(["encoder-runtime", "--limit", "5", "--skip", "compile-1t", "ort-2t"])
    assert args.limit == 5 and args.skip == ["compile-1t", "ort-2t"]
    with pytest.raises(SystemExit):   # today's encoder is the reference: never skipped
        build_parser().parse_args(["encoder-runtime", "--skip", "today"])


def test_batched_keeps_order_fills_small_batches_and_pools():
    seen = []

    def forward(ids):   # hidden state: each token's id in every dimension but the last (1)
        seen.append(ids.copy())
        h = np.repeat(ids[:, :, None].astype(np.float32), 4, axis=2)
        h[:, :, 3] = 1.0
        return h

    texts = ["a bb", "ccc dddd eeeee", "f gg", "hhhhhh"]
    out = er.Batched(WordEncoder(), forward, threads=1).encode(texts)
    assert out.shape == (4, 4) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)
    assert all(b.shape[0] * b.shape[1] >= _MIN_GEMM_ROWS for b in seen)   # the row floor of today's encoder
    assert sorted(b.shape[1] for b in seen) == [3, 4, 5]    # one batch per token length, no padding
    four = next(b for b in seen if b.shape[1] == 4)
    assert four.shape[0] == 4 and (four[2:] == four[0]).all()   # "a bb", "f gg", then two throw-away copies
    mean = np.array([(101 + 1 + 2 + 102) / 4] * 3 + [1.0])
    assert np.allclose(out[0], mean / np.linalg.norm(mean))
    er.Batched(WordEncoder(), forward, threads=1, min_rows=1).encode(["a bb"])
    assert seen[-1].shape == (1, 4)   # no floor: the text alone


def test_time_queries_shuffles_and_counts_calls():
    calls = []

    def candidate(name, two_calls=False):
        return er.Candidate(name, lambda texts: calls.append((name, list(texts))), two_calls=two_calls)

    cands = [candidate("today"), candidate("today-2calls", True), candidate("x")]
    ticks = itertools.count()
    samples = er.time_queries(cands, ["q1", "q2"], [["m1", "m2"], []], rounds=2, clock=lambda: float(next(ticks)))
    assert [len(samples[n]["q"]) for n in ("today", "today-2calls", "x")] == [4, 0, 4]
    assert all(len(s["qm"]) == 4 and set(s["qm"]) == {1000.0} for s in samples.values())
    assert ("today-2calls", ["q1"]) in calls and ("today-2calls", ["m1", "m2"]) in calls
    assert ("x", ["q1", "m1", "m2"]) in calls and ("x", ["q2"]) in calls

    def orders() -> list[tuple]:
        seen: list = []
        cands = [er.Candidate(n, lambda texts, n=n: seen.append(n)) for n in "abc"]
        er.time_queries(cands, list("123456"), [[]] * 6, rounds=1, clock=lambda: 0.0)
        return [tuple(seen[i:i + 3]) for i in range(0, 36, 3)]   # per question: 3 alone, then 3 with mentions

    first = orders()
    assert all(sorted(o) == ["a", "b", "c"] for o in first) and len(set(first)) > 1
    assert orders() == first   # the same seed, the same orders
    s = er.summary(samples["x"], {"q": [2000.0], "qm": [500.0]})
    assert (s["q"]["p50"], s["q"]["speedup"], s["qm"]["speedup"]) == (1000.0, 2.0, 0.5)
    assert er.summary(samples["today-2calls"], samples["today"])["q"]["speedup"] is None


def test_exactness_counts_bits():
    ref = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    alone = ref.copy()
    alone[1, 0] = np.nextafter(np.float32(0.6), np.float32(1))
    together = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    e = er.exactness(alone, together, ref)
    assert (e["identical_to_today"], e["alone_equals_batched"], e["texts"]) == (1, 1, 2)
    assert 0 < e["max_abs_diff"] < 1e-6


@pytest.mark.slow
def test_command_with_the_packaged_encoder(tmp_path, capsys):
    make_dataset(tmp_path / "data" / "musique" / "hipporag_v1_train")
    out = tmp_path / "out" / "encoder_runtime.md"
    skip = ["today-2calls", "torch-1t-nograd", "torch-2t", "mkldnn-1t", "jit-1t", "compile-1t", "ort-2t"]
    argv = ["encoder-runtime", "--limit", "3", "--rounds", "1", "--data", str(tmp_path / "data"), "--out", str(out),
            "--skip", *skip]
    assert er.run(build_parser().parse_args(argv), argv) == 0
    text = out.read_text()
    assert "load average" in text and str(tmp_path) not in text and "| torch-1t |" in text
    figures = json.loads(out.with_suffix(".json").read_text())
    rows = {r["name"]: r for r in figures["rows"]}
    n = min(len(QUESTIONS), 3)
    assert figures["questions"] == n and len(rows["today"]["samples"]["q"]) == n
    for name in ("today", "torch-1t"):   # today's batching, on the same kernels: the same bits
        assert rows[name]["identical_to_today"] == rows[name]["alone_equals_batched"] == figures["texts"]
        assert rows[name]["max_abs_diff"] == 0.0
    assert ("ort-1t" in rows) == (er.find_spec("onnxruntime") is not None)
    assert "torch-1t" in capsys.readouterr().out
