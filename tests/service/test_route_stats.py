"""Requests per route in ``GET /stats`` (hippo_engine/service/route_stats.py): the histogram's percentiles
against exact ones, the counters under threads, the route templates, and the middleware over the app
(fake workspaces): counts, 4xx and 5xx apart, unknown paths in one row."""
import random
import threading

import numpy as np
import pytest
from http_fakes import make_client

from hippo_engine.service.route_stats import (
    BUCKETS,
    GROWTH,
    UNMATCHED,
    Latencies,
    RouteStats,
    bucket_of,
    compile_paths,
    declared_paths,
    route_template,
)


def test_percentiles_are_within_a_bucket_of_the_exact_ones():
    rng = random.Random(7)
    values = [rng.lognormvariate(-3, 1.2) for _ in range(5000)]     # ~50 ms median, a long tail
    lat = Latencies()
    for v in values:
        lat.add(v)
    for q in (50, 90, 99):
        exact = float(np.percentile(values, q, method="inverted_cdf"))
        assert abs(lat.percentile(q) / exact - 1) < GROWTH - 1, q
    assert lat.percentile(100) == max(values) and lat.n == 5000
    summary = lat.summary()
    assert summary["max_ms"] == round(max(values) * 1000, 2)
    assert summary["mean_ms"] == pytest.approx(sum(values) / len(values) * 1000, abs=0.01)
    assert len(lat.counts) <= BUCKETS


def test_one_value_and_the_extremes():
    lat = Latencies()
    assert lat.percentile(50) is None and lat.summary() == {"p50_ms": None, "p90_ms": None, "p99_ms": None,
                                                            "mean_ms": None, "max_ms": None}
    lat.add(0.0123)
    assert lat.summary()["p50_ms"] == lat.summary()["p99_ms"] == 12.3       # clamped to the only value seen
    assert bucket_of(0.0) == 0 and bucket_of(1e9) == BUCKETS - 1


def test_counts_under_threads_and_errors_apart():
    stats = RouteStats(clock=iter(range(1000, 2000, 5)).__next__)

    def hammer(i: int) -> None:
        for j in range(500):
            stats.record("POST", "/retrieve", (200, 404, 503)[j % 3] if i == 0 else 200, 0.01)
    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats.record("GET", "/stats", 200, 0.002)
    snap = stats.snapshot()
    assert snap["total"] == 2001 and snap["since"] == "1970-01-01T00:16:40Z" and snap["uptime_s"] == 5
    (row,) = [r for r in snap["routes"] if r["route"] == "/retrieve"]
    assert (row["method"], row["requests"], row["client_errors"], row["server_errors"]) == ("POST", 2000, 167, 166)
    assert [r["route"] for r in snap["routes"]] == ["/retrieve", "/stats"]


def test_route_templates_not_raw_urls():
    """A request the router did not see (refused by a guard) or a route outside the routers (the web page)."""
    with make_client(mount_web=True) as c:
        patterns = compile_paths(declared_paths(c.app))

    def template(path: str) -> str:
        return route_template({"type": "http", "path": path}, patterns)
    assert template("/w/team/retrieve") == template("/w/other/retrieve") == "/w/{workspace}/retrieve"
    assert template("/jobs/abc") == "/jobs/{job_id}" and template("/") == "/" and template("/app.js") == "/app.js"
    assert template("/no/such/thing") == UNMATCHED
    assert len(patterns) == len({t for _, t in patterns}) < 100


def test_the_middleware_counts_every_answer_by_route_in_stats(ws):
    with make_client(ws, mount_web=True) as c:
        assert c.get("/app.js").status_code == 200
        for q in ("alpha", "beta", "gamma"):
            assert c.post("/retrieve", json={"query": q}).status_code == 200
        assert c.post("/retrieve", json={}).status_code == 422
        assert c.post("/w/nobody/retrieve", json={"query": "a"}).status_code == 404
        assert c.post("/w/nobody2/retrieve", json={"query": "a"}).status_code == 404
        assert c.get("/nothing/here").status_code == 404
        assert c.get("/retrieve").status_code == 405
        assert c.get("/health", headers={"Host": "evil.example"}).status_code == 400   # refused before routing
        ws.memories[None].raise_on["retrieve"] = RuntimeError("boom")
        assert c.post("/retrieve", json={"query": "a"}).status_code == 500
        requests = c.get("/stats").json()["requests"]
    rows = {(r["method"], r["route"]): r for r in requests["routes"]}
    mine = rows[("POST", "/retrieve")]
    assert (mine["requests"], mine["client_errors"], mine["server_errors"]) == (5, 1, 1)
    assert 0 < mine["p50_ms"] <= mine["p90_ms"] <= mine["p99_ms"] <= mine["max_ms"]
    named = rows[("POST", "/w/{workspace}/retrieve")]
    assert (named["requests"], named["client_errors"]) == (2, 2)
    assert rows[("GET", UNMATCHED)]["requests"] == 1 and rows[("GET", "/health")]["client_errors"] == 1
    assert rows[("GET", "/app.js")]["requests"] == 1 and rows[("GET", "/retrieve")]["client_errors"] == 1
    assert requests["total"] == 11 == sum(r["requests"] for r in rows.values())   # this /stats not yet counted
    assert isinstance(requests["process"], int) and requests["uptime_s"] >= 0
