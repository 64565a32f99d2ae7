"""``hippo-engine index``, ``delete``, ``stats`` and ``demo``: documents in and out of an index.

``index`` reads folders of ``.txt``/``.md`` files, text files, JSON, JSONL and CSV (see
:mod:`hippo_engine.cli.inputs`), all before anything is created, so a bad file leaves no index.
Light to import (the engine loads when a command runs)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hippo_engine.cli import common
from hippo_engine.cli.inputs import Corpus, read_corpus_paths, read_documents, read_ids
from hippo_engine.cli.output import print_metrics, print_solution
from hippo_engine.datatypes import passage_text


def metadata_object(text: str) -> dict:
    """argparse type: a JSON object (metadata for every document of the run)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}, column {e.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, e.g. '{{\"user\": \"alice\"}}', got {text!r}")
    return value


def check_corpus_metadata(corpus: Corpus) -> None:
    """Each document's metadata as the engine will check it, the error naming its file and line/item."""
    if corpus.metadata is None:
        return
    from hippo_engine.store.metadata import check_metadata
    for meta, source in zip(corpus.metadata, corpus.sources, strict=True):
        try:
            check_metadata([meta], 1, "index")
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: {str(e).replace('index(): metadata item 0', 'metadata')}") from None


def cmd_index(args) -> int:
    """Index documents (optionally seeding OpenIE results first)."""
    corpus = read_corpus_paths(args.corpus, args.metadata)   # read before anything is created
    check_corpus_metadata(corpus)
    for path in corpus.skipped[:20]:
        print(f"hippo-engine: skipping empty file {path}", file=sys.stderr)
    if not corpus.docs:
        raise ValueError(f"no documents to index in {', '.join(map(str, args.corpus))}")
    if args.openie and args.extractor is None:
        args.extractor = "openie"         # OpenIE results are facts for the openie extractor
    rag = common._make_rag(args, **common.ray_executor(args))
    if args.openie:
        n = rag.import_openie(args.openie)
        print(f"imported OpenIE results for {n} passages from {args.openie}")
    t = time.perf_counter()
    report = rag.index(corpus.docs, ids=corpus.ids, metadata=corpus.metadata)
    d = report.get("documents", {})
    stats = rag.graph_stats()
    print(f"indexed {report.get('added', 0)} new passage(s) in {time.perf_counter() - t:.1f}s (extractor="
          f"{stats['extractor']}: {report.get('openie_llm_passages', 0)} sent to the LLM for fact extraction); "
          f"documents: {len(d.get('added', ()))} added, {len(d.get('replaced', ()))} replaced, "
          f"{d.get('unchanged', len(corpus.docs) if not d else 0)} unchanged")
    print(json.dumps(stats, indent=2))
    if "ray" in report:
        print(json.dumps({"ray": report["ray"]}, indent=2))
    return 0


def cmd_delete(args) -> int:
    """Remove documents from the index: by id (``--ids``, ``--ids-file``, or the ids of a corpus
    file's records) or by text (a corpus file without ids)."""
    if sum(x is not None for x in (args.corpus, args.ids, args.ids_file)) != 1:
        raise ValueError("delete: give one of a corpus file, --ids ID [ID ...] or --ids-file FILE")
    docs, ids = (None, args.ids) if args.ids is not None else \
        (None, read_ids(args.ids_file)) if args.ids_file is not None else read_documents(args.corpus)
    common.existing_index(args)
    rag = common._make_rag(args)
    report = rag.delete(ids=ids) if ids is not None else rag.delete(docs)
    print(json.dumps(report, indent=2))
    print(json.dumps(rag.graph_stats(), indent=2))
    return 0


def cmd_stats(args) -> int:
    """Print graph statistics, the index's extractor and how many documents it holds (the one document list
    every door shows)."""
    common.existing_index(args)
    rag = common._make_rag(args)
    print(json.dumps({**rag.graph_stats(), "documents": rag.documents(limit=1)["total"]}, indent=2))
    return 0


def cmd_demo(args) -> int:
    """Index the bundled sample corpus with the defaults and answer its questions with the local reader."""
    from importlib import resources

    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [passage_text(d["title"], d["text"]) for d in data["corpus"]]
    by_title = dict(zip((d["title"] for d in data["corpus"]), docs, strict=True))
    qs = [q["question"] for q in data["questions"]]
    gold_docs = [[by_title[t] for t in q["supporting_titles"]] for q in data["questions"]]
    gold_answers = [q["answers"] for q in data["questions"]]
    rag = common._make_rag(args)
    extractor = rag.graph_stats()["extractor"]
    how = ("spaCy entities and all-MiniLM-L6-v2, no LLM" if extractor == "ner" else f"LLM {extractor} facts")
    print(f"hippo-engine demo: indexing {len(docs)} sample passages into {args.save_dir} ({how})")
    t = time.perf_counter()
    from hippo_engine.index.openie import OpenIEError
    for attempt in (1, 2):
        try:
            rag.index(docs)
            break
        except OpenIEError as e:  # the other passages are indexed; a rerun retries only the failed
            print(f"warning: {e}", file=sys.stderr)
            if attempt == 2:
                print("warning: answering with the passages that were indexed", file=sys.stderr)
    print(f"indexed in {time.perf_counter() - t:.1f}s: {json.dumps(rag.graph_stats())}")
    print(f"answering {len(qs)} questions with the reader LLM {rag.llm_model_name!r} (the first run of the "
          f"packaged model prepares it once)")
    t = time.perf_counter()
    sols, _, _, rmetrics, qmetrics = rag.rag_qa(qs, gold_docs=gold_docs, gold_answers=gold_answers)
    for s in sols:
        print_solution(s, 3, with_answer=True)
    print()
    print_metrics("retrieval", {k: v for k, v in rmetrics.items() if k in ("Recall@1", "Recall@2", "Recall@5")})
    print_metrics("qa", qmetrics)
    print(f"answered {len(qs)} questions in {time.perf_counter() - t:.1f}s")
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``index``, ``delete``, ``stats`` and ``demo``."""
    sp = sub.add_parser("index", help="add documents to an index")
    sp.add_argument("corpus", nargs="+", type=Path, metavar="PATH",
                    help="what to index: a folder of .txt/.md files (one document each, id = path in the folder), "
                         "a .txt/.md file, JSON or JSONL of strings or {title, text[, id][, metadata]} records, or "
                         "CSV with a text column (title, id, metadata and other columns optional); a known id with "
                         "another text replaces that document")
    sp.add_argument("--metadata", type=metadata_object, default=None, metavar="JSON",
                    help="metadata for every document of this run, e.g. '{\"user\": \"alice\"}' (a record's own "
                         "metadata wins); queries select by it with --where")
    sp.add_argument("--openie", default=None, help="seed OpenIE results from this file (reference or v1 format); "
                    "passages it covers make no LLM call (implies --extractor openie)")
    common.shared_flags(sp, creates=True)
    common.ray_flag(sp)
    sp.set_defaults(func=cmd_index)

    sp = sub.add_parser("delete", help="remove documents from an index")
    sp.add_argument("corpus", nargs="?", default=None, help="a corpus file of the documents to remove (by "
                    "their ids if they have them, else by text)")
    sp.add_argument("--ids", nargs="+", default=None, metavar="ID", help="ids of the documents to remove")
    sp.add_argument("--ids-file", default=None, metavar="FILE", help="a file of document ids to remove: one per "
                    "line, or a JSON/JSONL list of ids or {id, ...} records")
    common.shared_flags(sp, llm=False)
    sp.set_defaults(func=cmd_delete)

    sp = sub.add_parser("stats", help="print graph statistics, the index's extractor and its document count")
    common.shared_flags(sp, llm=False)
    sp.set_defaults(func=cmd_stats)

    sp = sub.add_parser("demo", help="index the bundled sample corpus and answer its questions, offline")
    common.shared_flags(sp, save_dir_default="outputs/demo", creates=True)
    sp.set_defaults(func=cmd_demo)


__all__ = ["add_parsers", "check_corpus_metadata", "cmd_delete", "cmd_demo", "cmd_index", "cmd_stats",
           "metadata_object"]
