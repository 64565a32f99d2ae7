"""Single-query latency in process (issue 41): one query at a time against its batched cost and the floor.

    python -m reproduce query-latency [--datasets musique 2wiki] [--variant ner|openie|both] [--limit N]
                                      [--rounds R] [--work DIR] [--copy-from DIR] [--before CHECKOUT]

Per data set (MuSiQue: the 1,890-passage train corpus and its questions; 2Wiki: the 6,119-passage corpus and the
first N questions of ``linearrag_format/questions.json``) and index variant (``ner``; ``openie`` where the data
set has an OpenIE file: MuSiQue's released GPT-3.5 file, imported as ``rankings`` does; 2Wiki has none and is
skipped), with the engine's default retrieval settings, the recognition filter off and no LLM call:

* **single**: ``rag.retrieve([q], top_k)`` alone, wall time, every question ``--rounds`` times after a warm-up;
  p50/p90 over all those calls;
* **batched**: all questions in one ``retrieve`` call, divided by their number (one figure per round);
* **floor**: one encoder forward of the query text alone, ``rag.encoder.encode([q], instruction=...)`` with the
  fact-matching query instruction, as ``hippo_engine/retrieve/encoding.py`` encodes a query; p50;
* the ratio single p50 / floor p50, and a **profile** (cProfile) of ``--profile-queries`` single queries: cumulative
  time in the encoder (every call of the query path), in spaCy's query NER and in the graph search, encoder calls and
  forward passes per query, and the top 10 functions by own time.

Indexes live in ``<work>/<dataset>/<variant>/`` (default work ``outputs/reproduce/latency``), built by the table
commands' runner on first use (``ner`` on 2Wiki takes minutes: ``--datasets musique`` is the quick path) and reused
afterwards; ``--copy-from DIR`` copies the ``rankings`` command's MuSiQue indexes (``DIR/<variant>``) first.

The figures name the engine's commit (that of the checkout ``hippo_engine`` is imported from). ``--before CHECKOUT``
measures another checkout's engine in the same run: the command first runs itself in a child process with
``PYTHONPATH=<a folder holding only a link to CHECKOUT/hippo_engine>:<this repository>``, then this process's engine,
and reports both. Written: ``reproduce/results/latency/README.md`` (command, figures, load from ``uptime`` before and
after, torch threads) and ``latency.json`` beside it.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from . import common
from .common import REPO_ROOT, RESULTS_DIR, ForbiddenLLM, setup_logging, write_result
from .harness import RANKINGS_WORK, option, without_options

#: data set name -> its folder under the data root
DATASETS = {"musique": "musique/hipporag_v1_train", "2wiki": "2wikimultihopqa"}
VARIANTS = ("ner", "openie")
OUT_DIR = RESULTS_DIR / "latency"
WORK = Path("outputs/reproduce/latency")
#: environment variables that size the numeric libraries' thread pools (reported where set)
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")
#: profile parts: label -> the (file suffix, function) pairs whose cumulative times add up to it (an engine may have
#: only some of them: before issue 41 a query's text and its mentions were two ``encode`` calls, after it one
#: ``encode_groups`` call)
PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "encoder": (("models/encoder.py", "encode"), ("models/encoder.py", "encode_groups")),
    "query NER: spaCy": (("index/ner.py", "query_entities"),),
    "graph search": (("retrieve/retriever.py", "search"),),
}
#: counts per query: label -> the (file suffix, function) pairs whose calls are counted
COUNTS: dict[str, tuple[tuple[str, str], ...]] = {
    "encoder calls": PARTS["encoder"],
    "forward passes": (("models/encoder.py", "_forward"), ("models/packed.py", "embed")),
}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``query-latency`` command's options."""
    ap.add_argument("--datasets", nargs="+", choices=tuple(DATASETS), default=list(DATASETS),
                    help="data sets (default: both)")
    ap.add_argument("--variant", choices=(*VARIANTS, "both"), default="ner", help="index variant (default ner)")
    option(ap, "--limit", default=100, help="the first N questions of each data set (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds over the questions (default 3)")
    ap.add_argument("--top-k", type=int, default=None, help="passages per query (default: the engine's)")
    ap.add_argument("--profile-queries", type=int, default=20, help="single queries profiled (default 20)")
    option(ap, "--work", default=WORK, help="index folders <work>/<dataset>/<variant> (default %(default)s)")
    ap.add_argument("--copy-from", type=Path, default=None,
                    help=f"copy MuSiQue indexes from DIR/<variant> when missing (e.g. {RANKINGS_WORK})")
    option(ap, "--data-root")
    ap.add_argument("--before", type=Path, default=None,
                    help="also measure the engine of this checkout (a child process), reported as 'before'")
    option(ap, "--out", help="result markdown (default reproduce/results/latency/README.md)")
    ap.add_argument("--json-out", type=Path, default=None, help=argparse.SUPPRESS)   # the child's figures
    option(ap, "--verbose")


