"""``serve-load --throughput`` (reproduce/serve_throughput.py): the figures pooled per level, the check of
every response against its single-request answer (it catches a changed order or score), the report, the
server's command line with its own defaults; and a small real run (40 MuSiQue passages, 1 and 2 clients)
with ``--before`` this very checkout through the link folder."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from reproduce import serve_load, serve_throughput
from reproduce.common import REPO_ROOT
from reproduce.serve_harness import Launch, ServerProcess
from reproduce.serve_report import render_throughput
from reproduce.serve_throughput import Engine, check, failures, results, summary


def response(q: str, s: float, ids=("a", "b"), scores=(0.5, 0.25), status: int = 200) -> dict:
    return {"q": q, "s": s, "status": status, "ids": list(ids), "scores": list(scores)}


def engine(name: str, levels: dict[int, list[dict]]) -> Engine:
    e = Engine(name, REPO_ROOT, Launch(["x"]), levels=levels)
    e.runs.append({"round": 1, "startup_s": 1.0, "uptime_before": "load 1", "uptime_after": "load 2"})
    return e


def test_levels_pool_rounds_and_count_errors():
    runs = [{"clients": 8, "seconds": 2.0, "responses": [response("q", 0.1), response("q", 0.3)]},
            {"clients": 8, "seconds": 2.0, "responses": [response("q", 0.2), response("q", 9.0, status=503)]}]
    s = summary(runs)
    assert (s["requests"], s["seconds"], s["requests_per_s"], s["errors"]) == (4, 4.0, 1.0, 1)
    assert s["p50_ms"] == pytest.approx(200) and s["p95_ms"] == pytest.approx(300)     # the failed one left out


def test_the_check_catches_order_and_score():
    answers = {"q1": {"ids": ["a", "b"], "scores": [0.5, 0.25]}, "q2": {"ids": ["c"], "scores": [1.0]}}
    e = engine("current", {1: [{"clients": 1, "seconds": 1.0, "responses": [
        response("q1", 0.1), response("q1", 0.1, ids=("b", "a")), response("q1", 0.1, scores=(0.5, 0.2500001)),
        response("q2", 0.1, ids=("c",), scores=(1.0,)), response("q2", 0.1, status=500)]}]})
    c = check(e, answers)
    assert (c["checked"], c["mismatches"]) == (4, 2) and c["examples"][0]["served"] == ["b", "a"]


def test_ratio_at_8_clients_failures_and_report():
    def levels(rps: float, p95: float) -> dict:
        return {n: [{"clients": n, "seconds": 10.0, "responses": [response("q", p95 / 1000)] * int(rps * 10)}]
                for n in (1, 8)}
    before, current = engine("before", levels(10, 800)), engine("current", levels(45, 300))
    ok = {"checked": 10, "mismatches": 0, "examples": []}
    figures = results([before, current], {"before": ok, "current": {**ok, "mismatches": 1}}, True)
    assert figures["at_8_clients"]["ratio_requests_per_s"] == pytest.approx(4.5)
    assert figures["at_8_clients"]["p95_ms_before"] == pytest.approx(800)
    figures["failures"] = failures(figures)
    assert figures["failures"] == ["current: 1 response(s) differ from the single-request answer"]
    args = argparse.Namespace(per_level=240, top_k=5, rounds=1)
    md = render_throughput(figures, "python -m reproduce serve-load --throughput", args)
    assert "**4.50x**" in md and "| before |" in md and "identical on every question" in md
    assert "load 1" in md and "1 response(s) differ" in md


def test_a_server_with_its_own_defaults(tmp_path):
    """Only the index folder, host and port: the rest is the server's own default; the before checkout's
    entry runs from the link folder, which alone provides hippo_engine."""
    with serve_throughput.engine_path(REPO_ROOT) as shim:
        launch = serve_throughput.before_launch(shim)
        assert (shim / "hippo_engine").resolve() == REPO_ROOT / "hippo_engine" and launch.cwd == shim
        server = ServerProcess(tmp_path / "idx", tmp_path / "log", launch=launch)
    assert server.args[:3] == [sys.executable, "-m", "hippo_engine.cli"]
    assert server.args[3:] == ["serve", "--save-dir", str(tmp_path / "idx"), "--host", "127.0.0.1", "--port",
                               str(server.port)]
    assert launch.env["PYTHONPATH"].split(":")[0] == str(shim)
    harness = ServerProcess(tmp_path / "idx", tmp_path / "log", workers=2)
    assert harness.args[-2:] == ["--workers", "2"] and "--no-filter" in harness.args
    with pytest.raises(SystemExit):
        with serve_throughput.engine_path(tmp_path):
            pass


def test_the_command_shows_no_folder_of_this_machine(tmp_path):
    argv = ["serve-load", "--throughput", "--before", str(tmp_path), f"--throughput-out={tmp_path / 'x.md'}",
            "--work", str(tmp_path / "w"), "--out", "reproduce/results/serve/load.md"]
    assert serve_throughput.shown_command(argv, tmp_path / "w") == (
        "python -m reproduce serve-load --throughput --before CHECKOUT --throughput-out=FILE --work <work dir> "
        "--out reproduce/results/serve/load.md")


def test_levels_option():
    ap = argparse.ArgumentParser()
    serve_load.add_arguments(ap)
    assert ap.parse_args(["--throughput", "--levels", "1,4"]).levels == (1, 4)
    with pytest.raises(SystemExit):
        ap.parse_args(["--levels", "0,8"])


def test_a_small_real_run_with_this_checkout_as_before(tmp_path):
    """40 passages, 1 and 2 clients, 6 requests per level, both servers: no error, every response equal to
    its single-request answer, the same answers from the two engines (the same code)."""
    out = tmp_path / "throughput.md"
    argv = ["--throughput", "--before", str(REPO_ROOT), "--base", "40", "--levels", "1,2", "--per-level", "6",
            "--work", str(tmp_path / "work"), "--throughput-out", str(out)]
    ap = argparse.ArgumentParser()
    serve_load.add_arguments(ap)
    assert serve_load.run(ap.parse_args(argv), argv) == 0
    figures = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert figures["failures"] == [] and figures["same_single_answers"] is True
    for name in ("before", "current"):
        e = figures["engines"][name]
        assert [r["clients"] for r in e["levels"]] == [1, 2] and e["check"]["checked"] == 12
        assert all(r["errors"] == 0 and r["requests"] == 6 for r in e["levels"])
    assert str(tmp_path) not in out.read_text(encoding="utf-8") and Path(out).is_file()
