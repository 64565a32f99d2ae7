"""Tests for hippo_engine.models.encoder.TransformersEncoder with the real packaged all-MiniLM-L6-v2."""
from __future__ import annotations

import random

import numpy as np
import pytest

from hippo_engine.models.encoder import Encoder, TransformersEncoder

pytestmark = pytest.mark.slow

SENTENCES = [
    "The cat sat on the mat.",
    "Barack Obama was the 44th president of the United States.",
    "Paris",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Journal of Mathematical Physics",
    "a",
    "University of Copenhagen",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
    "from 1887 to 1889.",
    "Jan Philip Solovej",
    "January 1960",
    "American Institute of Physics",
    "How many moons does Jupiter have?",
    "",
]

ENTITIES = [
    "1963", "2018 Impact Factor", "American Institute of Physics", "Jan Philip Solovej",
    "January 1960", "Journal of Mathematical Physics", "University of Copenhagen", "Paris",
    "Gustave Eiffel", "Eiffel Tower", "Champ de Mars", "France", "Barack Obama",
    "United States", "44th president", "Jupiter", "moons", "light energy", "plants",
    "chemical energy", "New York City", "the Beatles", "Abbey Road", "Liverpool",
    "World War II", "Winston Churchill", "1945", "Nobel Prize in Physics", "Albert Einstein",
    "theory of relativity", "Princeton University", "Ulm", "Germany", "Kingdom of Württemberg",
]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Run this module single-threaded: on a busy 2-core box OpenMP spin-waiting makes many
    tiny forward passes 10x slower with 2 threads. Restores the thread count afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def enc() -> TransformersEncoder:
    return TransformersEncoder()


@pytest.fixture(scope="module")
def enc_bf16() -> TransformersEncoder:
    return TransformersEncoder(dtype="bfloat16")


def test_attributes(enc):
    assert isinstance(enc, Encoder)
    assert enc.name == "all-MiniLM-L6-v2"
    assert enc.dim == 384
    assert enc.max_length == 256  # from sentence_bert_config.json


def test_shape_dtype_unit_norm(enc):
    v = enc.encode(SENTENCES)
    assert v.shape == (len(SENTENCES), 384)
    assert v.dtype == np.float32
    assert np.all(np.isfinite(v))
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_empty_input(enc):
    v = enc.encode([])
    assert v.shape == (0, 384)
    assert v.dtype == np.float32


def test_single_string_rejected(enc):
    with pytest.raises(TypeError):
        enc.encode("not a list")


def test_order_preserved_with_length_sorting(enc):
    # Distinct texts of very different lengths, deliberately not sorted by length.
    texts = list(dict.fromkeys(SENTENCES + ENTITIES))
    together = enc.encode(texts)
    reversed_ = enc.encode(texts[::-1])[::-1]
    assert np.array_equal(together, reversed_)
    # Every row is the embedding of its own text (identical texts -> identical rows, distinct
    # texts -> distinct rows), and row i best matches text i.
    alone = np.stack([enc.encode([t])[0] for t in texts])
    assert np.argmax(together @ alone.T, axis=1).tolist() == list(range(len(texts)))
    # The planner really groups by length: each batch holds a single token length, and at
    # most the token budget's worth of texts.
    lengths = [len(x) for x in enc.tokenize(texts)]
    for batch in enc.plan_batches(lengths):
        assert len({lengths[i] for i in batch}) == 1
        assert len(batch) <= enc.texts_per_batch(lengths[batch[0]])


def test_semantic_sanity(enc):
    q, para, unrelated = enc.encode([
        "A man is playing a guitar on stage.",
        "On stage, a guy plays the guitar.",
        "The stock market fell sharply on Tuesday.",
    ])
    assert float(q @ para) > float(q @ unrelated) + 0.3


def test_mean_pooling_by_hand(enc):
    """encode() == mean of last_hidden_state over tokens, L2-normalised (sentence-transformers)."""
    import torch

    text = "Journal of Mathematical Physics"
    batch = enc.tokenizer([text], return_tensors="pt")
    with torch.inference_mode():
        h = enc.model(**batch).last_hidden_state[0]
    ref = h.mean(0)
    ref = (ref / ref.norm()).numpy()
    np.testing.assert_allclose(enc.encode([text])[0], ref, atol=1e-6)


def test_instruction_changes_vector(enc):
    text = "Who wrote the theory of relativity?"
    plain = enc.encode([text])[0]
    instructed = enc.encode([text], instruction="Represent this question for retrieval: ")[0]
    assert not np.allclose(plain, instructed)
    # The instruction is prepended verbatim.
    manual = enc.encode(["Represent this question for retrieval: " + text])[0]
    assert np.array_equal(instructed, manual)
    assert np.array_equal(enc.encode([text], instruction="")[0], plain)


def test_bfloat16_close_to_float32(enc, enc_bf16):
    texts = SENTENCES[:-1] + ENTITIES
    a = enc.encode(texts)
    b = enc_bf16.encode(texts)
    assert b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cos = np.sum(a * b, axis=1)
    assert cos.min() > 0.99, cos.min()


