"""The one score (retrieve/second/fusion.py) as pure functions: its terms, their sum, filters, and that its order
is the order of one number per passage (no rule that looks at a cut)."""
import numpy as np
import pytest

from hippo_engine.config import HippoConfig
from hippo_engine.retrieve.second.fusion import Fusion, dense_vote, head_of, make_fusion, relative

FIRST = np.array([0.40, 0.10, 0.30, 0.05, 0.15])
SECOND = np.array([0.20, 0.25, 0.05, 0.40, 0.10])
DENSE = np.array([0.50, 0.62, 0.61, 0.20, 0.55])


def test_the_terms_are_relative_walks_a_head_and_a_dense_vote_and_the_score_is_their_sum():
    f = Fusion(head=2, head_weight=1.5, dense_weight=1.5, dense_temperature=0.015)
    t = f.terms(SECOND, DENSE, FIRST)
    assert np.allclose(t["walk"], SECOND / 0.40)
    assert np.allclose(t["head"], [1.5, 0, 1.5 * 0.75, 0, 0])          # the first walk's 2 best: rows 0 and 2
    assert np.allclose(t["dense"], 1.5 * np.exp((DENSE - 0.62) / 0.015))
    assert t["dense"][1] == 1.5 and t["dense"][3] < 1e-11               # 1 on dense's best, ~0 far below it
    assert np.array_equal(f.score(SECOND, DENSE, FIRST), t["walk"] + t["head"] + t["dense"])


def test_columns_are_queries_and_each_is_scored_alone():
    f = Fusion()
    both = f.score(np.column_stack([SECOND, FIRST]), np.column_stack([DENSE, DENSE[::-1]]),
                   np.column_stack([FIRST, SECOND]))
    assert np.array_equal(both[:, 0], f.score(SECOND, DENSE, FIRST))
    assert np.array_equal(both[:, 1], f.score(FIRST, DENSE[::-1], SECOND))


def test_blocked_rows_take_no_part_and_score_minus_infinity():
    f = Fusion(head=1)
    s = f.score(SECOND, DENSE, FIRST, blocked=np.array([0, 1]))
    assert np.isneginf(s[:2]).all()
    t = f.terms(SECOND, DENSE, FIRST, blocked=np.array([0, 1]))
    assert t["walk"][3] == 1.0 and t["head"][2] == 2.0 and t["dense"][2] == 1.5   # maxima over allowed rows


def test_one_walk_has_no_head_term_and_zero_weights_drop_terms():
    t = Fusion(dense_weight=0.0).terms(FIRST, DENSE)
    assert not t["head"].any() and not t["dense"].any()
    assert np.allclose(t["walk"], FIRST / 0.40)
    assert not Fusion(head_weight=0.0).terms(SECOND, DENSE, FIRST)["head"].any()


def test_pieces_handle_ties_zeros_and_empty_inputs():
    allowed = np.ones(4, bool)
    assert head_of(np.array([0.5, 1.0, 0.5, 0.5]), 2, allowed).tolist() == [0.5, 1.0, 0, 0]   # ties: lower row
    assert relative(np.zeros(3), np.ones(3, bool)).tolist() == [0, 0, 0]
    assert dense_vote(np.zeros((0, 2)), 0.01, np.zeros(0, bool)).shape == (0, 2)
    assert Fusion().score(np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1))).shape == (0, 1)


@pytest.mark.parametrize("k", range(1, 6))
def test_the_engines_cut_of_the_score_is_a_prefix_for_every_k_ties_included(k):
    from hippo_engine.retrieve.scoring import top_k
    s = Fusion().score(SECOND, DENSE, FIRST)
    tied = np.r_[s, s]                                   # every score twice: ties go to the lower row
    assert top_k(s, k).tolist() == top_k(s, len(s)).tolist()[:k]
    assert top_k(tied, k).tolist() == top_k(tied, len(tied)).tolist()[:k]
    assert (np.diff(s[top_k(s, len(s))]) <= 0).all()


def test_make_fusion_follows_the_resolved_settings():
    from hippo_engine.auto import resolve_retrieval
    ner = resolve_retrieval(HippoConfig().retrieval, "ner")
    assert make_fusion(ner, True) == Fusion(2, 2.0, 1.5, 0.015)
    paper = resolve_retrieval(HippoConfig().retrieval, "openie")
    assert make_fusion(paper, False) is None                      # the paper's walk: its PPR probability
    assert make_fusion(paper.model_copy(update={"dense_weight": 0.5}), False) == Fusion(2, 2.0, 0.5, 0.015)
