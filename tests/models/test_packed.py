"""The packed forward pass (hippo_engine.models.packed) with the real packaged all-MiniLM-L6-v2: texts of different
lengths in one pass give the vectors of the usual length-grouped plan, bit for bit; ``encode_groups`` gives each
group's ``encode`` vectors; the choice falls back to the usual plan where packing is not exact or not possible."""
from __future__ import annotations

import numpy as np
import pytest

from hippo_engine.models import encoder as encoder_module
from hippo_engine.models.encoder import Encoder, TransformersEncoder
from hippo_engine.models.packed import PackedBert, pack_rows, packable

QUERIES = ["Who founded the company that makes the Model S?", "When was the Eiffel Tower built?",
           "What is the capital of the country where Marie Curie was born?", "Paris"]
MENTIONS = [["Model S"], ["the Eiffel Tower"], ["Marie Curie"], []]


def test_pack_rows_adds_copies_of_the_first_text_up_to_the_floor():
    assert pack_rows([5, 3], 16) == [5, 3, 5, 5]
    assert pack_rows([20], 16) == [20]
    assert pack_rows([4, 4, 4, 4], 16) == [4, 4, 4, 4]
    assert pack_rows([3], 16) == [3] * 6


def test_a_model_that_is_not_bert_is_not_packed():
    class Config:
        model_type = "mpnet"
        _attn_implementation = "sdpa"

    class MPNetModel:
        config = Config()

    assert not packable(MPNetModel())


@pytest.mark.slow
class TestRealEncoder:
    @pytest.fixture(scope="class")
    def encoders(self) -> tuple[TransformersEncoder, TransformersEncoder]:
        return TransformersEncoder(), TransformersEncoder(pack=False)

    def test_packing_is_chosen_for_the_packaged_model(self, encoders):
        assert isinstance(encoders[0].packing(), PackedBert)
        assert encoders[1].packing() is None

    def test_a_query_and_its_mentions_equal_separate_calls_bit_for_bit(self, encoders):
        packed, usual = encoders
        for q, ms in zip(QUERIES, MENTIONS, strict=True):
            got = packed.encode_groups([([q], "Instruct: find facts\n"), (ms, None)])
            want = [usual.encode([q], instruction="Instruct: find facts\n"), usual.encode(ms)]
            assert len(got) == 2 and got[1].shape == (len(ms), usual.dim)
            for g, w in zip(got, want, strict=True):
                assert np.array_equal(g, w)

    def test_mixed_lengths_in_one_pass_equal_the_usual_plan(self, encoders):
        packed, usual = encoders
        texts = QUERIES + [m for ms in MENTIONS for m in ms] + ["a", "Gustave Eiffel's company, 1887 to 1889"]
        assert len(texts) <= encoder_module.PACK_MAX_TEXTS
        assert np.array_equal(packed.encode(texts), usual.encode(texts))
        for t in texts:      # and each text alone
            assert np.array_equal(packed.encode([t]), usual.encode([t]))

    def test_a_large_call_keeps_the_usual_plan(self, encoders, monkeypatch):
        packed, usual = encoders
        texts = [f"passage number {i} about topic {i % 7}" for i in range(encoder_module.PACK_MAX_TEXTS + 1)]
        monkeypatch.setattr(PackedBert, "embed", lambda self, ids: pytest.fail("packed a large call"))
        assert np.array_equal(packed.encode(texts), usual.encode(texts))

    def test_packing_is_off_where_it_would_not_be_exact(self, monkeypatch):
        enc = TransformersEncoder()
        monkeypatch.setattr(enc, "_agrees", lambda packed: False)
        assert enc.packing() is None
        assert enc.encode(["still encodes"]).shape == (1, enc.dim)


def test_the_interface_default_encodes_each_group_in_turn():
    class Counting(Encoder):
        name, dim = "counting", 2

        def __init__(self):
            self.calls: list[tuple[list[str], str | None]] = []

        def encode(self, texts, *, instruction=None, show_progress=False, desc="Encoding"):
            self.calls.append((list(texts), instruction))
            return np.ones((len(texts), 2), np.float32)

    enc = Counting()
    out = enc.encode_groups([(["q"], "I: "), (["a", "b"], None)])
    assert [o.shape for o in out] == [(1, 2), (2, 2)]
    assert enc.calls == [(["q"], "I: "), (["a", "b"], None)]
