"""Markdown reports of ``serve-load`` (:func:`render_load`), its throughput measure (:func:`render_throughput`)
and ``serve-restarts`` (:func:`render_restarts`):
the command, the machine's load (``uptime``), the figures and the checks; no folder of this machine."""
from __future__ import annotations

import argparse
import platform

from .common import git_head


def _commit() -> str:
    head = git_head()
    return f"`{head[0]}`{' (tracked files modified)' if head[1] else ''}" if head else "?"


def _machine() -> str:
    import os
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def render_load(results: list[dict], command: str, args: argparse.Namespace) -> str:
    """The ``serve-load`` report."""
    lines = ["# `hippo-engine serve` under load: concurrent retrieves while documents come and go", "",
             "```bash", command, "```", "",
             f"Commit {_commit()}; {_machine()}; the server and the clients on the same machine (127.0.0.1). "
             "Index: the MuSiQue subset built in-process with `extractor=\"ner\"` (spaCy, no LLM), recognition "
             "filter off, default embedder. Added documents: 2WikiMultihopQA passages. See "
             "`reproduce/serve_load.py` for the protocol and `reproduce/serve_consistency.py` for the check.", "",
             f"Per run: {args.clients} reader clients send {args.requests:,} `POST /retrieve` (one query, top_k "
             f"{args.top_k}; {args.probe_share:.0%} probes: an added document's text in `naive` mode, the rest a "
             f"MuSiQue question in `hipporag2` mode) while one writer client adds {args.documents} documents in "
             f"batches of {args.batch}, follows each job to `done` and deletes a batch once {args.delete_lag} later "
             "batches are indexed. "
             "Warm-up: 32 requests from the reader clients first, not counted.", "",
             "| backend | server processes | requests | 5xx | other failures | violations | p50 ms | p95 ms | "
             "p99 ms | requests/s | requests during writes | documents added / indexed / deleted |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    loaded = [r for r in results if "load" in r]
    for r in loaded:
        ld, c = r["load"], r["load"]["check"]["counts"]
        other = c.get("transport_errors", 0) + c.get("client_errors", 0)
        lines.append(f"| {r['storage']} | {r['workers']} | {ld['requests']:,} | {c.get('server_errors', 0)} | "
                     f"{other} | {c.get('violations', 0)} | {_ms(ld['latency_ms']['p50'])} | "
                     f"{_ms(ld['latency_ms']['p95'])} | {_ms(ld['latency_ms']['p99'])} | "
                     f"{ld['requests_per_s']:.1f} | {ld['requests_during_writes']:,} | "
                     f"{ld['documents_added']} / {ld['documents_seen_indexed']} / {ld['documents_deleted']} |")
    if not loaded:      # --only-overhead
        lines = [*lines[:8], "No load run (`--only-overhead`).", ""]     # title, command, commit and machine
    else:
        lines += ["", "Latency is measured by each client from sending the request to reading the whole response.", ""]
    for r in loaded:
        lines += _load_details(r)
    ov = next((r["overhead"] for r in results if "overhead" in r), None)
    if ov is not None:
        lines += ["## The HTTP layer's cost", "",
                  f"One retrieve (a MuSiQue question, `hipporag2`, top_k {args.top_k}) through `POST /retrieve` on "
                  "the idle SQLite server (1 worker), and the same `HippoRAG.retrieve([question], top_k)` call "
                  f"in the client's process on the same index folder, warm, taken in turn for {ov['questions']} "
                  "questions (one run):", "",
                  "| through HTTP, p50 | in-process, p50 | difference of the p50s | p50 of the per-question "
                  "differences |", "| --- | --- | --- | --- |",
                  f"| {ov['http_p50_ms']:.1f} ms | {ov['in_process_p50_ms']:.1f} ms | "
                  f"{ov['difference_of_p50_ms']:+.1f} ms | {ov['p50_of_differences_ms']:+.1f} ms |", "",
                  "Two processes here (the server, the client with its own engine), so the difference also holds "
                  "the loopback hops and the scheduling of two processes on a busy machine; `python -m reproduce "
                  "serve-overhead` times the HTTP route and the call on one `Memory` object in one process.", ""]
        sq = next(r for r in results if "overhead" in r)
        lines += [f"Load (`uptime`) after it: `{sq.get('uptime_overhead', '?')}`.", ""]
    bad = [f"{r['storage']}: {'; '.join(r['failures'])}" for r in results if r["failures"]]
    passed = ("Every run passed: no server error, no failed request, every response consistent with a committed "
              "version, every probe of a committed document found, the index back to the base corpus after the "
              "deletes.") if loaded else "The overhead measure ran; its requests all answered 200."
    lines += ["## Verdict", "", ("FAILED: " + " | ".join(bad)) if bad else passed, ""]
    return "\n".join(lines)


def _load_details(r: dict) -> list[str]:
    ld, chk = r["load"], r["load"]["check"]
    c = chk["counts"]
    idx = r["index"]
    built = f"built by this run in {idx['seconds']:.0f} s" if idx["built"] else "reused (built by an earlier run)"
    by_mode = ld["latency_ms_by_mode"]
    lines = [f"## {r['storage']}, {r['workers']} server process(es)", "",
             f"- index: {r['base_documents']:,} passages, {built}; server ready (all workers) "
             f"{r['startup_s']:.1f} s after its start",
             f"- load (`uptime`) before: `{r['uptime_before']}`; after: `{r['uptime_after']}`",
             f"- reads took {ld['read_seconds']:.1f} s, the writes {ld['write_seconds']:.1f} s; statuses "
             f"{chk['statuses']}",
             f"- latency of the requests sent while the writer ran: p50 {_ms(ld['latency_ms_during_writes']['p50'])} "
             f"ms, p95 {_ms(ld['latency_ms_during_writes']['p95'])} ms; the others: p50 "
             f"{_ms(ld['latency_ms_without_writes']['p50'])} ms, p95 {_ms(ld['latency_ms_without_writes']['p95'])} ms",
             f"- latency by mode: hipporag2 p50 {_ms(by_mode['hipporag2']['p50'])} ms, p95 "
             f"{_ms(by_mode['hipporag2']['p95'])} ms; naive p50 {_ms(by_mode['naive']['p50'])} ms, "
             f"p95 {_ms(by_mode['naive']['p95'])} ms; max {_ms(ld['latency_ms']['max'])} ms",
             f"- passages checked: {c.get('base_passages', 0):,} base, {c.get('added_passages', 0):,} of added "
             f"documents; probes {c.get('probes', 0)} (of them sent after the document's delete returned: "
             f"{c.get('probes_after_delete', 0)}); probes that had to find their document (sent after it was seen "
             f"indexed, answered before its delete was sent): {c.get('probes_required', 0)}, found "
             f"{c.get('probes_found', 0)}",
             f"- the index after the run holds exactly the base corpus: {r.get('index_is_base_again')}; server "
             f"exit status after SIGINT: {r.get('server_exit')}"]
    if ld["writer_errors"]:
        lines.append(f"- writer errors: {ld['writer_errors'][:5]}")
    if chk["examples"]:
        lines += ["- violations:", *[f"    - {e}" for e in chk["examples"]]]
    return [*lines, ""]


def render_restarts(results: list[dict], command: str) -> str:
    """The ``serve-restarts`` report."""
    lines = ["# `hippo-engine serve` killed with SIGKILL during ingestion, restarted each time", "",
             "```bash", command, "```", "",
             f"Commit {_commit()}; {_machine()}. The server (`hippo-engine serve`, `extractor=\"ner\"`, no LLM, "
             "default embedder) runs in a process group of its own on 127.0.0.1; a client posts MuSiQue passages "
             "in batches through `POST /documents` while the server indexes them; at each seeded random moment the "
             "whole process group gets SIGKILL and the server is started again. See `reproduce/serve_restarts.py`.",
             "", "| backend | documents | kills | kills during a POST | accepted | indexed (API) | in the index | "
             "passages in the index | failed / pending | equal to a clean build | rankings hash served / clean | "
             "wall s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        f = r["final"]
        lines.append(f"| {r['storage']} | {r['documents']} | {r['kills']} | {r['kills_mid_post']} | "
                     f"{r['accepted']} | {f['indexed_api']} | {f['index_documents']} | {f['index_passages']} | "
                     f"{f['failed']} / {f['pending']} | {'yes' if not f['snapshot_diff'] else 'NO'} | "
                     f"`{f['hash_served']}` / `{f['hash_clean']}` | {r['wall_s']:.0f} |")
    lines.append("")
    for r in results:
        lines += [f"## {r['storage']}", "",
                  f"- load (`uptime`) before: `{r['uptime_before']}`; after: `{r['uptime_after']}`",
                  f"- kills: {r['kills']} ({r['kills_before_ready']} before the server was ready, "
                  f"{r['kills_mid_post']} while a POST was in flight; of those, accepted all the same: "
                  f"{r['lost_but_accepted']}, not accepted and posted again: {r['reposted']}); indexed at each kill "
                  f"(API): {r['indexed_at_kills']}",
                  f"- startup to ready: p50 {r['startup_p50_s']:.1f} s; batches of {r['batch']} documents per POST, "
                  f"indexing batches of {r['index_batch']} (a step of the indexed count took p50 "
                  f"{r.get('batch_step_p50_s', float('nan')):.1f} s); pauses between reaching a kill's target and "
                  f"the kill (s): {[round(p, 2) for p in r.get('pauses_s', []) if p is not None]}",
                  f"- statuses: every document `indexed` through `GET /documents?status=indexed`: "
                  f"{r['final']['statuses_ok']}; every job `done`: {r['final']['jobs_done']} of "
                  f"{r['final']['jobs']}",
                  f"- the index (opened in-process after a graceful stop) holds each accepted document once: "
                  f"{r['final']['documents_once']}; one passage per document: {r['final']['passages_once']}",
                  f"- compared with a clean in-process build of the same documents (stores with vectors, graph "
                  f"nodes and edge weights, synonymy, documents): {r['final']['snapshot_diff'] or 'no difference'}; "
                  f"rankings hash of the 100 MuSiQue questions (top 20, float.hex scores), both indexes opened "
                  f"afresh: served `{r['final']['hash_served']}`, clean `{r['final']['hash_clean']}`", ""]
        if r["failures"]:
            lines += [f"- FAILED: {'; '.join(r['failures'])}", ""]
    lines += ["The clean build is closed and opened again before the comparison: the process that has just built "
              "an `extractor=\"ner\"` index can rank some questions differently from a process that opens it (a "
              "sentence several passages share is one fact, whose entities are those of the first passage read: "
              "not the same passage in the building process and after a reopen; `hippo_engine/ids.py`, "
              "`hyperedges_by_id`). The stored indexes themselves are compared by the snapshot.", ""]
    bad = [r for r in results if r["failures"]]
    lines += ["## Verdict", "", "FAILED (see above)" if bad else
              "Every accepted document ended indexed exactly once with true statuses, and the index equals a "
              "clean build of the same documents.", ""]
    return "\n".join(lines)


__all__ = ["render_load", "render_restarts"]


def render_throughput(figures: dict, command: str, args: argparse.Namespace) -> str:
    """The report of ``serve-load --throughput``: per server and level, requests/s and latency; the ratio at
    8 clients; the check of every response; the load before and after each server's levels."""
    engines = figures["engines"]
    lines = ["# `hippo-engine serve`: read-only throughput at 1 to 32 concurrent clients", "",
             "```bash", command, "```", "",
             f"{_machine()}; the servers and the clients on the same machine (127.0.0.1), one server at a time, "
             "each with its own default settings (only the index folder, host and port given). Index: the MuSiQue "
             "subset (`extractor=\"ner\"`, serve-load's SQLite index). Per level: that many clients (one "
             f"keep-alive connection each) send {args.per_level} `POST /retrieve` between them, one MuSiQue "
             f"question each, top_k {args.top_k}, `hipporag2` mode; {args.rounds} round(s), the servers "
             "alternated; a warm-up of 32 requests first, not counted. See `reproduce/serve_throughput.py`.", "",
             "| server | commit | clients | requests | seconds | requests/s | p50 ms | p95 ms | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, e in engines.items():
        for r in e["levels"]:
            lines.append(f"| {name} | `{e['commit']}` | {r['clients']} | {r['requests']} | {r['seconds']:.1f} | "
                         f"{r['requests_per_s']:.1f} | {_ms(r['p50_ms'])} | {_ms(r['p95_ms'])} | {r['errors']} |")
    lines.append("")
    at8 = figures.get("at_8_clients")
    if at8:
        lines += [f"At 8 clients: **{at8['ratio_requests_per_s']:.2f}x** the requests/s of the before server; "
                  f"p95 {_ms(at8['p95_ms_before'])} ms before, {_ms(at8['p95_ms_current'])} ms now.", ""]
    lines += ["Every successful response against the single-request answer (`HippoRAG.retrieve([q], top_k)` on "
              "the same index folder in-process, one question per call, by that server's engine: the same "
              "passage ids in the same order, equal scores):", ""]
    for name, e in engines.items():
        c = e["check"]
        lines.append(f"- {name}: {c['checked']} responses checked, {c['mismatches']} differ"
                     + (f" (e.g. {c['examples'][0]})" if c["examples"] else ""))
    if figures.get("same_single_answers") is not None:
        lines.append(f"- the two engines' single-request answers are "
                     f"{'identical' if figures['same_single_answers'] else 'NOT identical'} on every question")
    lines += ["", "Load (`uptime`) before and after each server's levels:", ""]
    for name, e in engines.items():
        for run in e["runs"]:
            lines.append(f"- {name}, round {run['round']} (ready in {run['startup_s']:.1f} s): before "
                         f"`{run['uptime_before']}`; after `{run['uptime_after']}`")
    verdict = "; ".join(figures["failures"]) or "no errors, every response equal to its single-request answer"
    lines += ["", f"Result: {verdict}.", ""]
    return "\n".join(lines)
