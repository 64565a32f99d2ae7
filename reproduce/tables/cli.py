"""The table commands: their registry, their shared options and the run of one of them."""
from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from hippo_engine.evaluation.datasets import load_dataset
from hippo_engine.llm.base import LLMClient

from ..common import ForbiddenLLM, setup_logging
from .ablations import table_ablations
from .graph import table_graph
from .paper import WEIGHTS
from .qa import table_qa
from .recall import table_recall
from .runner import Runner
from .weights import table_weights

TABLES: dict[str, Callable[[Runner], Path]] = {
    "table-recall": table_recall,
    "table-ablations": table_ablations,
    "table-weights": table_weights,
    "table-qa": table_qa,
    "table-graph": table_graph,
}


def _weights(text: str) -> list[float]:
    try:
        ws = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--weights takes comma-separated numbers: {e}") from e
    if not ws or any(not 0.0 <= w <= 1.0 for w in ws):
        raise argparse.ArgumentTypeError("--weights must be numbers in [0, 1]")
    return ws


EXTRACTORS = ("openie", "ner", "nary")


def _extractors(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in EXTRACTORS]
    if not names or bad or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"--extractor takes {', '.join(EXTRACTORS)} (comma-separated, no repeats)")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options every table command takes."""
    p.add_argument("--dataset", required=True,
                   help="a folder with <name>.json + <name>_corpus.json, a questions file, or a dataset "
                        "name under the data root ($HIPPO_DATA_DIR, default ../shared/data)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N questions")
    p.add_argument("--save-dir", default=None,
                   help="index folder, shared by all tables and configurations "
                        "(default outputs/reproduce/<dataset>/<embedder>)")
    p.add_argument("--embedder", default=None, help="embedding model (default: the engine's, all-MiniLM-L6-v2)")
    p.add_argument("--llm", default=None,
                   help="LLM for the filter, query NER and reader (default: the engine's local model)")
    p.add_argument("--llm-base-url", default=None, help="OpenAI-compatible server for --llm")
    p.add_argument("--llm-backend", choices=("auto", "transformers", "llama_cpp"), default=None,
                   help="local model backend (default auto: llama_cpp when installed); replies are "
                        "cached per backend, so rebuilding a table from its cache needs the same one")
    p.add_argument("--openie", default=None,
                   help="OpenIE results file to import before indexing (default: an openie_*.json beside "
                        "the data; 'none' to run OpenIE with the LLM)")
    p.add_argument("--extractor", type=_extractors, default=["openie"], metavar="{openie,ner,nary}",
                   help="how the index gets its facts: openie (LLM triples; the OpenIE file beside the data is "
                        "imported, default), ner (spaCy NER + sentences, no LLM at index or query time; never "
                        "uses the filter), nary (LLM n-ary facts). Each has its own index (<save-dir>-ner, ...). "
                        "table-recall takes several, comma-separated (e.g. openie,ner), and shows them side by side")
    p.add_argument("--dense-first", type=int, default=0, metavar="N",
                   help="rank fusion: the top-N dense passages first, then the graph ranking. table-recall adds a "
                        "'+ dense_first=N' row beside each HippoRAG 2 row; the other tables run every HippoRAG 2 "
                        "configuration with it (default 0: the paper)")
    p.add_argument("--shuffle-corpus", type=int, default=None, metavar="SEED",
                   help="index the corpus in an order shuffled with this seed (own index folder <save-dir>-shuffleSEED "
                        "and result files): recall must not depend on corpus order")
    p.add_argument("--forbid-llm", action="store_true",
                   help="any LLM call is an error (proves the table made none; with --no-filter or --extractor ner)")
    p.add_argument("--no-filter", action="store_true",
                   help="switch the recognition filter off (no LLM call during retrieval)")
    p.add_argument("--only", type=lambda s: [x.strip() for x in s.split(",") if x.strip()], default=None,
                   help="compute only these configurations (comma-separated keys such as full,query,"
                        "no_passage,ner,no_filter,dense,hipporag2,w0.1); the others are shown if cached")
    p.add_argument("--weights", type=_weights, default=list(WEIGHTS),
                   help="passage-node weights for table-weights (default 0.01,0.05,0.1,0.3,0.5)")
    p.add_argument("--out", default=None, help="results root (default reproduce/results)")
    p.add_argument("--recompute", action="store_true", help="ignore cached per-question results")
    p.add_argument("--batch", type=int, default=64, help="questions per retrieval batch without LLM")
    p.add_argument("--batch-llm", type=int, default=4,
                   help="questions per batch when the LLM is called (results are saved after each batch)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def run(args: argparse.Namespace, argv: Sequence[str], *, llm: LLMClient | None = None, encoder=None) -> Path:
    """Run the table ``args.command``; prints and returns the markdown path. ``argv`` is the
    command line recorded in the report; ``llm`` / ``encoder`` inject clients (tests use fakes),
    by default the engine's models are used."""
    setup_logging(args.verbose)
    if args.limit is not None and args.limit <= 0:
        raise SystemExit("--limit must be positive")
    if args.dense_first < 0:
        raise SystemExit("--dense-first must be >= 0")
    if len(args.extractor) > 1 and args.command != "table-recall":
        raise SystemExit("only table-recall compares extractors; pass one --extractor")
    if args.forbid_llm:
        llm = ForbiddenLLM()
        llm.model_name = "forbidden-llm"  # the label of the reports and caches: no LLM may answer
    full = load_dataset(args.dataset)
    if args.shuffle_corpus is not None:
        docs = list(full.docs)
        random.Random(args.shuffle_corpus).shuffle(docs)
        full = dataclasses.replace(full, docs=docs)
    args.full_questions = len(full)
    ds = full.head(args.limit)
    runner = Runner(args, ds, argv, llm=llm, encoder=encoder, extractor=args.extractor[0])
    try:
        for extractor in args.extractor[1:]:
            Runner(args, ds, argv, llm=llm, encoder=runner.encoder, extractor=extractor, main=runner)
        for r in runner.runners:
            r.prepare_index()
        path = TABLES[args.command](runner)
    finally:
        for r in runner.runners:
            r.close()
    print(path)
    return path
