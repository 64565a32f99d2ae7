"""``python -m reproduce serve-load --throughput``: read-only throughput of ``hippo-engine serve``, today's
server and another checkout's in the same run.

    python -m reproduce serve-load --throughput [--before CHECKOUT] [--levels 1,8,32] [--per-level 240]
                                   [--rounds 1]

The index is serve-load's SQLite one (the MuSiQue subset, 1,890 passages, ``extractor="ner"``; built once
under ``<work>/index_sqlite``, reused). Each server runs as a subprocess on a free port of 127.0.0.1 with
its own default settings (only the index folder, host and port given): ``--before CHECKOUT`` first, as
``python -m hippo_engine.cli serve`` with ``PYTHONPATH`` a folder holding only a link to
``CHECKOUT/hippo_engine`` (then this repository, for nothing else), then this checkout's ``hippo-engine
serve``; ``--rounds N`` alternates them N times. After a warm-up (not measured), for each level of
``--levels`` that many client threads (httpx, one keep-alive connection each) send ``--per-level`` ``POST
/retrieve`` between them: one MuSiQue question each, ``top_k`` 5, ``hipporag2`` mode. Per level:
requests/s (requests over the wall time of the level), p50/p95 of the latency each client measured, errors.

Every response is then checked against the single-request answer: ``HippoRAG.retrieve([q], top_k)`` on the
same index folder, in-process, one question per call, by the engine that server runs (this checkout's; the
other checkout's in a child process): the same passage ids in the same order and equal scores. The
machine's load (``uptime``) is noted before and after each server's levels.

Writes ``reproduce/results/serve/throughput.md`` and ``throughput.json``; exits 1 on any error or any
response that differs from its single-request answer.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .common import REPO_ROOT, commit_label
from .serve_harness import (
    OUT_DIR,
    Launch,
    ServerProcess,
    build_index,
    command_line,
    musique_documents,
    musique_questions,
    open_engine,
    pct,
    serve_command,
    uptime,
)

#: seconds one request may take before it counts as failed
REQUEST_TIMEOUT = 120.0
#: requests sent (8 clients) before measuring a server
WARMUP = 32
#: the number of mismatching responses shown in the report
EXAMPLES = 5


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The throughput measure's options (``serve-load --throughput``)."""
    ap.add_argument("--throughput", action="store_true", help="the read-only throughput measure alone: requests/s "
                    "and p50/p95 at --levels clients, this server and --before's (writes throughput.md)")
    ap.add_argument("--before", type=Path, default=None, metavar="CHECKOUT",
                    help="with --throughput: also serve this checkout's engine (a git worktree), in the same run")
    ap.add_argument("--levels", type=_levels, default=(1, 8, 32), metavar="N,N,...",
                    help="with --throughput: concurrent clients per level (default 1,8,32)")
    ap.add_argument("--per-level", type=int, default=240, metavar="N",
                    help="with --throughput: requests per level (default 240)")
    ap.add_argument("--rounds", type=int, default=1, help="with --throughput: servers alternated this many times "
                    "(default 1; figures pooled per server and level)")
    ap.add_argument("--throughput-out", type=Path, default=OUT_DIR / "throughput.md",
                    help="with --throughput: the report (and .json beside it)")


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give client counts separated by commas, e.g. 1,8,32") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every level needs at least one client")
    return levels


# ----------------------------------------------------------------------------- the engines
@dataclass
class Engine:
    """A server to measure: ``name`` (``before``/``current``), its checkout and how it starts."""

    name: str
    checkout: Path
    launch: Launch
    levels: dict[int, list[dict]] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)


@contextmanager
def engine_path(checkout: Path) -> Iterator[Path]:
    """A folder holding only a link to ``checkout/hippo_engine`` (removed afterwards): put first on
    ``PYTHONPATH``, it makes ``hippo_engine`` that checkout's."""
    engine = checkout.resolve() / "hippo_engine"
    if not (engine / "__init__.py").is_file():
        raise SystemExit(f"--before {checkout}: no hippo_engine package there")
    with tempfile.TemporaryDirectory(prefix="serve-before-") as tmp:
        (Path(tmp) / "hippo_engine").symlink_to(engine, target_is_directory=True)
        yield Path(tmp)


def before_launch(shim: Path) -> Launch:
    """The other checkout's ``hippo-engine serve`` entry, run from the link folder (so that neither the
    working folder nor this repository provides ``hippo_engine``) with its own defaults."""
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{REPO_ROOT}"}
    return Launch([sys.executable, "-m", "hippo_engine.cli"], env=env, cwd=shim, defaults=True)


