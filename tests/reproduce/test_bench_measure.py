"""One tiny corpus through the speed benchmark, ours and the reference, and its report
(reproduce/bench/measure.py, reference.py, report.py; a few seconds)."""
from reproduce.bench.measure import run_one
from reproduce.bench.report import render


def test_tiny_corpus_row_and_report():
    row = run_one("300", 8, 4)
    assert row["name"] == "P=300" and row["P"] == 300
    for key in ("index_s", "graph_build_s", "retriever_build_s", "retrieve_single_ms", "retrieve_batched_ms",
                "ppr_single_ms", "ref_retrieve_ms", "ref_loop_ms", "igraph_ppr_ms", "ref_knn_s", "ref_insert_s",
                "insert_1pct_no_embed_s", "insert_10pct_no_embed_s", "retriever_rebuild_after_insert_s",
                "peak_rss_gb", "bandwidth_gbs", "load_end"):
        assert key in row, key
    assert row["single_equals_batched"] == "4/4"
    assert row["top10_vs_igraph"] == "4/4"
    assert row["peak_rss_gb"] > 0
    text = render([row], "python -m reproduce bench --sizes 300", 1.0)
    for heading in ("## Corpora", "## Per stage: ours vs reference", "## Checks and goals"):
        assert heading in text
    assert "| PPR top-10 = igraph exact (queries) | 4/4 |" in text
    assert "Command: `python -m reproduce bench --sizes 300`" in text