@pytest.mark.parametrize("which", ["float32", "bfloat16"])
def test_batch_composition_independence_bit_exact(enc, enc_bf16, which):
    """A text's vector is bit-identical whatever else is in the call (alone, all at once,
    shuffled into different calls, different batch sizes): index(A); index(B) == index(A+B)."""
    e = enc if which == "float32" else enc_bf16
    # bf16 matmuls are slow on CPUs without native bf16 support: use fewer texts there.
    texts = SENTENCES + (ENTITIES if which == "float32" else ENTITIES[::3])
    all_at_once = e.encode(texts)
    alone = np.stack([e.encode([t])[0] for t in texts])
    assert np.array_equal(alone, all_at_once), np.abs(alone - all_at_once).max()

    rng = random.Random(1234)
    perm = list(range(len(texts)))
    rng.shuffle(perm)
    cut = len(texts) // 3
    first = e.encode([texts[i] for i in perm[:cut]])
    second = e.encode([texts[i] for i in perm[cut:]])
    split = np.empty_like(all_at_once)
    split[perm[:cut]] = first
    split[perm[cut:]] = second
    assert np.array_equal(split, all_at_once), np.abs(split - all_at_once).max()

    old = e.max_batch_tokens
    try:
        e.max_batch_tokens = 24  # 1 to 8 texts per batch
        small_batches = e.encode(texts)
    finally:
        e.max_batch_tokens = old
    assert np.array_equal(small_batches, all_at_once), np.abs(small_batches - all_at_once).max()

    # serial in the calling thread (with the process's thread count) == parallel workers
    old_workers = e.num_workers
    try:
        e.num_workers = 1
        serial = e.encode(texts)
        e.num_workers = 3
        three = e.encode(texts)
    finally:
        e.num_workers = old_workers
    assert np.array_equal(serial, all_at_once) and np.array_equal(three, all_at_once)


def test_token_budget_batches(enc):
    """Short texts share big batches, long ones get small batches of the same cost."""
    assert enc.max_batch_tokens == enc.batch_size * 64
    lengths = [5] * 1000 + [20] * 300 + [200] * 50
    batches = enc.plan_batches(lengths)
    sizes = {}
    for b in batches:
        sizes.setdefault(lengths[b[0]], []).append(len(b))
    budget = enc.max_batch_tokens
    assert sizes[5] == [budget // 5, 1000 - budget // 5]
    assert sizes[20] == [budget // 20, 300 - budget // 20]
    assert max(sizes[200]) == budget // 200
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert TransformersEncoder.texts_per_batch(enc, 10 * budget) == 1


def test_workers_restore_thread_count(enc):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        enc.encode(ENTITIES)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_duplicates_identical(enc):
    v = enc.encode(["Paris", "France", "Paris", "Paris"])
    assert np.array_equal(v[0], v[2]) and np.array_equal(v[0], v[3])


def test_truncation(enc):
    long_text = "word " * 2000
    short = TransformersEncoder(max_length=16)
    assert short.max_length == 16
    assert max(len(x) for x in short.tokenize([long_text])) == 16
    v = enc.encode([long_text])
    assert v.shape == (1, 384) and np.isfinite(v).all()


def test_nonexistent_local_path(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        TransformersEncoder(str(missing))


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        TransformersEncoder(dtype="float16")
    with pytest.raises(ValueError, match="batch_size"):
        TransformersEncoder(batch_size=0)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        TransformersEncoder(max_batch_tokens=0)
    with pytest.raises(ValueError, match="num_workers"):
        TransformersEncoder(num_workers=0)


@pytest.mark.parametrize("threads", [1])
def test_gemm_row_invariance_above_floor(threads):
    """The platform property the bit-exactness rests on: a linear layer's output row does not
    depend on how many rows share the matmul once there are >= _MIN_GEMM_ROWS of them
    (smaller matmuls may use differently-rounding BLAS kernels; encode() pads them). It holds
    for one intra-op thread, which is how encode() runs its forward passes on the CPU; with
    two threads it does not hold on every CPU (an AVX-512 Xeon splits 57-192-row products of
    a 1536x384 layer differently), which the encoder's docstring says."""
    import torch

    import hippo_engine.models.encoder as emb

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        for k, n in ((384, 1536), (1536, 384)):
            w = torch.randn(n, k, generator=gen) * 0.05
            b = torch.randn(n, generator=gen)
            x = torch.randn(4100, k, generator=gen)
            with torch.inference_mode():
                ref = torch.nn.functional.linear(x, w, b)
                # up to the default token budget (4096 rows) and a little beyond
                for m in list(range(emb._MIN_GEMM_ROWS, 70)) + [97, 128, 255, 300, 1025, 4096, 4100]:
                    out = torch.nn.functional.linear(x[:m], w, b)
                    assert torch.equal(out, ref[:m]), (k, n, m, threads)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("plan", ["length-grouped", "packed"])
def test_worker_error_propagates_and_restores_threads(enc, monkeypatch, plan):
    import torch

    from hippo_engine.models.packed import PackedBert

    def boom(*args):
        raise RuntimeError("forward failed")

    before = torch.get_num_threads()
    if plan == "packed":          # a small call: packs of mixed lengths
        monkeypatch.setattr(PackedBert, "embed", boom)
        texts = ENTITIES
    else:                         # more texts than a packed call holds: the length-grouped batches
        monkeypatch.setattr(enc, "_forward", boom)
        texts = ENTITIES * 2
    with pytest.raises(RuntimeError, match="forward failed"):
        enc.encode(texts)
    assert torch.get_num_threads() == before
