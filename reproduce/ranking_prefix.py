"""Issue 38: one score per passage, whatever ``top_k`` asks for, on the MuSiQue subset.

    python -m reproduce ranking-prefix [--limit N] [--top 20] [--titles titled|untitled] [--work DIR] [--no-cli]
                                       [--no-serve]

The property, checked per question at every k in 1..``--top`` (default 20; up to the corpus's size):

* **prefix**: the top k is exactly the first k of the top ``--top`` (same passage ids, same order), and the
  scores shown are the top ``--top`` call's scores of the same passages (relative tolerance
  :data:`SCORE_REL`);
* **non-increasing**: the scores shown never rise down a ranking;
* **explanations add up** (``retrieve(explain=True)``, Python): each explanation's terms (its seeds'
  contributions, the dense prior and, where the engine has one, ``dense_term``) add up to its
  ``ranked_score`` (relative :data:`EXPLAIN_REL`, or within the explanation's own ``check``, the PPR
  solver's residual), and ``ranked_score`` is the score shown; the explained ranking is the plain one.

Doors: Python (``HippoRAG.retrieve`` with ``QueryParam(top_k=k)``, plain and explained), the command line
(``hippo-engine retrieve --queries FILE --top-k k --json``, its ``main`` run in this process, and once as a
real subprocess at k = ``--top``), HTTP (``POST /retrieve {"queries", "top_k": k}`` to a real
``hippo-engine serve`` on 127.0.0.1 over the index's folder, :class:`reproduce.serve_harness.ServerProcess`)
and MCP (the ``recall`` tool with ``top_k``, through the MCP SDK's client at that server's ``/mcp``); every
door must also give the Python door's rankings (passage ids and scores). The index is the
``extractor="ner"`` index of ``python -m reproduce table-recall-llm-free`` (:func:`reproduce.recall_data.open_index`
under ``--work``, default ``outputs/reproduce/recall-llm-free``; built there if missing). No LLM is called.

Printed: questions, the k range and the violations of each check; written (``--out``, default
``reproduce/results/recall/ranking_prefix.md``) with the first violations, the engine's commit and the load.
Exit status 1 when anything is violated. The checks (:func:`prefix_violations`, :func:`explanation_violations`)
and the doors (:func:`cli_rankings`, :func:`http_rankings`, :func:`mcp_rankings`) are also what
``tests/retrieve/integration/test_ranking_prefix_doors.py`` runs at every front door (Python, CLI, HTTP, MCP)
on the bundled sample corpus.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, RESULTS_DIR, setup_logging, write_result
from .harness import RECALL_WORK, option

#: one query's ranking as a door shows it: ``(passage id, score shown)``, best first
Ranking = list[tuple[str, Any]]
#: the top k's scores against the top ``--top`` call's scores of the same passages (relative)
SCORE_REL = 1e-9
#: an explanation's terms against its ranked score (relative; or within the explanation's ``check``)
EXPLAIN_REL = 1e-6
#: the rounding of a sum of terms in another order than the engine's (relative to the score)
ROUNDING = 1e-12
#: the deepest ranking checked (``--top``'s default)
TOP = 20
OUT = RESULTS_DIR / "recall" / "ranking_prefix.md"
#: violations listed in the result file
SHOWN = 10
#: queries per ``POST /retrieve`` (the server's default ``max_queries``)
HTTP_BATCH = 64


# ----------------------------------------------------------------------------- what each door shows
def solution_ranking(sol) -> Ranking:
    """A ``QuerySolution``'s ranking (the Python door)."""
    return list(zip(sol.passage_ids, (float(s) for s in sol.doc_scores), strict=True))


