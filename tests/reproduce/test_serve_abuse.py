"""``serve-abuse`` (reproduce/serve_abuse.py): the scripted slow LLM sees a client leave and a reply sent (a
real HTTP server on 127.0.0.1), the figures and targets are computed from what was measured (a missed target
is reported as missed), and a tiny run of all three phases against a real ``hippo-engine serve``."""
from __future__ import annotations

import argparse
import json
import socket
import time

import httpx
import pytest

from reproduce import serve_abuse
from reproduce.serve_abuse_llm import LLMCall, SlowLLM
from reproduce.serve_abuse_phases import Probe, left_running, raw_request
from reproduce.serve_abuse_report import slope, targets


def parse(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    serve_abuse.add_arguments(ap)
    return serve_abuse.resolve(ap.parse_args(list(argv)))


def chat(tag: int) -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"Question: [abuse-{tag}] why?"}]})
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


def test_the_slow_llm_records_a_client_that_leaves_and_a_reply():
    with SlowLLM(delay=1.0) as llm:
        port = int(llm.base_url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(chat(7))
            time.sleep(0.3)
        left = time.monotonic()
        r = httpx.post(llm.base_url + "/chat/completions", timeout=10,
                       json={"model": "m", "messages": [{"role": "user", "content": "[abuse-8] ?"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].startswith("Answer:")
        calls = {c.tag: c for c in llm.calls()}
    assert calls[7].how == "closed" and calls[7].end is not None and calls[7].end - left < 0.5
    assert calls[8].how == "replied" and calls[8].end - calls[8].start >= 1.0


def test_a_raw_probe_reads_the_status_and_times_out_on_a_silent_server():
    with SlowLLM(delay=1.0) as llm:
        root = llm.base_url.removesuffix("/v1")
        assert raw_request(root, "GET", "/health", 5.0)[0] == 501        # the scripted LLM has no GET
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        t = time.monotonic()
        status, error = raw_request(f"http://127.0.0.1:{silent.getsockname()[1]}", "GET", "/health", 0.3)
    assert status is None and "timed out" in error and time.monotonic() - t < 2


def test_probes_from_a_process_of_their_own_share_the_harness_clock():
    from reproduce.serve_abuse_probe import ProbeProcess
    with SlowLLM(delay=1.0) as llm:
        t = time.monotonic()
        probes = ProbeProcess(llm.base_url.removesuffix("/v1"), "/health", 0.1, 5.0).start()
        started = time.monotonic()
        time.sleep(1.0)
        got = probes.stop()
    assert len(got) >= 3 and all(p.status == 501 for p in got) and got[0].t < started + 0.5
    assert t < got[0].t < got[-1].t < time.monotonic()


def test_left_running_counts_calls_that_outlive_their_client():
    answers = [{"tag": 0, "left": 10.0}, {"tag": 1, "left": 10.0}, {"tag": 2, "left": 10.0}]
    calls = [LLMCall(0, 9.5, 10.4, "closed"),        # stopped 0.4 s after its client left: fine
             LLMCall(1, 9.5, 30.0, "replied"),       # ran to the end: left running
             LLMCall(2, 25.0, None)]                 # started long after its client left, still open
    out = left_running(answers, calls, grace=1.0, now=40.0)
    assert out["left_running"] == 2 and out["started_after_client_left"] == 1 and out["open_at_end"] == 1
    assert out["in_flight_when_client_left"] == 2
    assert out["seconds_after_client_left"] == [0.4, 20.0, 30.0]


def test_rss_growth_is_fitted_per_created_workspace_over_the_second_half():
    flat = [{"created": i, "rss_mb": 100.0 + min(i, 16) * 20} for i in range(0, 101)]
    growing = [{"created": i, "rss_mb": 100.0 + i * 20} for i in range(0, 101)]
    assert slope(flat, "rss_mb") == pytest.approx(0.0)
    assert slope(growing, "rss_mb") == pytest.approx(20.0)
    assert slope(growing[:1], "rss_mb") != slope(growing[:1], "rss_mb")     # NaN: too few points
    # a server that stops creating workspaces at 40 (descriptors gone) has not bounded its memory
    stuck = growing[:41] + [{"created": 40, "rss_mb": 900.0}] * 60
    assert slope(stuck, "rss_mb") > 10


def test_targets_follow_the_figures():
    args = parse("--quick")
    probes = {"probes": 100, "ok": 100, "p99_ms": 20.0, "p95_ms": 10.0}
    good = {"answers": {"health": probes, "retrieve_idle": {"p95_ms": 50.0}, "retrieve_busy": {"probes": 9,
            "p95_ms": 90.0}, "llm": {"left_running": 0, "llm_calls_tagged": 4,
                                                            "in_flight_when_client_left": 4}},
            "sockets": {"health": {**probes, "answered": 100}, "log_bytes": 5000, "log_emfile_lines": 0},
            "workspaces": {"server_errors": 0, "unanswered": 0, "attempted": 6, "asked": 6, "created": 6,
                           "failed_elsewhere": 0, "rechecked_workspaces": 3, "listing_errors": [],
                           "rss_mb_per_workspace_second_half": 0.1, "stopped": None, "peak": {"rss_mb": 900}}}
    assert all(t["passed"] for t in targets(args, good))
    bad = json.loads(json.dumps(good))
    bad["answers"]["health"]["p99_ms"] = 45800.0
    bad["answers"]["retrieve_busy"]["p95_ms"] = 101.0
    bad["answers"]["llm"]["left_running"] = 1
    bad["sockets"]["health"]["answered"] = 99
    bad["sockets"]["log_bytes"] = 45_000_000
    bad["workspaces"]["server_errors"] = 1
    bad["workspaces"]["failed_elsewhere"] = 1
    bad["workspaces"]["rss_mb_per_workspace_second_half"] = 20.0
    assert not any(t["passed"] for t in targets(args, bad))
    broken = targets(args, {**good, "sockets": {"error": "RuntimeError: the server exited (1):\nTraceback"}})
    assert [(t["phase"], t["target"], t["passed"]) for t in broken if not t["passed"]] == [
        ("sockets", "the phase ran", False)] and len(broken) == 7


def test_a_probe_without_a_200_counts_as_its_timeout():
    from reproduce.serve_abuse_report import probe_stats
    stats = probe_stats([Probe(0.0, 0.01, 200)] * 98 + [Probe(1.0, 0.01, 503), Probe(2.0, 0.5, None, "x")], 5.0)
    assert stats["ok"] == 98 and stats["p99_ms"] == pytest.approx(5000.0) and stats["p50_ms"] == pytest.approx(10.0)


@pytest.mark.slow
def test_a_tiny_run_of_every_phase_on_the_real_server(tmp_path):
    out = tmp_path / "work" / "abuse.md"
    argv = ["--quick", "--answers", "6", "--answer-clients", "3", "--llm-delay", "3", "--observe", "2",
            "--idle-sockets", "20", "--slow-sockets", "3", "--slow-seconds", "3", "--workspaces", "4",
            "--default-every", "2", "--recheck", "2", "--work", str(tmp_path / "work"), "--out", str(out)]
    code = serve_abuse.run(parse(*argv), argv)
    result = json.loads(out.with_suffix(".json").read_text())
    answers, socks, spaces = (result["phases"][p] for p in ("answers", "sockets", "workspaces"))
    assert answers["answers_sent"] == 6 and answers["documents"] == 14 and answers["warm_up_answer"]["status"] == 200
    assert answers["health"]["probes"] > 0 and answers["retrieve_idle"]["ok"] == 10
    assert answers["llm"]["llm_calls_tagged"] <= 6 and answers["abandoned"] + sum(
        n for s, n in answers["answer_statuses"].items() if s not in ("None", "200")) >= 1
    assert socks["idle"]["connected"] == 20 and socks["slow"]["connected"] == 3 and socks["health"]["probes"] > 0
    assert spaces["attempted"] == 4 and spaces["default_documents"]["posted"] == 2
    assert spaces["samples"][0]["workspaces"] == 0 and spaces["samples"][-1]["rss_mb"] > 0
    assert len(result["targets"]) == 8 and code == (0 if all(t["passed"] for t in result["targets"]) else 1)
    assert str(tmp_path) not in out.read_text()