# ----------------------------------------------------------------------------- clients
def send(c, question: str, top_k: int) -> dict:
    """One ``POST /retrieve``: its latency, status and the passages' ids and scores (or the error)."""
    import httpx
    t = time.perf_counter()
    try:
        r = c.post("/retrieve", json={"query": question, "top_k": top_k, "mode": "hipporag2"})
    except httpx.HTTPError as e:
        return {"q": question, "s": time.perf_counter() - t, "status": None, "error": f"{type(e).__name__}: {e}"}
    out = {"q": question, "s": time.perf_counter() - t, "status": r.status_code}
    if r.status_code == 200:
        ps = r.json()["results"][0]["passages"]
        out.update(ids=[p["id"] for p in ps], scores=[p["score"] for p in ps])
    else:
        out["error"] = r.text[:300]
    return out


def level(url: str, questions: Sequence[str], clients: int, requests: int, top_k: int, seed: int) -> dict:
    """``clients`` threads sending ``requests`` between them (the questions in a seeded order); the wall
    time of the level and every response."""
    import httpx
    order = random.Random(seed).choices(list(questions), k=requests)
    done: list[dict] = []
    lock, next_i = threading.Lock(), [0]

    def client() -> None:
        with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
            while True:
                with lock:
                    i, next_i[0] = next_i[0], next_i[0] + 1
                if i >= requests:
                    return
                r = send(c, order[i], top_k)
                with lock:
                    done.append(r)
    threads = [threading.Thread(target=client, name=f"client-{k}") for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"clients": clients, "seconds": time.perf_counter() - t0, "responses": done}


def summary(runs: Sequence[dict]) -> dict:
    """One level's figures pooled over rounds: requests, seconds, requests/s, p50/p95 (ms) of the successful
    requests, errors."""
    responses = [r for run in runs for r in run["responses"]]
    seconds = sum(run["seconds"] for run in runs)
    ok = [r["s"] for r in responses if r["status"] == 200]
    return {"clients": runs[0]["clients"], "requests": len(responses), "seconds": seconds,
            "requests_per_s": len(responses) / seconds if seconds else float("nan"),
            "p50_ms": 1000 * pct(ok, 50), "p95_ms": 1000 * pct(ok, 95),
            "errors": len(responses) - len(ok)}


def serve_levels(engine: Engine, save: Path, questions: Sequence[str], args: argparse.Namespace, rnd: int,
                 log=print) -> None:
    """Start ``engine``'s server on ``save``, warm it up, run every level, stop it."""
    server = ServerProcess(save, args.work / f"server_throughput_{engine.name}.log", launch=engine.launch)
    run: dict = {"round": rnd}
    with server:
        run["startup_s"] = server.wait_ready(all_workers=False)
        level(server.url, questions, 8, WARMUP, args.top_k, seed=-1)
        run["uptime_before"] = uptime()
        for n in args.levels:
            got = level(server.url, questions, n, args.per_level, args.top_k, seed=args.seed * 100 + n)
            engine.levels.setdefault(n, []).append(got)
            log(f"{engine.name} round {rnd}: {n} client(s): {json.dumps(summary([got]))}")
        run["uptime_after"] = uptime()
    run["server_exit"] = server.proc.returncode if server.proc else None
    engine.runs.append(run)


# ----------------------------------------------------------------------------- the single-request answers
def single_answers(save: Path, questions: Sequence[str], top_k: int) -> dict[str, dict]:
    """``HippoRAG.retrieve([q], top_k)`` of each question, in this process (one question per call): the
    passages' ids and scores as the service sends them."""
    from hippo_engine.results import ranked_passages
    rag = open_engine(save)
    try:
        out = {}
        for q in dict.fromkeys(questions):
            ps = [p.to_dict() for p in ranked_passages(rag.retrieve([q], top_k)[0])]
            out[q] = {"ids": [p["id"] for p in ps], "scores": [p["score"] for p in ps]}
        return out
    finally:
        rag.close()