# ----------------------------------------------------------------------------- figures
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation) of ``values`` in the same unit; NaN when empty."""
    return float(np.percentile(np.asarray(values, float), q)) if len(values) else float("nan")


def time_calls(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    """Wall seconds of one call of ``fn`` by ``clock``."""
    t = clock()
    fn()
    return clock() - t


def measure(retrieve: Callable[[list[str]], object], encode: Callable[[list[str]], object],
            questions: Sequence[str], rounds: int, clock: Callable[[], float] = time.perf_counter) -> dict:
    """Single, batched and floor timings in ms: ``retrieve(queries)`` (one query, then all), ``encode([q])``.
    Warm-up first (three single queries, one floor encoding); returns the samples and their summary."""
    qs = list(questions)
    for q in qs[:3]:
        retrieve([q])
    encode(qs[:1])
    single, batched, floor = [], [], []
    for _ in range(rounds):
        single += [1000 * time_calls(lambda q=q: retrieve([q]), clock) for q in qs]
        batched.append(1000 * time_calls(lambda: retrieve(qs), clock) / len(qs))
        floor += [1000 * time_calls(lambda q=q: encode([q]), clock) for q in qs]
    return summarize(single, batched, floor)


def summarize(single: Sequence[float], batched: Sequence[float], floor: Sequence[float]) -> dict:
    """p50/p90 of single and batched, p50 of the floor, the ratio single p50 / floor p50 (all ms)."""
    s = {"single_p50": percentile(single, 50), "single_p90": percentile(single, 90),
         "batched_p50": percentile(batched, 50), "batched_p90": percentile(batched, 90),
         "floor_p50": percentile(floor, 50), "floor_p90": percentile(floor, 90)}
    s["ratio"] = s["single_p50"] / s["floor_p50"] if s["floor_p50"] > 0 else float("nan")
    return {**s, "samples": {"single": list(single), "batched": list(batched), "floor": list(floor)}}


def _matches(key: tuple, where: tuple[str, str]) -> bool:
    """Whether a profile key ``(file, line, function)`` is ``where``'s ``(file suffix, function)``."""
    return key[0].replace(os.sep, "/").endswith(where[0]) and key[2] == where[1]


def _entries(table: dict, pairs: tuple[tuple[str, str], ...]) -> list:
    """The profile entries of the functions ``pairs`` names."""
    return [v for k, v in table.items() if any(_matches(k, w) for w in pairs)]


def breakdown(stats: pstats.Stats, n: int, top: int = 10) -> dict:
    """ms per query in each of :data:`PARTS` (cumulative; ``None`` where the engine has none of its functions),
    calls per query of :data:`COUNTS` and the ``top`` functions by own time (ms per query, own and cumulative)."""
    table = stats.stats   # type: ignore[attr-defined]
    parts: dict[str, float | None] = {}
    for label, pairs in PARTS.items():
        found = _entries(table, pairs)
        parts[label] = 1000 * sum(v[3] for v in found) / n if found else None
    counts = {label: sum(v[1] for v in _entries(table, pairs)) / n for label, pairs in COUNTS.items()}
    rows = sorted(table.items(), key=lambda kv: -kv[1][2])[:top]
    funcs = [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "calls": v[1] / n,
              "own_ms": 1000 * v[2] / n, "cum_ms": 1000 * v[3] / n} for k, v in rows]
    return {"parts": parts, "counts": counts, "top": funcs}


def profiled(fn: Callable[[list[str]], object], questions: Sequence[str]) -> tuple[float, cProfile.Profile]:
    """``(wall ms per question, profile)`` of ``fn([q])`` for each question under cProfile."""
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for q in questions:
        fn([q])
    prof.disable()
    return 1000 * (time.perf_counter() - t) / len(questions), prof


