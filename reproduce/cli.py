"""``python -m reproduce COMMAND ...``: regenerate the HippoRAG 2 paper's tables and run the benchmarks.

The table commands write markdown (and a PNG of Recall@k) to reproduce/results/<dataset>/; their runs
are cached and resumable. ``python -m reproduce COMMAND --help`` explains each command.

Examples:
    python -m reproduce table-recall --dataset musique_train --no-filter --limit 20
    python -m reproduce bench --sizes 1000 10000
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from hippo_engine.llm.base import LLMClient

from . import (
    build_filter_demos,
    check_index,
    citations_bench,
    communities,
    encoder_runtime,
    explain_bench,
    index_cost,
    index_scale,
    ppr_musique,
    ppr_scale,
    query_latency,
    ranking_prefix,
    rankings,
    ray_index,
    reader_choice,
)
from . import serve_abuse as service_abuse
from . import serve_fuzz as service_fuzz
from . import serve_load as service_load
from . import serve_overhead as service_overhead
from . import serve_restarts as service_restarts
from . import table_modes as modes_table
from . import table_recall as recall_llm_free
from . import tables as tables_pkg
from . import web_screenshot as web_shot
from .bench import backends, fuzzparsers, killharness, memcheck, pg_scale, pg_sharing, twowriters
from .bench import musique as bench_musique
from .bench import suite as bench_suite
from .tables import cli as tables

#: Commands other than the tables: name -> module with ``add_arguments(parser)`` and ``run(args, argv)``.
COMMANDS: dict[str, ModuleType] = {
    "bench": bench_suite,
    "bench-musique": bench_musique,
    "check-index": check_index,
    "explain": explain_bench,
    "communities": communities,
    "build-filter-demos": build_filter_demos,
    "rankings": rankings,
    "ranking-prefix": ranking_prefix,
    "ppr-scale": ppr_scale,
    "ppr-musique": ppr_musique,
    "table-recall-llm-free": recall_llm_free,
    "table-modes": modes_table,
    "citations": citations_bench,
    "reader-choice": reader_choice,
    "web-screenshot": web_shot,
}
#: What every table command writes and caches (the table package's docstring after its first line).
TABLES_NOTE = (tables_pkg.__doc__ or "").strip().split("\n\n", 1)[-1]
#: One line per command for ``--help``.
HELP = {
    "table-recall": "passage Recall@2/@5, dense vs HippoRAG 2 (paper Tables 3, 9)",
    "table-ablations": "NER-to-node, query-to-node, no passage nodes, no filter (paper Table 4)",
    "table-weights": "passage-node weight sweep 0.01 ... 0.5 (paper Table 5)",
    "table-qa": "QA EM/F1, dense vs HippoRAG 2, same reader (paper Table 2)",
    "table-graph": "graph statistics and indexing cost (paper Tables 10, 12)",
    "bench": "speed suite on synthetic corpora: ours vs the reference approach, per stage",
    "bench-musique": "indexing and retrieval speed, memory, PPR agreement on the MuSiQue subset",
    "explain": "explanations on the MuSiQue subset: |sum of terms - score|, rankings hash with explain, cost",
    "check-index": "idempotence / insert / delete checks on the MuSiQue subset (no LLM call)",
    "communities": "HiRAG communities on the MuSiQue subset: clusters, report cost, recall per mode",
    "build-filter-demos": "build the recognition filter's demonstrations (prompts/filter_program.json)",
    "reader-choice": "packaged readers 0.5B/1.5B: EM/F1, long and fragment answers, s/answer (issue 39)",
    "citations": "reader citations and grounded answers on 20 MuSiQue questions and the sample (issue 22)",
    "table-recall-llm-free": "issue 24: dense vs the ner memory and its variants, MuSiQue, 2Wiki and 2Wiki "
                             "single-relation questions, with and without titles (no LLM)",
    "table-modes": "issue 25: Recall@2/@5 of every mode (graphrag_*, kb_*, hi_*, hipporag2, naive), F1, LLM calls",
    "ppr-scale": "issue 26: forward-push PPR vs exact PPR on synthetic graphs (100k, 1M passages): latency, top-10",
    "ppr-musique": "issue 26: Recall@1..20 and rankings hash per PPR solver (auto, exact, push) on the MuSiQue subset",
    "ranking-prefix": "issue 38: the top k is the prefix of the top 20 with the same scores, Python, CLI, HTTP "
                      "and MCP, MuSiQue (explanations add up to the score shown)",
    "rankings": "Recall@1..20 and a rankings hash on the MuSiQue subset (openie file / ner, filter off, no LLM)",
    "web-screenshot": "docs/web.png: the web page of hippo-engine serve on the sample corpus, in Debian's chromium",
}
#: The reliability benchmarks (issue 13), same interface as ``COMMANDS``: name -> (module, help line).
RELIABILITY: dict[str, tuple[ModuleType, str]] = {
    "kill-harness": (killharness, "reliability: SIGKILL a writer at random moments of index/delete, check, resume"),
    "fuzz-parsers": (fuzzparsers, "reliability: 100,000 generated replies through every model-output parser"),
    "memory-check": (memcheck, "reliability: RSS over thousands of retrieve calls on a MuSiQue index"),
    "two-writers": (twowriters, "reliability: two processes index halves of one corpus at once, a third retrieves"),
    "pg-sharing": (pg_sharing, "reliability: two processes, each with its own HippoRAG, on one embedded "
                   "PostgreSQL or FalkorDB (--storage)"),
}
#: The storage benchmarks (issue 14), same interface: name -> (module, help line).
STORAGE: dict[str, tuple[ModuleType, str]] = {
    "backends": (backends, "storage: SQLite vs PostgreSQL + pgvector vs FalkorDB on the MuSiQue subset (index, "
                          "retrieval, disk, memory, HNSW)"),
    "pg-scale": (pg_scale, "storage: PostgreSQL + pgvector at 150k passages (vectors derived from a MuSiQue index)"),
}
#: The indexing benchmarks (issue 20), same interface: name -> (module, help line).
INDEXING: dict[str, tuple[ModuleType, str]] = {
    "index-scale": (index_scale, "indexing: seconds per 1k documents by stage, 10k to 100k tiny documents per call"),
    "ray-index": (ray_index, "indexing: NarrativeQA on a local Ray cluster vs one process, with worker kills"),
    "index-cost": (index_cost, "indexing: ner index time over a dense-only index's (MuSiQue, 2Wiki, NarrativeQA)"),
}
#: The service benchmarks (issue 23), same interface: name -> (module, help line).
SERVICE: dict[str, tuple[ModuleType, str]] = {
    "serve-fuzz": (service_fuzz, "service: schemathesis over every route of hippo-engine serve (5xx, schema breaks)"),
    "serve-overhead": (service_overhead, "service: one retrieve through HTTP vs in-process on the same warm memory"),
    "serve-load": (service_load, "service: 8 clients retrieve while documents come and go; consistency, latency"),
    "serve-restarts": (service_restarts, "service: SIGKILL the server while it ingests, restart; indexed exactly once"),
    "serve-abuse": (service_abuse, "service: abandoned answers, idle/slow sockets, 500 workspaces (issue 37's limits)"),
}

#: The latency benchmarks (issue 41), same interface: name -> (module, help line).
LATENCY: dict[str, tuple[ModuleType, str]] = {
    "query-latency": (query_latency, "latency: one query at a time in process vs batched and one encoder pass "
                                     "(MuSiQue, 2Wiki; --before CHECKOUT in the same run)"),
    "encoder-runtime": (encoder_runtime, "latency: the embedder on one query (question, + its mentions): today's "
                                         "encoder vs torch options and ONNX Runtime; ms, exactness, determinism"),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m reproduce`` parser: one subcommand per table and per benchmark."""
    ap = argparse.ArgumentParser(prog="python -m reproduce", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, fn in tables.TABLES.items():
        p = sub.add_parser(name, help=HELP[name], formatter_class=argparse.RawDescriptionHelpFormatter,
                           description=(fn.__doc__ or "").strip() + "\n\n" + TABLES_NOTE)
        tables.add_arguments(p)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=HELP[name], description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
    for name, (module, line) in {**RELIABILITY, **STORAGE, **INDEXING, **SERVICE, **LATENCY}.items():
        p = sub.add_parser(name, help=line, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
    return ap


def main(argv: Sequence[str] | None = None, *, llm: LLMClient | None = None, encoder=None) -> Path | int:
    """Run one command. A table returns its markdown path, other commands their exit status.
    ``llm`` / ``encoder`` inject clients into the tables (tests use fakes)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command in tables.TABLES:
        return tables.run(args, argv, llm=llm, encoder=encoder)
    others = {**RELIABILITY, **STORAGE, **INDEXING, **SERVICE, **LATENCY}
    module = COMMANDS[args.command] if args.command in COMMANDS else others[args.command][0]
    run: Callable[[argparse.Namespace, Sequence[str]], int] = module.run
    return run(args, argv)
