"""``GET /stats``' ``requests`` from a real ``hippo-engine serve`` on 127.0.0.1 (the real memory, extractor
``ner``, the packaged embedder, the bundled sample corpus): the requests made are read back per route
template, with errors apart and latency percentiles in order."""
from __future__ import annotations

import pytest
from test_http_server import DOCS, QUESTIONS, Serve, add_and_wait

pytest.importorskip("uvicorn", reason="the server extra")


def test_stats_counts_the_requests_made_per_route(tmp_path):
    serve = Serve(tmp_path / "idx", None, key=None)
    try:
        c = serve.client
        assert add_and_wait(c, DOCS[:6])["status"] == "done"
        for q in QUESTIONS[:3]:
            assert c.post("/retrieve", json={"query": q["question"], "top_k": 3}).status_code == 200
        assert c.post("/retrieve", json={"query": ""}).status_code == 422
        assert c.post("/w/nowhere/retrieve", json={"query": "x"}).status_code == 404
        assert c.get("/no/such/route").status_code == 404
        requests = c.get("/stats").json()["requests"]
    finally:
        serve.stop()
    rows = {(r["method"], r["route"]): r for r in requests["routes"]}
    retrieve = rows[("POST", "/retrieve")]
    assert (retrieve["requests"], retrieve["client_errors"], retrieve["server_errors"]) == (4, 1, 0)
    assert 0 < retrieve["p50_ms"] <= retrieve["p90_ms"] <= retrieve["p99_ms"] <= retrieve["max_ms"]
    assert rows[("POST", "/w/{workspace}/retrieve")]["client_errors"] == 1
    assert rows[("POST", "/documents")]["requests"] == 1 and rows[("GET", "/jobs/{job_id}")]["requests"] >= 1
    assert rows[("GET", "(unmatched)")]["requests"] == 1
    assert all("nowhere" not in r and "such" not in r for _, r in rows)        # templates, never raw paths
    assert requests["total"] == sum(r["requests"] for r in rows.values()) and requests["process"] > 0
