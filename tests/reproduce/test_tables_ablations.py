"""Table 4, ablations (reproduce/tables/ablations.py)."""
from toy_tables import make_dataset, run


def test_limit_and_paper_figures_for_musique_like_name(env):
    data = make_dataset(env["tmp"] / "data2", name="musique_toy")
    path = run(env, "table-ablations", "--limit", "3", "--no-filter", "--only", "full,query,no_passage",
               dataset=data)
    text = path.read_text()
    assert "first 3 of 6 questions (`--limit 3`)" in text
    assert "73.0" in text and "44.9" in text and "63.7" in text  # paper Table 4, MuSiQue column
    assert "not `musique_toy`" in text
    assert path == env["out"] / "musique_toy" / "ablations-no-filter-first3.md"