def cli_rankings(save_dir: Path | str, queries: Sequence[str], k: int, *,
                 command: Sequence[str] | None = None) -> list[Ranking]:
    """Each query's ranking from ``hippo-engine retrieve --save-dir DIR --queries FILE --top-k k --json --quiet``
    (the questions in a ``.txt`` file, one per line). ``command``: the program to run as a subprocess (e.g.
    ``[".venv/bin/hippo-engine"]``); without it the command's ``main`` runs in this process."""
    if any("\n" in q for q in queries):
        raise ValueError("a question with a line break cannot go through a .txt questions file")
    with tempfile.TemporaryDirectory(prefix="ranking-prefix-") as tmp:
        qfile = Path(tmp) / "questions.txt"
        qfile.write_text("\n".join(queries) + "\n", encoding="utf-8")
        argv = ["retrieve", "--save-dir", str(save_dir), "--queries", str(qfile), "--top-k", str(k), "--json",
                "--quiet"]
        if command is not None:
            done = subprocess.run([*command, *argv], capture_output=True, text=True, timeout=900)
            rc, out, err = done.returncode, done.stdout, done.stderr
        else:
            from hippo_engine.cli import main
            buf, err = io.StringIO(), ""
            with contextlib.redirect_stdout(buf):
                rc = main(argv)
            out = buf.getvalue()
    if rc != 0:
        raise RuntimeError(f"hippo-engine {' '.join(argv)} exited {rc}: {err[-2000:]}")
    return [list(zip(s["passage_ids"], s["doc_scores"], strict=True)) for s in json.loads(out)["solutions"]]


def http_rankings(client, queries: Sequence[str], k: int, *, batch: int = HTTP_BATCH) -> list[Ranking]:
    """Each query's ranking from ``POST /retrieve {"queries", "top_k": k}`` (``batch`` queries a request);
    ``client``: an ``httpx.Client`` whose ``base_url`` is the server (with its access key, if it has one)."""
    out: list[Ranking] = []
    for s in range(0, len(queries), batch):
        r = client.post("/retrieve", json={"queries": list(queries[s:s + batch]), "top_k": k})
        if r.status_code != 200:
            raise RuntimeError(f"POST /retrieve top_k={k}: {r.status_code} {r.text[:2000]}")
        out += [[(p["id"], p["score"]) for p in res["passages"]] for res in r.json()["results"]]
    return out


def mcp_rankings(url: str, queries: Sequence[str], ks: Sequence[int], *,
                 headers: Mapping[str, str] | None = None) -> dict[int, list[Ranking]]:
    """Each query's ranking at every k in ``ks`` from the MCP ``recall`` tool (``{"query", "top_k": k}``),
    through the MCP SDK's client over streamable HTTP at ``url`` (a server's ``/mcp``); ``headers``: e.g. the
    access key. Its passages' ``passage_id`` (the passage's own id, as the other doors show) and ``score``."""
    import anyio
    import httpx2  # the MCP SDK's HTTP client library
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict[int, list[Ranking]]:
        out: dict[int, list[Ranking]] = {}
        async with httpx2.AsyncClient(headers=dict(headers or {}), timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                for k in ks:
                    out[k] = []
                    for q in queries:
                        res = await client.call_tool("recall", {"query": q, "top_k": k})
                        if res.is_error:
                            raise RuntimeError(f"MCP recall top_k={k} {q[:60]!r}: {res.content}")
                        out[k].append([(p["passage_id"], p["score"]) for p in res.structured_content["passages"]])
        return out
    return anyio.run(main)


def served_rankings(save_dir: Path | str, queries: Sequence[str], ks: Sequence[int]) -> tuple[dict, dict, float]:
    """A real ``hippo-engine serve`` on 127.0.0.1 over ``save_dir`` (:class:`reproduce.serve_harness.ServerProcess`,
    its default workspace, stopped at the end): every query's ranking at every k through HTTP
    (:func:`http_rankings`) and MCP (:func:`mcp_rankings`), and the seconds the server took to start. The access
    key, where ``HIPPO_ENGINE_ACCESS_KEY`` sets one for the server, is sent with every request."""
    import httpx

    from hippo_engine.service.settings import ENV_ACCESS_KEY

    from .serve_harness import ServerProcess

    key = os.environ.get(ENV_ACCESS_KEY)
    headers = {"X-API-Key": key} if key else {}
    with tempfile.TemporaryDirectory(prefix="ranking-prefix-serve-") as tmp:
        with ServerProcess(Path(save_dir), Path(tmp) / "serve.log") as srv:
            started = srv.wait_ready()
            with httpx.Client(base_url=srv.url, headers=headers, timeout=600) as client:
                http = {k: http_rankings(client, queries, k) for k in ks}
            mcp = mcp_rankings(f"{srv.url}/mcp", queries, ks, headers=headers)
    return http, mcp, started


# ----------------------------------------------------------------------------- the checks
def _close(a: Any, b: Any, rel: float) -> bool:
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=rel)