def single_answers_of(engine: Engine, save: Path, questions: Sequence[str], top_k: int) -> dict[str, dict]:
    """The single-request answers of ``engine``'s code: this process's, or a child's on the other checkout."""
    if engine.name == "current":
        return single_answers(save, questions, top_k)
    with tempfile.TemporaryDirectory(prefix="serve-answers-") as tmp:
        qfile, out = Path(tmp) / "questions.json", Path(tmp) / "answers.json"
        qfile.write_text(json.dumps(list(questions)), encoding="utf-8")
        env = {**os.environ, **engine.launch.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run([sys.executable, "-m", "reproduce.serve_throughput", str(save.resolve()), str(qfile),
                        str(top_k), str(out)], cwd=engine.launch.cwd, env=env, check=True)
        return json.loads(out.read_text(encoding="utf-8"))


def check(engine: Engine, answers: dict[str, dict]) -> dict:
    """Every successful response of ``engine`` against the single-request answer of its question."""
    responses = [r for runs in engine.levels.values() for run in runs for r in run["responses"]
                 if r["status"] == 200]
    bad = [r for r in responses if r["ids"] != answers[r["q"]]["ids"] or r["scores"] != answers[r["q"]]["scores"]]
    return {"checked": len(responses), "mismatches": len(bad),
            "examples": [{"question": r["q"], "served": r["ids"], "single": answers[r["q"]]["ids"]}
                         for r in bad[:EXAMPLES]]}


# ----------------------------------------------------------------------------- the run
def results(engines: Sequence[Engine], checks: dict[str, dict], same_answers: bool | None) -> dict:
    """The figures of every engine (levels pooled over rounds), the checks and the ratios at 8 clients."""
    out: dict = {"engines": {}, "same_single_answers": same_answers}
    for e in engines:
        out["engines"][e.name] = {"commit": commit_label(root=e.checkout), "runs": e.runs, "check": checks[e.name],
                                  "levels": [summary(e.levels[n]) for n in sorted(e.levels)]}
    if "before" in out["engines"] and "current" in out["engines"]:
        at = {name: {r["clients"]: r for r in v["levels"]} for name, v in out["engines"].items()}
        if 8 in at["before"] and 8 in at["current"]:
            old, new = at["before"][8], at["current"][8]
            out["at_8_clients"] = {"ratio_requests_per_s": new["requests_per_s"] / old["requests_per_s"],
                                   "p95_ms_before": old["p95_ms"], "p95_ms_current": new["p95_ms"]}
    return out


def failures(figures: dict) -> list[str]:
    """Why the run failed (empty: passed): errors, or responses unlike their single-request answer."""
    out = []
    for name, e in figures["engines"].items():
        errors = sum(r["errors"] for r in e["levels"])
        if errors:
            out.append(f"{name}: {errors} request(s) failed")
        if e["check"]["mismatches"]:
            out.append(f"{name}: {e['check']['mismatches']} response(s) differ from the single-request answer")
    return out


def run(args: argparse.Namespace, argv: Sequence[str], log=print) -> int:
    """Serve the index with each engine, measure, check every response, write the report."""
    from .serve_report import render_throughput
    save = (args.work / "index_sqlite").resolve()     # absolute: the before server runs in another folder
    base = musique_documents(args.base)
    log(f"index of {len(base)} MuSiQue passages in {args.work / 'index_sqlite'}")
    build_index(save, base, "sqlite", log)
    questions = musique_questions()
    with _engines(args.before) as engines:
        for rnd in range(1, args.rounds + 1):
            for e in engines:
                serve_levels(e, save, questions, args, rnd, log)
        asked = sorted({r["q"] for e in engines for runs in e.levels.values() for run in runs
                        for r in run["responses"]})
        answers = {e.name: single_answers_of(e, save, asked, args.top_k) for e in engines}
    checks = {e.name: check(e, answers[e.name]) for e in engines}
    same = answers["before"] == answers["current"] if "before" in answers else None
    figures = results(engines, checks, same)
    figures["failures"] = failures(figures)
    command = shown_command(argv, args.work)
    md = render_throughput(figures, command, args)
    args.throughput_out.parent.mkdir(parents=True, exist_ok=True)
    args.throughput_out.write_text(md, encoding="utf-8")
    args.throughput_out.with_suffix(".json").write_text(json.dumps({"command": command, **figures}, indent=1),
                                                        encoding="utf-8")
    print(md)
    return 1 if figures["failures"] else 0


#: path options shown by a placeholder in the report (no folder of this machine in it)
PLACEHOLDERS = {"--before": "CHECKOUT", "--throughput-out": "FILE", "--out": "FILE"}


def shown_command(argv: Sequence[str], work: Path) -> str:
    """The command line as run, the work folder written ``<work dir>`` and the value of each path option of
    :data:`PLACEHOLDERS` by its placeholder (a path inside this repository kept, relative)."""
    words, shown = list(argv), []
    for i, a in enumerate(words):
        flag, eq, value = a.partition("=")
        if eq and flag in PLACEHOLDERS:
            shown.append(f"{flag}={_placeholder(flag, value)}")
        elif i and words[i - 1] in PLACEHOLDERS:
            shown.append(_placeholder(words[i - 1], a))
        else:
            shown.append(a)
    return command_line("serve-load", shown, work)


def _placeholder(flag: str, value: str) -> str:
    path = Path(value).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else PLACEHOLDERS[flag]


@contextmanager
def _engines(before: Path | None) -> Iterator[list[Engine]]:
    """The engines to measure: ``before`` (when given) first, then this checkout's."""
    current = Engine("current", REPO_ROOT, Launch(serve_command(), defaults=True))
    if before is None:
        yield [current]
        return
    with engine_path(before) as shim:
        yield [Engine("before", before.resolve(), before_launch(shim)), current]


if __name__ == "__main__":      # the single-request answers of the engine on PYTHONPATH (see single_answers_of)
    save_dir, questions_file, k, answers_file = sys.argv[1:5]
    qs = json.loads(Path(questions_file).read_text(encoding="utf-8"))
    Path(answers_file).write_text(json.dumps(single_answers(Path(save_dir), qs, int(k))), encoding="utf-8")
