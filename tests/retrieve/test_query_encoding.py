"""``retrieve.encoding.encode_with_mentions``: a query's vectors (both instructions) and its mentions' vectors in one
encoder call, equal to encoding each apart; a query without mentions gets None, and no names at all gives None."""
from __future__ import annotations

import numpy as np
from fakes import NgramEncoder

from hippo_engine.config import RetrievalConfig
from hippo_engine.retrieve.encoding import encode_queries, encode_with_mentions

QUERIES = ["Who founded Tamsin College?", "Where is Brask?", "What is the Amber Fair?"]
NAMES = [["Tamsin College"], [], ["Amber Fair", "Velor"]]


def _config(passage_instruction: str | None) -> RetrievalConfig:
    return RetrievalConfig.model_validate({"query_instruction_fact": "facts: ",
                                           "query_instruction_passage": passage_instruction or "facts: "})


def test_the_vectors_are_those_of_separate_calls_in_one_call():
    for passage in (None, "passages: "):
        enc, cfg = NgramEncoder(), _config(passage)
        q_fact, q_pass, ner = encode_with_mentions(enc, QUERIES, cfg, NAMES)
        assert enc.calls == (3 if passage else 2)       # the default encode_groups: one encode per group
        want_fact, want_pass = encode_queries(NgramEncoder(), QUERIES, cfg)
        assert np.array_equal(q_fact, want_fact) and np.array_equal(q_pass, want_pass)
        assert (q_pass is q_fact) == (passage is None)
        assert ner is not None and ner[1] is None
        for names, got in zip(NAMES, ner, strict=True):
            if names:
                assert np.array_equal(got, NgramEncoder().encode(names))


def test_without_names_there_are_no_entity_vectors():
    enc = NgramEncoder()
    q_fact, _, ner = encode_with_mentions(enc, QUERIES, _config(None), None)
    assert ner is None and q_fact.shape == (3, enc.dim) and enc.calls == 1


class _Groups(NgramEncoder):
    """Records the groups one call hands over."""

    def encode_groups(self, groups):
        self.groups = [(list(texts), instruction) for texts, instruction in groups]
        return super().encode_groups(groups)


def test_the_query_and_its_mentions_go_to_the_encoder_together():
    enc = _Groups()
    encode_with_mentions(enc, QUERIES[:1], _config(None), NAMES[:1])
    assert enc.groups == [(QUERIES[:1], "facts: "), (["Tamsin College"], None)]
