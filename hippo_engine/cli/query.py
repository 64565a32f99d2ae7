"""``hippo-engine retrieve`` and ``hippo-engine qa``: questions inline (``-q "..."``, repeatable) or
from a file, in any retrieval mode (``--mode``), optionally within a metadata filter (``--where``);
each passage printed with its rank, score, title, document id and a one-line snippet, or everything
as JSON on stdout (``--json``). Light to import (the engine loads when a command runs)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from hippo_engine.cli import common
from hippo_engine.cli.inputs import read_queries
from hippo_engine.cli.output import print_metrics, print_solution, qa_json, retrieve_json
from hippo_engine.modes import mode_names


def where_filter(text: str) -> dict:
    """argparse type: a metadata filter as JSON (checked by the engine's filter parser)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}, column {e.colno}): {text!r}") from None
    from hippo_engine.store.metadata import parse_where
    try:
        parse_where(value)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


class QuestionAction(argparse.Action):
    """``-q`` (repeatable): the questions in the order given; an empty one is a usage error of the
    command, naming which ``-q`` it is."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        if not str(values).strip():
            parser.error(f"question {len(items) + 1} ({option_string} {values!r}) is empty; give the question's text")
        items.append(values)
        setattr(namespace, self.dest, items)


def questions(args) -> tuple[list[str], list | None, list | None]:
    """The command's questions: ``--queries FILE`` (with its gold documents and answers) and/or
    ``-q`` questions (no gold), the first ``--limit``."""
    if not args.queries and not args.query:
        raise ValueError(f"{args.command}: give a question with -q \"...\" (repeatable) or a file with --queries")
    qs, gold_docs, gold_answers = read_queries(args.queries) if args.queries else ([], None, None)
    if args.query:
        qs, gold_docs, gold_answers = qs + list(args.query), None, None   # gold only for a file's questions alone
    if args.limit:
        qs = qs[:args.limit]
        gold_docs = gold_docs[:args.limit] if gold_docs else None
        gold_answers = gold_answers[:args.limit] if gold_answers else None
    return qs, gold_docs, gold_answers


def check_gold(rag, gold_docs: list | None, path: str | None) -> None:
    """Refuse gold entries of the questions file ``path`` that match nothing in ``rag``'s index: neither a
    document id, nor a passage's text, nor a document's text (scored, each would count as never found)."""
    if not gold_docs:
        return
    from hippo_engine.ids import chunk_id, document_id
    state = rag.index_state
    entries = list(dict.fromkeys(g for gold in gold_docs for g in gold))
    stored = state.stored_documents(entries + [document_id(g) for g in entries])[0]
    unknown = {g for g in entries if g not in stored and document_id(g) not in stored
               and not state.has_passage(chunk_id(g))}
    if not unknown:
        return
    bad = [(n, [g for g in gold if g in unknown]) for n, gold in enumerate(gold_docs, 1)]
    bad = [(n, gs) for n, gs in bad if gs]
    shown = "; ".join(f"question {n}: " + ", ".join(repr(_short(g)) for g in gs[:3]) for n, gs in bad[:5])
    more = f" (and {len(bad) - 5} more questions)" if len(bad) > 5 else ""
    raise ValueError(f"{path}: {len(unknown)} gold document(s) match nothing in the index in {rag.save_dir} "
                     f"({shown}{more}); a gold document is a document id or the text of a document or passage "
                     f"in the index")


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _mode(args) -> str | None:
    if args.dense and args.mode not in (None, "naive"):
        raise ValueError(f"--dense is --mode naive; it cannot go with --mode {args.mode}")
    return "naive" if args.dense else args.mode


def _first(sol, k: int):
    """``sol`` cut to its first ``k`` passages (a prefix of its ranking)."""
    if len(sol.docs) <= k:
        return sol
    return dataclasses.replace(sol, docs=list(sol.docs)[:k], doc_scores=list(sol.doc_scores)[:k],
                               passage_ids=list(sol.passage_ids)[:k], doc_ids=list(sol.doc_ids)[:k],
                               explanations=list(sol.explanations)[:k])


def load_engine(rag) -> None:
    """Load now what a retrieve call would load on its first use: the encoder, the graph of the index
    (its ``Retriever``) and, where query NER runs on spaCy (an ``extractor=ner`` index), the spaCy
    pipeline; so that ``-v`` times the load apart from the retrieval (rankings are the same either way)."""
    from hippo_engine.retrieve.facts.query_ner import resolve_source
    rag.encoder.encode(["warm"])   # the model's first forward sets up its kernels: part of the load
    _ = rag.retriever   # the graph of the index version, made on first use
    if resolve_source(rag.config.query_ner, rag.index_state.extractor) == "spacy":
        rag.ner.pipeline()


def timing_line(n: int, seconds: float, load_s: float) -> str:
    """``-v``'s line on stderr: the retrieve call's wall time, per query, and the engine's load apart."""
    per = seconds * 1000 / max(n, 1)
    return (f"retrieved {n} quer{'y' if n == 1 else 'ies'} in {seconds * 1000:.1f} ms ({per:.1f} ms per query; "
            f"engine load {load_s:.1f} s)")


def cmd_retrieve(args) -> int:
    """Rank passages for the questions (Recall@k when a queries file has gold documents); with ``-v``
    the wall time of the retrieval (and of the engine's load, apart) on stderr."""
    qs, gold_docs, _ = questions(args)
    verbose = getattr(args, "verbose", False)
    start = time.perf_counter()
    common.existing_index(args)
    rag = common._make_rag(args)
    check_gold(rag, gold_docs, args.queries)
    top_k = args.top_k or 5
    if verbose:
        load_engine(rag)
    loaded = time.perf_counter()
    out = rag.retrieve(qs, max(top_k, 200 if gold_docs else top_k), gold_docs=gold_docs, mode=_mode(args),
                       where=args.where)
    if verbose:
        print(timing_line(len(qs), time.perf_counter() - loaded, loaded - start), file=sys.stderr, flush=True)
    sols, metrics = out if gold_docs is not None else (out, {})
    sols = [_first(s, top_k) for s in sols]      # Recall@k read up to 200; the output is the top k asked for
    if args.json:
        print(retrieve_json(sols, metrics))
    else:
        for s in sols:
            print_solution(s, top_k)
        print_metrics("\nretrieval", metrics)
    if args.output:
        Path(args.output).write_text(retrieve_json(sols, metrics), encoding="utf-8")
    return common.llm_failures(sols)


def cmd_qa(args) -> int:
    """Retrieve and answer the questions (EM/F1 when a queries file has gold answers)."""
    from hippo_engine.config import QueryParam
    qs, gold_docs, gold_answers = questions(args)
    common.existing_index(args)
    rag = common._make_rag(args)
    check_gold(rag, gold_docs, args.queries)
    param = QueryParam(qa_top_k=args.top_k)       # None: the config's qa_top_k (5)
    mode = _mode(args)
    out = rag.rag_qa(qs, gold_docs=gold_docs, gold_answers=gold_answers, dense=mode == "naive",
                     mode=None if mode == "naive" else mode, param=param, where=args.where)
    sols = out[0]
    if args.json:                                  # everything, as JSON, instead of the text
        print(qa_json(sols, out[3:]))
    else:
        for s in sols:
            print_solution(s, args.top_k or rag.config.qa_top_k, with_answer=True)
        if len(out) == 5:
            print_metrics("\nretrieval", out[3])
            print_metrics("qa", out[4])
    if args.output:
        Path(args.output).write_text(qa_json(sols, out[3:]), encoding="utf-8")
    return common.llm_failures(sols)


def add_parsers(sub: Any) -> None:
    """Register ``retrieve`` and ``qa``."""
    for name, func, helptext in (("retrieve", cmd_retrieve, "rank passages for questions"),
                                 ("qa", cmd_qa, "retrieve, then answer with the reader LLM")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("-q", "--query", action=QuestionAction, default=None, metavar="QUESTION",
                        help="a question (repeatable); with or instead of --queries")
        sp.add_argument("--queries", default=None, metavar="FILE",
                        help="questions from a file: .txt (one per line), or JSON/JSONL of strings or {question, "
                             "...} records; gold docs/answers in the records turn on Recall@k / EM / F1")
        sp.add_argument("--top-k", type=common.positive, default=None,
                        help="passages per question to print (default 5); for qa also the passages the reader reads")
        sp.add_argument("--limit", type=common.positive, default=None, help="only the first N questions")
        sp.add_argument("--mode", choices=mode_names(), default=None,
                        help="how passages are ranked: hipporag2 (default: the graph), naive (dense retrieval), "
                             "or another mode (hi_*: HiRAG communities; see the README)")
        sp.add_argument("--dense", action="store_true", help="dense retrieval baseline (the same as --mode naive)")
        sp.add_argument("--where", type=where_filter, default=None, metavar="JSON",
                        help="rank only passages of documents whose metadata match this filter, e.g. "
                             "'{\"user\": \"alice\"}' or '{\"year\": {\"$gte\": 2020}}' (operators $eq $ne $in "
                             "$nin $gt $gte $lt $lte, $and/$or lists)")
        common.ranking_flags(sp)
        sp.add_argument("--json", action="store_true",
                        help="print every solution (passages with ids and scores, facts" +
                             (", answer, citations" if name == "qa" else "") + ") and the metrics as JSON on "
                             "stdout instead of the text")
        sp.add_argument("--output", default=None, metavar="FILE", help="also write that JSON to this file")
        if name == "retrieve":    # as `hippo-engine -v retrieve` (SUPPRESS: the top-level -v is kept)
            sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help="log progress details (INFO level) and print the retrieval's wall time on "
                                 "stderr, the engine's load apart")
        common.shared_flags(sp)
        sp.set_defaults(func=func)


__all__ = ["QuestionAction", "add_parsers", "check_gold", "cmd_qa", "cmd_retrieve", "load_engine", "questions",
           "timing_line", "where_filter"]
