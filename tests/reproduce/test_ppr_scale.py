"""reproduce/ppr_scale.py on a small synthetic graph: MuSiQue's ratios, the report's fields."""
import numpy as np

from reproduce import ppr_scale


def test_synthetic_graph_has_musique_ratios():
    g = ppr_scale.synthetic_graph(2000)
    assert g["entities"] == 17_200 and g["edges"]["fact"] == 18_000 and g["n"] == 19_200
    assert 36_000 >= g["edges"]["context"] > 35_000   # 2 per fact (pairs repeated in a passage merge)
    assert g["src"].max() < g["n"] and g["dst"].max() < g["n"]
    r = next(ppr_scale.query_resets(g, 1))
    assert r.shape == (g["n"],) and np.isclose(r[g["entities"]:].max(), ppr_scale.PASSAGE_WEIGHT)
    seed_idx, seed_val, prior = ppr_scale.split_reset(r, g["entities"])
    assert 1 <= len(seed_idx) <= 10 and seed_idx.max() < g["entities"] and np.all(seed_val > 0)
    assert len(prior) == 2000 and prior.min() == 0.0


def test_bench_size_and_report(tmp_path):
    res = ppr_scale.bench_size(2000, 6, 6, [1e-6], [100], log=lambda *_: None, refines=[64, 0], depth=2)
    push = res["push"]["r_max 1e-06, head 100, refine 64 x 2 steps"]
    plain = res["push"]["r_max 1e-06, head 100, no refine"]
    whole = res["push"]["r_max 1e-06, head 100, refine 64 x 2 steps, whole reset"]
    assert np.isclose(push["candidate_bound"], push["node_bound"] / 4, rtol=0.01)
    assert plain["candidate_bound"] == plain["node_bound"]
    assert res["exact"]["n"] == 6 and push["n"] == 6 and push["compared"] == 6 and whole["n"] == 6
    assert 0.0 <= push["recall_at_10"] <= 1.0 and push["node_bound"] > 0
    assert whole["same_as_parts"] and whole["recall_at_10"] == push["recall_at_10"]
    assert res["prior_ppr_s"] >= 0
    text = ppr_scale.render([res], ["--passages", "2000"])
    assert "| 2,000 | 19,200 | exact |" in text and "| push | r_max 1e-06, head 100, no refine |" in text
    assert "| push | r_max 1e-06, head 100, refine 64 x 2 steps, whole reset |" in text


def test_the_prior_from_an_index_variant():
    """``--index-head``: the push with the prior built as from the passage index (its best and lowest
    passages exact, the fill elsewhere) runs on every query and agrees with exact PPR."""
    res = ppr_scale.bench_size(2000, 6, 6, [1e-6], [100], log=lambda *_: None, index_head=100)
    ann = res["push"]["r_max 1e-06, head 100, refine 64 x 2 steps, prior from an index (head 100)"]
    whole = res["push"]["r_max 1e-06, head 100, refine 64 x 2 steps, whole reset"]
    assert ann["n"] == 6 and ann["compared"] == 6 and ann["recall_at_10"] >= 0.9 and whole["same_as_parts"]


def test_index_prior_is_the_scanned_prior_at_its_known_rows():
    from reproduce.ppr_scale_ann import index_prior
    rng = np.random.default_rng(0)
    prior = ppr_scale.PASSAGE_WEIGHT * rng.uniform(0, 1, 3000)
    prior[[5, 9]] = [0.0, ppr_scale.PASSAGE_WEIGHT]
    ann = index_prior(prior, ppr_scale.PASSAGE_WEIGHT, 50, 10)
    w = ann.weights(3000)
    assert np.allclose(w[ann.known], prior[ann.known], atol=1e-8)     # (float32 scores)
    assert abs(w.mean() - prior.mean()) < 1e-6 and set(np.argsort(-prior)[:50]) <= set(ann.known.tolist())