def _ids(r: Ranking, n: int = 6) -> str:
    ids = [pid[:14] for pid, _ in r[:n]]
    return "[" + ", ".join(ids) + (", ..." if len(r) > n else "") + "]"


def ranking_violations(door: str, k: int, qi: int, got: Ranking, ref: Ranking | None) -> list[str]:
    """One query's ranking at top_k = ``k`` against ``ref`` (its ranking at the deepest k; ``None``: this is
    that ranking): every score a finite number, non-increasing; the ids the first k of ``ref``'s, the scores
    ``ref``'s (relative :data:`SCORE_REL`)."""
    where, out = f"{door} k={k} q{qi}", []
    scores = [s for _, s in got]
    bad = [i for i, s in enumerate(scores) if not isinstance(s, (int, float)) or not math.isfinite(s)]
    if bad:
        out.append(f"{where}: scores shown that are not finite numbers at ranks {[i + 1 for i in bad]}")
    rises = [i + 2 for i, (a, b) in enumerate(zip(scores, scores[1:], strict=False))
             if i not in bad and i + 1 not in bad and b > a + SCORE_REL * abs(a)]
    if rises:
        out.append(f"{where}: the score rises at ranks {rises} ({[scores[r - 1] for r in rises[:3]]})")
    if ref is None:
        return out
    if [p for p, _ in got] != [p for p, _ in ref[:k]]:
        out.append(f"{where}: ids {_ids(got)} are not the first {k} of the top {len(ref)} {_ids(ref)}")
    else:
        off = [i + 1 for i, ((_, a), (_, b)) in enumerate(zip(got, ref, strict=False)) if not _close(a, b, SCORE_REL)]
        if off:
            i = off[0] - 1
            out.append(f"{where}: scores differ from the deepest call's at ranks {off} "
                       f"(rank {off[0]}: {got[i][1]!r} vs {ref[i][1]!r})")
    return out


def prefix_violations(door: str, by_k: Mapping[int, Sequence[Ranking]]) -> list[str]:
    """``by_k[k]``: every query's ranking at top_k = k; the deepest k is the reference. What breaks the
    prefix property (:func:`ranking_violations` for every k and query; every k has every query)."""
    deepest = max(by_k)
    ref = by_k[deepest]
    out = []
    for k in sorted(by_k):
        if len(by_k[k]) != len(ref):
            out.append(f"{door} k={k}: {len(by_k[k])} rankings for {len(ref)} questions")
            continue
        for qi, got in enumerate(by_k[k]):
            out += ranking_violations(door, k, qi, got, None if k == deepest else ref[qi])
    return out


def same_rankings(door: str, by_k: Mapping[int, Sequence[Ranking]], ref: Mapping[int, Sequence[Ranking]],
                  ref_door: str) -> list[str]:
    """Where ``door`` shows other passages or scores than ``ref_door`` at the same k (one score per passage
    whatever the door)."""
    out = []
    for k in sorted(set(by_k) & set(ref)):
        if len(by_k[k]) != len(ref[k]):
            out.append(f"{door} k={k}: {len(by_k[k])} rankings, {ref_door} {len(ref[k])}")
            continue
        for qi, (a, b) in enumerate(zip(by_k[k], ref[k], strict=True)):
            if [p for p, _ in a] != [p for p, _ in b] or not all(
                    _close(x, y, SCORE_REL) for (_, x), (_, y) in zip(a, b, strict=True)):
                out.append(f"{door} k={k} q{qi}: {_ids(a)} {[s for _, s in a[:3]]} differs from {ref_door}'s "
                           f"{_ids(b)} {[s for _, s in b[:3]]}")
    return out


