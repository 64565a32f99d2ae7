"""Span vectors pooled from a text's own forward pass (hippo_engine.models.spans), with the real packaged
all-MiniLM-L6-v2."""
from __future__ import annotations

import numpy as np
import pytest

from hippo_engine.models.encoder import Encoder, TransformersEncoder
from hippo_engine.models.spans import token_range

pytestmark = pytest.mark.slow

TEXTS = ["Brask\nBrask is the capital of Kaldavia. Brask lies on the Tamsin River.",
         "The Eiffel Tower is a wrought-iron lattice tower in Paris. It is named after Gustave Eiffel.",
         "Paris"]


@pytest.fixture(scope="module")
def enc() -> TransformersEncoder:
    return TransformersEncoder()


def spans_of(texts, parts):
    return [(i, texts[i].index(s), texts[i].index(s) + len(s)) for i, s in parts]


def test_text_vectors_are_those_of_encode_and_a_whole_span_is_the_text(enc):
    whole = [(i, 0, len(t)) for i, t in enumerate(TEXTS)]
    vecs, span_vecs, pooled = enc.encode_spans(TEXTS, whole)
    assert np.array_equal(vecs, enc.encode(TEXTS))           # the passages' own vectors are unchanged
    assert pooled.all()
    assert np.abs(span_vecs - vecs).max() <= 1e-6
    assert np.allclose(np.linalg.norm(span_vecs, axis=1), 1.0, atol=1e-6)


def test_sentences_pooled_in_context_are_near_but_not_their_lone_vectors(enc):
    parts = [(0, "Brask"), (0, "Brask is the capital of Kaldavia."), (0, "Brask lies on the Tamsin River."),
             (1, "It is named after Gustave Eiffel.")]
    _, span_vecs, pooled = enc.encode_spans(TEXTS, spans_of(TEXTS, parts))
    alone = enc.encode([s for _, s in parts])
    cos = (span_vecs * alone).sum(axis=1)
    assert pooled.all() and (cos > 0.5).all() and (cos < 0.999).all()
    # the same span gives the same vector whatever else is encoded in the call
    _, again, _ = enc.encode_spans(TEXTS[:1], spans_of(TEXTS, parts[:1]))
    assert np.abs(again[0] - span_vecs[0]).max() <= 1e-6


def test_spans_past_truncation_are_left_to_encode_alone():
    short = TransformersEncoder(max_length=16)
    text = "Alpha beta gamma delta. " * 10
    spans = [(0, 0, 23), (0, len(text) - 24, len(text) - 1), (0, 5, 5)]
    vecs, span_vecs, pooled = short.encode_spans([text], spans)
    assert pooled.tolist() == [True, False, False]           # past max_length; no token at all
    assert not span_vecs[1:].any()
    assert np.array_equal(vecs, short.encode([text]))


def test_token_range_of_offsets():
    offsets = [(0, 0), (0, 5), (6, 8), (9, 12), (0, 0)]      # [CLS] Alpha be ta [SEP]: "Alpha be tax"
    special = [1, 0, 0, 0, 1]
    assert token_range(offsets, special, "Alpha be tax", 6, 12) == (2, 4)
    assert token_range(offsets, special, "Alpha be tax", 0, 5) == (1, 2)
    assert token_range(offsets, special, "Alpha be tax more", 6, 17) is None    # past the last kept token
    assert token_range(offsets, special, "Alpha be tax  ", 6, 14) == (2, 4)     # trailing spaces only


def test_the_interface_default_pools_nothing():
    class Plain(Encoder):
        name, dim = "plain", 2

        def encode(self, texts, *, instruction=None, show_progress=False, desc="Encoding"):
            return np.tile(np.array([[1.0, 0.0]], np.float32), (len(texts), 1))

    vecs, span_vecs, pooled = Plain().encode_spans(["a b"], [(0, 0, 1)])
    assert vecs.shape == (1, 2) and not pooled.any() and not span_vecs.any()
