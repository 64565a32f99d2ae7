"""The dense_agree top-rank rule (retrieve/top_rank.py)."""
import numpy as np

from hippo_engine.retrieve.top_rank import dense_agree


def test_dense_best_moves_first_only_when_the_graph_has_it_near_the_top():
    order, scores = np.array([4, 2, 7, 1]), np.array([0.5, 0.4, 0.3, 0.1])
    dense = np.zeros(8)
    dense[2] = 0.9
    o, s = dense_agree(order, scores, dense, 2)
    assert o.tolist() == [2, 4, 7, 1] and s.tolist() == [0.5, 0.5, 0.3, 0.1]     # non-increasing
    dense[2], dense[1] = 0.0, 0.9                                                # dense's best is 4th: unchanged
    o, s = dense_agree(order, scores, dense, 3)
    assert o is order and s is scores
    assert dense_agree(order, scores, dense, 4)[0].tolist() == [1, 4, 2, 7]
    assert dense_agree(order, scores, dense, 0)[0] is order


def test_agreement_on_the_first_passage_and_ties():
    order, scores = np.array([3, 0]), np.array([1.0, 0.5])
    dense = np.array([0.2, 0.0, 0.0, 0.2])                 # tie: the lower row (0) is dense's best
    assert dense_agree(order, scores, dense, 2)[0].tolist() == [0, 3]
    assert dense_agree(np.array([0, 3]), scores, dense, 2)[0].tolist() == [0, 3]
    assert dense_agree(np.zeros(0, np.int64), np.zeros(0), dense, 2)[0].tolist() == []