def explanation_terms(exp) -> float:
    """The sum of an ``Explanation``'s terms: its seeds' contributions, the dense prior and ``dense_term``
    where the engine has one."""
    return math.fsum([*(s.contribution for s in exp.seeds), exp.dense_prior, getattr(exp, "dense_term", 0.0)])


def explanation_violations(door: str, k: int, solutions: Sequence) -> list[str]:
    """``retrieve(explain=True)``'s solutions: one explanation per passage shown, for that passage, whose
    ``ranked_score`` is the score shown (relative :data:`SCORE_REL`) and whose terms add up to it (relative
    :data:`EXPLAIN_REL`, or within the explanation's ``check``, give or take the sum's :data:`ROUNDING`)."""
    out = []
    for qi, sol in enumerate(solutions):
        shown, exps = solution_ranking(sol), list(sol.explanations)
        if [e.passage_id for e in exps] != [p for p, _ in shown]:
            out.append(f"{door} k={k} q{qi}: explanations for {_ids([(e.passage_id, 0) for e in exps])}, "
                       f"passages shown {_ids(shown)}")
            continue
        for rank, (exp, (_, score)) in enumerate(zip(exps, shown, strict=True), 1):
            where = f"{door} k={k} q{qi} rank {rank} ({exp.placed_by})"
            if not _close(exp.ranked_score, score, SCORE_REL):
                out.append(f"{where}: ranked_score {exp.ranked_score!r} is not the score shown {score!r}")
            terms, ranked = explanation_terms(exp), exp.ranked_score
            if abs(terms - ranked) > max(EXPLAIN_REL * abs(ranked), exp.check) + ROUNDING * max(1.0, abs(ranked)):
                out.append(f"{where}: the terms add up to {terms!r}, not the ranked score {exp.ranked_score!r}")
    return out


def largest_gap(solutions: Sequence) -> tuple[float, float]:
    """The largest |terms - ranked_score| of the solutions' explanations, absolute and relative."""
    gaps = [(abs(explanation_terms(e) - e.ranked_score), e.ranked_score) for s in solutions for e in s.explanations]
    return (max((g for g, _ in gaps), default=0.0),
            max((g / abs(r) for g, r in gaps if r), default=0.0))