def profile(retrieve: Callable[[list[str]], object], encode: Callable[[list[str]], object],
            questions: Sequence[str]) -> dict:
    """cProfile over one single ``retrieve([q])`` per question: wall ms per query and :func:`breakdown`; and the
    floor's ``encode([q])`` under the profiler too (``floor_ms``: what the profiler's overhead makes of the floor)."""
    wall, prof = profiled(retrieve, questions)
    floor, _ = profiled(encode, questions)
    return {"queries": len(questions), "wall_ms": wall, "floor_ms": floor,
            **breakdown(pstats.Stats(prof), len(questions))}


# ----------------------------------------------------------------------------- indexes
def _runner_args(folder: Path, variant: str) -> argparse.Namespace:
    """What the tables' ``Runner`` reads, for one index folder (it appends ``-ner`` for ``ner``)."""
    return argparse.Namespace(save_dir=str(folder / "index"), embedder=None, llm=None, llm_base_url=None,
                              llm_backend=None, quiet=True, no_filter=True, shuffle_corpus=None,
                              openie=None if variant == "openie" else "none")


def copy_index(source: Path | None, target: Path) -> bool:
    """Copy ``source`` (the rankings command's ``<dir>/<variant>``) to ``target`` unless ``target`` exists
    or there is nothing to copy (lock files left out); whether it copied."""
    if source is None or target.exists() or not source.is_dir():
        return False
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("write.lock*", "*.lock", "rankings.json"))
    return True


def open_index(args: argparse.Namespace, name: str, dataset, variant: str, encoder=None):
    """``(runner, rag)``: the variant's index under ``<work>/<name>/<variant>`` (copied, reused or built),
    opened with the engine's default retrieval settings, the filter off and an LLM that must not be called
    (``encoder``: the engine's when ``None``; tests pass a fake)."""
    from .tables.methods import hippo_method
    from .tables.runner import Runner

    folder = args.work / name / variant
    if name == "musique" and args.copy_from is not None and copy_index(args.copy_from / variant, folder):
        print(f"{name}/{variant}: index copied from {args.copy_from / variant}", flush=True)
    runner = Runner(_runner_args(folder, variant), dataset, [], llm=ForbiddenLLM(), encoder=encoder,
                    extractor=variant)
    t = time.perf_counter()
    runner.prepare_index()
    print(f"{name}/{variant}: index {runner.index_note} ({time.perf_counter() - t:.1f} s)", flush=True)
    return runner, runner.open(hippo_method(False))


