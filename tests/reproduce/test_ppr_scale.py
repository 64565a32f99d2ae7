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


def test_bench_size_and_report(tmp_path):
    res = ppr_scale.bench_size(2000, 6, 6, [1e-6], [100], log=lambda *_: None)
    push = res["push"]["r_max 1e-06, head 100"]
    assert res["exact"]["n"] == 6 and push["n"] == 6 and push["compared"] == 6
    assert 0.0 <= push["recall_at_10"] <= 1.0 and push["node_bound"] > 0
    text = ppr_scale.render([res], ["--passages", "2000"])
    assert "| 2,000 | 19,200 | exact |" in text and "| push | r_max 1e-06, head 100 |" in text