# ----------------------------------------------------------------------------- the command
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options."""
    ap.add_argument("--limit", type=int, default=100, help="the first N MuSiQue questions (default %(default)s)")
    ap.add_argument("--top", type=int, default=TOP, help="the deepest k (default %(default)s)")
    ap.add_argument("--titles", choices=("titled", "untitled"), default="titled", help="which index (default titled)")
    option(ap, "--work", default=RECALL_WORK,
           help="table-recall-llm-free's indexes and encoder cache (default %(default)s)")
    option(ap, "--data-root")
    ap.add_argument("--no-cli", action="store_true", help="skip the command-line door")
    ap.add_argument("--no-serve", action="store_true", help="skip the HTTP and MCP doors (no server started)")
    option(ap, "--out", default=OUT, help="markdown result (default %(default)s)")
    option(ap, "--verbose")


def python_door(rag, questions: Sequence[str], ks: Sequence[int]) -> tuple[dict, dict, list[str], tuple]:
    """Plain and explained rankings at every k, what the explanations break, and their largest
    |terms - ranked_score| (absolute, relative)."""
    from hippo_engine.config import QueryParam

    plain, explained, bad, gap = {}, {}, [], (0.0, 0.0)
    for k in ks:
        plain[k] = [solution_ranking(s) for s in rag.retrieve(questions, param=QueryParam(top_k=k))]
        sols = rag.retrieve(questions, param=QueryParam(top_k=k, explain=True))
        explained[k] = [solution_ranking(s) for s in sols]
        bad += explanation_violations("python explain", k, sols)
        gap = tuple(map(max, gap, largest_gap(sols)))
    return plain, explained, bad, gap


def measure(args) -> dict:
    """Every check on the first ``--limit`` questions; ``{"questions", "passages", "ks", "checks": {name:
    {"compared", "violations"}}}``."""
    from hippo_engine.models.encoder import TransformersEncoder

    from .recall_data import CachingEncoder, load, open_index

    ds = load("musique", args.titles == "titled", args.data, args.limit)
    questions = list(ds.questions)
    rag = open_index(args.work, "musique", args.titles == "titled", ds.docs,
                     CachingEncoder(TransformersEncoder(), args.work / "vectors.sqlite"))
    try:
        ks = list(range(1, min(args.top, len(rag.index_state)) + 1))
        plain, explained, explain_bad, gap = python_door(rag, questions, ks)
        save_dir = rag.save_dir
    finally:
        rag.close()
    n = len(questions) * len(ks)
    checks = {"Python `retrieve(top_k=k)`: prefix, non-increasing": (n, prefix_violations("python", plain)),
              "Python `retrieve(top_k=k, explain=True)`: prefix, non-increasing": (
                  n, prefix_violations("python explain", explained)),
              "Python: the explained ranking is the plain one": (
                  n, same_rankings("python explain", explained, plain, "python")),
              "Python `explain=True`: each explanation's terms add up to the score shown": (
                  sum(len(r) for rs in explained.values() for r in rs), explain_bad)}
    if not args.no_cli:
        cli = {k: cli_rankings(save_dir, questions, k) for k in ks}
        real = cli_rankings(save_dir, questions, ks[-1], command=[sys.executable, "-m", "hippo_engine.cli"])
        checks["CLI `hippo-engine retrieve --top-k k --json`: prefix, non-increasing"] = (
            n, prefix_violations("cli", cli))
        checks["CLI: the Python door's rankings at every k"] = (n, same_rankings("cli", cli, plain, "python"))
        checks[f"CLI as a subprocess (k={ks[-1]}): the same rankings"] = (
            len(questions), same_rankings("cli subprocess", {ks[-1]: real}, cli, "cli in-process"))
    started = None
    if not args.no_serve:
        http, mcp, started = served_rankings(save_dir, questions, ks)
        checks["HTTP `POST /retrieve {top_k: k}`: prefix, non-increasing"] = (n, prefix_violations("http", http))
        checks["HTTP: the Python door's rankings at every k"] = (n, same_rankings("http", http, plain, "python"))
        checks["MCP `recall {top_k: k}`: prefix, non-increasing"] = (n, prefix_violations("mcp", mcp))
        checks["MCP: the Python door's rankings at every k"] = (n, same_rankings("mcp", mcp, plain, "python"))
    return {"questions": len(questions), "passages": len(ds.docs), "ks": ks, "gap": gap, "serve_start_s": started,
            "checks": {name: {"compared": c, "violations": v} for name, (c, v) in checks.items()}}


def dirty_paths() -> list[str]:
    """The tracked files of this checkout with uncommitted edits (what ``+dirty`` in the engine's commit is)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in out.splitlines() if line[3:]]


def doors_line(res: dict) -> str:
    """Which doors the run went through."""
    ks, names = res["ks"], set(res["checks"])
    doors = ["Python (`retrieve(top_k=k)`, plain and `explain=True`)"]
    if any(n.startswith("CLI") for n in names):
        doors.append(f"CLI (`hippo-engine retrieve --top-k k --json`: its `main` in this process at every k, "
                     f"the command as a subprocess at k={ks[-1]})")
    if res.get("serve_start_s") is not None:
        doors.append(f"HTTP (`POST /retrieve` with `top_k`, {HTTP_BATCH} questions a request) and MCP (the "
                     f"`recall` tool with `top_k`, one question a call, through the MCP SDK's client at `/mcp`), "
                     f"both to one real `hippo-engine serve` on 127.0.0.1 over the index's folder (started in "
                     f"{res['serve_start_s']:.0f} s)")
    return "Doors: " + "; ".join(doors) + "; every door but Python's is also compared with Python's rankings."


def markdown(res: dict, argv: Sequence[str], load_before: str, load_after: str, commit: str, wall: float,
             dirty: Sequence[str] = ()) -> str:
    """The result file."""
    shown = list(argv[1:] if argv[:1] == ["ranking-prefix"] else argv)
    ks = res["ks"]
    lines = ["# One score per passage whatever top_k asks for (issue 38), MuSiQue", "",
             "```bash", " ".join(["python -m reproduce ranking-prefix", *shown]), "```", "",
             f"{res['questions']} questions over {res['passages']:,} passages (the `ner` index of "
             f"`table-recall-llm-free`), k = {ks[0]}..{ks[-1]}, each top k against the top {ks[-1]}: same ids "
             f"in the same order, the same scores (relative {SCORE_REL:g}), scores non-increasing; explanations: "
             f"terms add up to the score shown (relative {EXPLAIN_REL:g} or the explanation's `check`). "
             f"Engine commit `{commit}`; load (`uptime`) before: `{load_before}`; after: `{load_after}`.", "",
             doors_line(res), ""]
    if commit.endswith("+dirty") and dirty:
        engine = [p for p in dirty if p.startswith("hippo_engine/")]
        lines += [f"`+dirty`: uncommitted edits to {', '.join(f'`{p}`' for p in dirty)} when the run ended"
                  + ("" if engine else " (`hippo_engine/` clean)") + ".", ""]
    lines += ["| check | compared | violations |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {c['compared']:,} | {len(c['violations']):,} |" for name, c in res["checks"].items()]
    lines += ["", f"Largest |sum of an explanation's terms - its score|: {res['gap'][0]:.3g} "
                  f"(relative {res['gap'][1]:.3g})."]
    bad = [v for c in res["checks"].values() for v in c["violations"]]
    if bad:
        lines += ["", f"First violations ({min(SHOWN, len(bad))} of {len(bad):,}):", ""]
        lines += [f"* `{v}`" for v in bad[:SHOWN]]
    return "\n".join(lines) + f"\n\nWall time {wall:.0f} s.\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Check, print the short report, write the result file; 1 when anything is violated."""
    from .common import engine_commit, uptime

    setup_logging(args.verbose)
    if not args.verbose:        # a line per request of the HTTP and MCP doors otherwise
        for name in ("httpx", "httpx2", "mcp"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if args.limit <= 0 or args.top <= 0:
        raise SystemExit("--limit and --top must be positive")
    if not (args.data / "musique").is_dir():
        print(f"ranking-prefix: skipped, no data under {args.data} (see ../shared/data/SOURCES.md)")
        return 0
    load_before, t0 = uptime(), time.perf_counter()
    res = measure(args)
    wall = time.perf_counter() - t0
    path = write_result(args.out, markdown(res, argv, load_before, uptime(), engine_commit(), wall, dirty_paths()))
    ks, total = res["ks"], sum(len(c["violations"]) for c in res["checks"].values())
    print(f"ranking-prefix: {res['questions']} questions checked, k = {ks[0]}..{ks[-1]}, violations: {total}")
    for name, c in res["checks"].items():
        print(f"  {len(c['violations']):6,} of {c['compared']:7,}  {name}")
    print(f"  largest |terms - score| of an explanation: {res['gap'][0]:.3g} (relative {res['gap'][1]:.3g})")
    if res.get("serve_start_s") is not None:
        print(f"  hippo-engine serve started in {res['serve_start_s']:.0f} s; wall time {wall:.0f} s")
    else:
        print(f"  wall time {wall:.0f} s")
    print(path)
    return 1 if total else 0