def threads(rag) -> dict:
    """torch's intra- and inter-op threads and the encoder's workers (forward passes in parallel)."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "torch_interop": torch.get_num_interop_threads(),
            "encoder_workers": getattr(rag.encoder, "num_workers", None)}


def run_pair(args: argparse.Namespace, name: str, dataset, variant: str, encoder=None) -> dict:
    """Every figure of one data set and variant."""
    runner, rag = open_index(args, name, dataset, variant, encoder)
    try:
        k = args.top_k or rag.config.retrieval_top_k
        qs = list(dataset.questions)
        instruction = rag.config.query_instruction_fact

        def retrieve(queries: list[str]):
            return rag.retrieve(queries, k)

        def encode(queries: list[str]):
            return rag.encoder.encode(queries, instruction=instruction)
        load = common.uptime()
        figures = measure(retrieve, encode, qs, args.rounds)
        prof = profile(retrieve, encode, qs[:args.profile_queries])
        return {"dataset": name, "variant": variant, "questions": len(qs), "passages": len(dataset.docs),
                "top_k": k, "rounds": args.rounds, "index": runner.index_note, **threads(rag),
                "load_before": load, "load_after": common.uptime(), **figures, "profile": prof}
    finally:
        rag.close()
        runner.close()


def measure_engine(args: argparse.Namespace, encoder=None) -> dict:
    """This process's engine over every data set and variant asked for (skips said in ``skipped``)."""
    import hippo_engine
    from hippo_engine.evaluation.datasets import load_dataset

    where = Path(hippo_engine.__file__).resolve().parent
    out = {"engine": str(where), "commit": common.engine_commit(), "load_before": common.uptime(),
           "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ}, "results": [], "skipped": []}
    print(f"engine {where} at {out['commit']}", flush=True)
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    for name in args.datasets:
        dataset = load_dataset(args.data / DATASETS[name]).head(args.limit)
        for variant in variants:
            if variant == "openie" and dataset.openie_file is None:
                out["skipped"].append(f"{name}/openie: no OpenIE file beside {DATASETS[name]} (none released)")
                print(out["skipped"][-1], flush=True)
                continue
            r = run_pair(args, name, dataset, variant, encoder)
            out["results"].append(r)
            print(line(r), flush=True)
    out["load_after"] = common.uptime()
    return out


def line(r: dict) -> str:
    """One result as a printed line."""
    parts = ", ".join(f"{k} {v:.1f}" for k, v in r["profile"]["parts"].items() if v is not None)
    return (f"{r['dataset']}/{r['variant']}: single p50 {r['single_p50']:.1f} / p90 {r['single_p90']:.1f} ms, "
            f"batched {r['batched_p50']:.1f} ms/q, floor p50 {r['floor_p50']:.1f} ms, ratio {r['ratio']:.2f}; "
            f"profile {r['profile']['wall_ms']:.1f} ms/q ({parts}) | {r['load_after']}")


# ----------------------------------------------------------------------------- before, in a child
def child_argv(argv: Sequence[str], json_out: Path) -> list[str]:
    """``argv`` without ``--before``/``--out``/``--json-out`` (and their values), writing figures to ``json_out``."""
    args = [a for a in without_options(argv, ("--before", "--out", "--json-out")) if a != "query-latency"]
    return ["query-latency", *args, "--json-out", str(json_out)]


def run_before(checkout: Path, argv: Sequence[str], args: argparse.Namespace) -> dict:
    """The figures of ``checkout``'s engine: this command in a child process whose ``PYTHONPATH`` is a folder
    holding only a link to ``checkout/hippo_engine``, then this repository (paths made absolute)."""
    engine = checkout.resolve() / "hippo_engine"
    if not (engine / "__init__.py").is_file():
        raise SystemExit(f"--before {checkout}: no hippo_engine package there")
    with tempfile.TemporaryDirectory(prefix="latency-before-") as tmp:
        shim = Path(tmp)
        (shim / "hippo_engine").symlink_to(engine, target_is_directory=True)
        out = shim / "figures.json"
        absolute = [*child_argv(argv, out), "--work", str(args.work.resolve()), "--data", str(args.data.resolve())]
        if args.copy_from is not None:
            absolute += ["--copy-from", str(args.copy_from.resolve())]
        env = {**os.environ, "PYTHONPATH": f"{shim}{os.pathsep}{REPO_ROOT}"}
        subprocess.run([sys.executable, "-m", "reproduce", *absolute], cwd=shim, env=env, check=True)
        return json.loads(out.read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- report
def _shown_command(argv: Sequence[str]) -> str:
    """The command line with the value of each path option written ``DIR`` (the rankings folder kept)."""
    shown, path_flags = [], ("--work", "--data", "--out", "--copy-from", "--before")
    words = [a for a in argv if a != "query-latency"]
    for i, a in enumerate(words):
        if i and words[i - 1] in path_flags:
            shown.append("DIR" if a != str(RANKINGS_WORK) else a)
        else:
            shown.append(a.split("=", 1)[0] + "=DIR" if a.startswith(tuple(f + "=" for f in path_flags)) else a)
    return "python -m reproduce query-latency " + " ".join(shlex.quote(a) for a in shown)


def engine_table(run: dict) -> list[str]:
    """The figures of one engine: one row per data set and variant, then each profile's top functions."""
    parts = list(PARTS) + [f"{c} / q" for c in COUNTS]
    lines = [f"Engine `{run['commit']}` (`{Path(run['engine']).parent.name}/hippo_engine`). "
             f"Load before: `{run['load_before']}`; after: `{run['load_after']}`. Thread settings in the "
             f"environment: {', '.join(f'`{k}={v}`' for k, v in run.get('thread_env', {}).items()) or 'none'}.", "",
             "| data set / variant | questions x rounds | single p50 | single p90 | batched p50 (ms/q) | floor p50 | "
             "single / floor | profiled ms/q (floor) | " + " | ".join(parts) + " | torch threads / encoder workers |",
             "| --- " * (9 + len(parts)) + "|"]
    for r in run["results"]:
        p = ["n/a" if v is None else f"{v:.1f}" for v in r["profile"]["parts"].values()]
        p += [f"{v:.1f}" for v in r["profile"].get("counts", {}).values()]
        lines.append(f"| {r['dataset']} / {r['variant']} | {r['questions']} x {r['rounds']} | "
                     f"{r['single_p50']:.1f} | {r['single_p90']:.1f} | {r['batched_p50']:.1f} | {r['floor_p50']:.1f} | "
                     f"{r['ratio']:.2f} | {r['profile']['wall_ms']:.1f} ({r['profile']['floor_ms']:.1f}) | "
                     + " | ".join(p) + f" | {r['torch_threads']} / {r['encoder_workers']} |")
    lines += [f"Skipped: {s}." for s in run["skipped"]]
    for r in run["results"]:
        lines += ["", f"Top 10 functions by own time, {r['dataset']} / {r['variant']} "
                      f"({r['profile']['queries']} single queries profiled; ms per query; load after: "
                      f"`{r['load_after']}`):", "", "| function | calls/q | own ms | cumulative ms |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| `{f['function']}` | {f['calls']:.0f} | {f['own_ms']:.2f} | {f['cum_ms']:.2f} |"
                  for f in r["profile"]["top"]]
    return lines


def markdown(runs: dict[str, dict], argv: Sequence[str]) -> str:
    """The report: the command, what each figure is, then one table per engine (``before`` first)."""
    lines = ["# Single-query latency in process (issue 41)", "",
             "```bash", _shown_command(argv), "```", "",
             "All times are wall milliseconds, in one process, after a warm-up. *single*: `rag.retrieve([q], top_k)` "
             "alone (p50/p90 over every question and round); *batched*: all questions in one call / their number "
             "(p50 over rounds); *floor*: one encoder forward of the query text alone (`rag.encoder.encode([q], "
             "instruction=query_instruction_fact)`, back to back), p50. The profile columns are cumulative ms per "
             "single query under cProfile (which slows Python-heavy parts; in brackets the floor's encoding under the "
             "profiler): *encoder*: every encoder call of the query path (its text, and its entity mentions where "
             "the index links them), *query NER: spaCy*: finding the mentions, *graph search*: scoring, linking and "
             "the walks; *encoder calls / q* and *forward passes / q*: calls per query (a forward pass is one run of "
             "the model, however many texts it holds). Engine defaults, recognition filter off, no LLM call. See "
             "`reproduce/query_latency.py`.", "",
             f"Machine: {common.machine()}.", ""]
    for label, run in runs.items():
        lines += [f"## {label}", "", *engine_table(run), ""]
    if "before" in runs and "after" in runs:
        lines += ["## Before / after (single p50, ratio to the floor of the same run)", ""]
        after = {(r["dataset"], r["variant"]): r for r in runs["after"]["results"]}
        for r in runs["before"]["results"]:
            a = after.get((r["dataset"], r["variant"]))
            if a:
                lines.append(f"* {r['dataset']} / {r['variant']}: {r['single_p50']:.1f} ms ({r['ratio']:.2f}x floor) "
                             f"-> {a['single_p50']:.1f} ms ({a['ratio']:.2f}x floor)")
    return "\n".join(lines) + "\n"


def json_safe(value):
    """``value`` with every NaN float written as ``None`` (strict JSON)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return None if isinstance(value, float) and value != value else value


def run(args: argparse.Namespace, argv: Sequence[str], *, encoder=None) -> int:
    """Measure (the ``--before`` engine in a child first), print and write the report and its JSON
    (``encoder``: for tests)."""
    setup_logging(args.verbose)
    if args.limit is not None and args.limit <= 0 or args.rounds <= 0 or args.profile_queries <= 0:
        raise SystemExit("--limit, --rounds and --profile-queries must be positive")
    runs: dict[str, dict] = {}
    if args.before is not None:
        runs["before"] = run_before(args.before, argv, args)
    runs["after" if args.before is not None else "engine"] = measure_engine(args, encoder)
    if args.json_out is not None:   # a child: the parent writes the report
        write_result(args.json_out, json.dumps(runs["engine"]))
        return 0
    out = args.out or OUT_DIR / "README.md"
    path = write_result(out, markdown(runs, argv))
    name = "latency.json" if Path(out).name == "README.md" else Path(out).stem + ".json"
    write_result(Path(out).parent / name, json.dumps({"command": _shown_command(argv), **json_safe(runs)},
                                                     indent=1) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
