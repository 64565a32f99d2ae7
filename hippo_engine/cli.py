"""Command line interface: ``hippo-engine {index,delete,stats,retrieve,qa,explain,mcp,serve,demo}``."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine import __version__, cli_explain, cli_mcp, cli_serve
from hippo_engine.cli_output import print_solution as _print_solution
from hippo_engine.cli_output import qa_json
from hippo_engine.config import ConfigError
from hippo_engine.inputs import read_corpus, read_documents, read_ids, read_queries  # noqa: F401 (re-exported)
from hippo_engine.progress import cli_handler


def _positive(text: str) -> int:
    """argparse type: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    """argparse type: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _storage(args) -> dict:
    """Config overrides of --storage / --dsn (only those given)."""
    out = {}
    if getattr(args, "storage", None) is not None:
        out["storage_backend"] = args.storage
    if getattr(args, "dsn", None) is not None:
        out["storage_backend"], out["postgres_dsn"] = "postgres", args.dsn
    if getattr(args, "postgres_search", None) is not None:
        out["postgres_search"] = args.postgres_search
    return out


def _existing_index(args) -> None:
    """Commands that read an index refuse a folder that holds none (a typo would create it)."""
    from types import SimpleNamespace

    from hippo_engine.store.opening import index_exists
    st = {"storage_backend": "sqlite", "postgres_dsn": None, **_storage(args)}
    if not index_exists(Path(args.save_dir), SimpleNamespace(**st)):
        raise FileNotFoundError(f"no index in {args.save_dir} (run `hippo-engine index CORPUS --save-dir "
                                f"{args.save_dir}` first)")


def _llm_overrides(args) -> dict:
    """Config overrides of the LLM flags every command shares (only those given)."""
    out = {}
    for flag, field in (("llm_base_url", "llm_base_url"), ("llm_backend", "llm_backend"),
                        ("llm_timeout", "llm_timeout"), ("llm_concurrency", "llm_max_concurrency"),
                        ("api_key", "llm_api_key")):
        if getattr(args, flag, None) is not None:
            out[field] = getattr(args, flag)
    if getattr(args, "quiet", False):
        out["show_progress"] = False
    return out


def _make_rag(args, **extra):
    from hippo_engine.hipporag import HippoRAG
    overrides = {**_llm_overrides(args), **_storage(args), **extra}
    for name in ("linking", "extractor", "dense_first"):
        if getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    if getattr(args, "no_filter", False):
        overrides["use_filter"] = False
    if getattr(args, "filter", False):
        overrides["use_filter"] = True
    llm = getattr(args, "llm", None)
    rag = HippoRAG(args.save_dir, llm_model_name=llm, embedding_model_name=args.embedder, **overrides)
    recorded = rag.index_state.extractor
    if getattr(args, "extractor", None) is None and recorded not in (None, rag.config.extractor):
        rag.close()   # an existing index keeps the extractor it was built with
        rag = HippoRAG(args.save_dir, llm_model_name=llm, embedding_model_name=args.embedder,
                       **overrides, extractor=recorded)
    _OPENED.append(rag)     # closed when the command ends (stops an embedded PostgreSQL server)
    return rag


_OPENED: list = []


def _llm_failures(sols) -> int:
    """Exit status 1, with the failing queries named on stderr, when any LLM call failed."""
    bad = [(i, s) for i, s in enumerate(sols) if s.errors]
    for i, s in bad[:20]:
        print(f"hippo-engine: query {i} ({s.question[:80]!r}): {s.errors[0]}", file=sys.stderr)
    if bad:
        print(f"hippo-engine: LLM calls failed for {len(bad)} of {len(sols)} queries", file=sys.stderr)
    return 1 if bad else 0


def _print_metrics(name: str, metrics: dict) -> None:
    if metrics:
        print(f"{name}: " + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))


# ------------------------------------------------------------------ commands
def cmd_index(args) -> int:
    """Index a corpus file (optionally seeding OpenIE results first)."""
    docs, ids = read_documents(args.corpus)   # read before anything is created: a bad file leaves no index
    rag = _make_rag(args)
    if args.openie:
        n = rag.import_openie(args.openie)
        print(f"imported OpenIE results for {n} passages from {args.openie}")
    t = time.perf_counter()
    report = rag.index(docs, ids=ids)
    d = report.get("documents", {})
    print(f"indexed {report.get('added', 0)} new passage(s) in {time.perf_counter() - t:.1f}s "
          f"({report.get('openie_llm_passages', 0)} sent to the LLM for fact extraction); documents: "
          f"{len(d.get('added', ()))} added, {len(d.get('replaced', ()))} replaced, "
          f"{d.get('unchanged', len(docs) if not d else 0)} unchanged")
    print(json.dumps(rag.graph_stats(), indent=2))
    return 0


def cmd_delete(args) -> int:
    """Remove documents from the index: by id (``--ids``, ``--ids-file``, or the ids of a corpus
    file's records) or by text (a corpus file without ids)."""
    if sum(x is not None for x in (args.corpus, args.ids, args.ids_file)) != 1:
        raise ValueError("delete: give one of a corpus file, --ids ID [ID ...] or --ids-file FILE")
    docs, ids = (None, args.ids) if args.ids is not None else \
        (None, read_ids(args.ids_file)) if args.ids_file is not None else read_documents(args.corpus)
    _existing_index(args)
    rag = _make_rag(args)
    report = rag.delete(ids=ids) if ids is not None else rag.delete(docs)
    print(json.dumps(report, indent=2))
    print(json.dumps(rag.graph_stats(), indent=2))
    return 0


def cmd_stats(args) -> int:
    """Print graph statistics."""
    _existing_index(args)
    rag = _make_rag(args)
    print(json.dumps(rag.graph_stats(), indent=2))
    return 0


def cmd_retrieve(args) -> int:
    """Retrieve passages for a queries file (Recall@k when it has gold docs)."""
    qs, gold_docs, _ = read_queries(args.queries)
    _existing_index(args)
    rag = _make_rag(args)
    if args.limit:
        qs, gold_docs = qs[:args.limit], (gold_docs[:args.limit] if gold_docs else gold_docs)
    fn = rag.retrieve_dpr if args.dense else rag.retrieve
    args.top_k = args.top_k or 5
    out = fn(qs, num_to_retrieve=max(args.top_k, 200 if gold_docs else args.top_k), gold_docs=gold_docs)
    sols, metrics = out if gold_docs is not None else (out, {})
    for s in sols:
        _print_solution(s, args.top_k)
    _print_metrics("\nretrieval", metrics)
    if args.output:
        Path(args.output).write_text(json.dumps({"metrics": metrics, "solutions": [s.to_dict() for s in sols]},
                                                ensure_ascii=False, indent=1))
    return _llm_failures(sols)


def cmd_qa(args) -> int:
    """Retrieve and answer a queries file (EM/F1 when it has gold answers)."""
    qs, gold_docs, gold_answers = read_queries(args.queries)
    _existing_index(args)
    rag = _make_rag(args)
    if args.limit:
        qs = qs[:args.limit]
        gold_docs = gold_docs[:args.limit] if gold_docs else None
        gold_answers = gold_answers[:args.limit] if gold_answers else None
    from hippo_engine.config import QueryParam
    param = QueryParam(qa_top_k=args.top_k)       # None: the config's qa_top_k (5)
    out = rag.rag_qa(qs, gold_docs=gold_docs, gold_answers=gold_answers, dense=args.dense, param=param)
    sols = out[0]
    if args.json:                                  # everything, as JSON, instead of the text
        print(qa_json(sols, out[3:]))
    for s in sols if not args.json else ():
        _print_solution(s, args.top_k or rag.config.qa_top_k, with_answer=True)
    if len(out) == 5 and not args.json:
        _print_metrics("\nretrieval", out[3])
        _print_metrics("qa", out[4])
    if args.output:
        Path(args.output).write_text(qa_json(sols, out[3:]))
    return _llm_failures(sols)


def cmd_demo(args) -> int:
    """Index the bundled sample corpus with the offline defaults and answer its questions."""
    from importlib import resources

    from hippo_engine.hipporag import HippoRAG
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    by_title = {d["title"]: f"{d['title']}\n{d['text']}" for d in data["corpus"]}
    qs = [q["question"] for q in data["questions"]]
    gold_docs = [[by_title[t] for t in q["supporting_titles"]] for q in data["questions"]]
    gold_answers = [q["answers"] for q in data["questions"]]
    save_dir = Path(args.save_dir)
    print(f"hippo-engine demo: indexing {len(docs)} sample passages into {save_dir} "
          f"(offline models; the first run converts the packaged LLM once)")
    rag = HippoRAG(save_dir, llm_model_name=args.llm, embedding_model_name=args.embedder, **_llm_overrides(args),
                   **_storage(args))
    _OPENED.append(rag)
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
    t = time.perf_counter()
    sols, _, _, rmetrics, qmetrics = rag.rag_qa(qs, gold_docs=gold_docs, gold_answers=gold_answers)
    for s in sols:
        _print_solution(s, 3, with_answer=True)
    print()
    _print_metrics("retrieval", {k: v for k, v in rmetrics.items() if k in ("Recall@1", "Recall@2", "Recall@5")})
    _print_metrics("qa", qmetrics)
    print(f"answered {len(qs)} questions in {time.perf_counter() - t:.1f}s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hippo-engine``."""
    p = argparse.ArgumentParser(prog="hippo-engine", description=(
        "HippoRAG 2-style long-term memory: index documents into a passage-entity graph, retrieve "
        "with Personalized PageRank, answer with an LLM. Runs offline with packaged default models."))
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details (INFO level)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp, save_dir_default=None, *, creates: bool = False, llm: bool = True):
        """The flags every command shares: the index folder, storage, embedder, output; ``llm``: also
        the LLM flags (commands that call no LLM, stats and delete, leave them out); ``creates``:
        the command makes a missing index folder (index, demo) instead of refusing it."""
        sp.add_argument("--save-dir", required=save_dir_default is None, default=save_dir_default,
                        help="directory holding the index (created if missing)" if creates else
                        "directory holding an existing index (made by `hippo-engine index`)")
        sp.add_argument("--storage", choices=("sqlite", "postgres"), default=None,
                        help="where the index lives: sqlite (a file in --save-dir, the default for a new index) or "
                             "postgres (PostgreSQL + pgvector: an embedded server in --save-dir, or --dsn); an "
                             "existing index is found whichever it uses")
        sp.add_argument("--dsn", default=None, help="a PostgreSQL server for the index (postgresql://...; "
                        "implies --storage postgres)")
        sp.add_argument("--postgres-search", choices=("hnsw", "exact", "memory"), default=None,
                        help="how retrieval reads a PostgreSQL index: hnsw (default: top-k by the HNSW index, "
                             "vectors stay in the database), exact (exact scans in the database) or memory "
                             "(every vector loaded)")
        sp.add_argument("--embedder", default=None, help="embedding model (default: packaged all-MiniLM-L6-v2)")
        sp.add_argument("--quiet", action="store_true", help="no progress bars or announcements")
        if llm:
            llm_flags(sp)

    def llm_flags(sp):
        sp.add_argument("--llm", default=None, help="LLM name: packaged default, a local dir / hub name, or a "
                        "model on --llm-base-url (default: packaged Qwen2.5-Coder-0.5B-Instruct)")
        sp.add_argument("--llm-base-url", default=None, help="OpenAI-compatible server URL, usually ending in /v1")
        sp.add_argument("--api-key", default=None, help="API key for --llm-base-url (default: env OPENAI_API_KEY)")
        sp.add_argument("--llm-timeout", type=_positive_float, default=None, metavar="SECONDS",
                        help="seconds to wait for one LLM reply before giving up; a timed-out request is not "
                             "sent again (default 600, env HIPPO_LLM_TIMEOUT)")
        sp.add_argument("--llm-concurrency", type=_positive, default=None, metavar="N",
                        help="LLM requests in flight at once (default 8, env HIPPO_LLM_CONCURRENCY); lower it "
                             "for a server with few slots")
        sp.add_argument("--llm-backend", choices=("auto", "transformers", "llama_cpp"), default=None,
                        help="how a local model runs: llama_cpp (GGUF, fast; pip install 'hippo-engine[fast]'), "
                             "transformers, or auto (llama_cpp when installed; the default)")
        sp.add_argument("--extractor", choices=("openie", "ner", "nary"), default=None,
                        help="how documents become facts: openie (LLM triples, the paper; default for a new "
                             "index), ner (spaCy sentences and entities, no LLM), nary (LLM n-ary facts); an "
                             "existing index keeps its own")

    def ranking_flags(sp):
        sp.add_argument("--no-filter", action="store_true", help="skip the LLM recognition filter")
        sp.add_argument("--filter", action="store_true",
                        help="run the LLM recognition filter (on by default, except on an extractor=ner index)")
        sp.add_argument("--linking", choices=("auto", "fact", "ner", "query", "ner_fact"), default=None,
                        help="how queries reach the graph (default auto: fact, or ner_fact on an extractor=ner index)")
        sp.add_argument("--dense-first", type=int, default=None, metavar="N",
                        help="rank fusion: the N best dense passages first, then the graph ranking (default 0)")

    sp = sub.add_parser("index", help="add documents to an index")
    sp.add_argument("corpus", help="JSON or JSONL of strings or {title,text} records; records with an \"id\" "
                    "are indexed under it (a known id with another text replaces that document)")
    sp.add_argument("--openie", default=None, help="seed OpenIE results from this file (reference or v1 format); "
                    "passages it covers make no LLM call")
    common(sp, creates=True)
    sp.set_defaults(func=cmd_index)

    sp = sub.add_parser("delete", help="remove documents from an index")
    sp.add_argument("corpus", nargs="?", default=None, help="JSON or JSONL of the documents to remove (by "
                    "their \"id\"s if the records have them, else by text)")
    sp.add_argument("--ids", nargs="+", default=None, metavar="ID", help="ids of the documents to remove")
    sp.add_argument("--ids-file", default=None, metavar="FILE", help="a file of document ids to remove: one per "
                    "line, or a JSON/JSONL list of ids or {id, ...} records")
    common(sp, llm=False)
    sp.set_defaults(func=cmd_delete)

    sp = sub.add_parser("stats", help="print graph statistics")
    common(sp, llm=False)
    sp.set_defaults(func=cmd_stats)

    for name, func, helptext in (("retrieve", cmd_retrieve, "retrieve passages for queries"),
                                 ("qa", cmd_qa, "retrieve, then answer with the reader LLM")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("--queries", required=True, help="JSON/JSONL of strings or {question, ...} records; "
                        "gold docs/answers in the records turn on Recall@k / EM / F1")
        sp.add_argument("--top-k", type=_positive, default=None,
                        help="passages per query to print (default 5); for qa also the passages the reader reads")
        sp.add_argument("--limit", type=int, default=None, help="only the first N queries")
        sp.add_argument("--dense", action="store_true", help="dense retrieval baseline instead of HippoRAG 2")
        ranking_flags(sp)
        sp.add_argument("--output", default=None, help="write solutions (with passage_ids and doc_ids) and "
                        "metrics as JSON here")
        if name == "qa":
            sp.add_argument("--json", action="store_true", help="print every solution (answer, citations, "
                            "passages, facts) and the metrics as JSON instead of the text")
        common(sp)
        sp.set_defaults(func=func)

    cli_explain.add_parser(sub, common, ranking_flags, _positive)
    cli_mcp.add_parser(sub, common, ranking_flags, _positive_float)
    cli_serve.add_parser(sub, common, ranking_flags, _positive)
    sp = sub.add_parser("demo", help="index the bundled sample corpus and answer its questions, offline")
    common(sp, save_dir_default="outputs/demo", creates=True)
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 on a usage or input error)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    finally:
        while _OPENED:
            _OPENED.pop().close()


def _run(args) -> int:
    try:
        with cli_handler(quiet=getattr(args, "quiet", False)):
            return args.func(args)
    except BrokenPipeError as e:   # the reader of our output is gone (`| head`, or Ctrl-C also ended `| tee`)
        _silence_output()
        return 130 if _caused_by_interrupt(e) else 141
    except (OSError, ValueError, TypeError, ConfigError, RuntimeError) as e:   # library errors say what and where
        _say(f"hippo-engine: error: {e}")
        return 2
    except KeyboardInterrupt:
        _say("hippo-engine: interrupted (an index is left as it was before the interrupted write)")
        return 130


def _say(message: str) -> None:
    """Print to stderr; a pipe whose reader is gone is not an error of its own."""
    try:
        print(message, file=sys.stderr, flush=True)
    except BrokenPipeError:
        _silence_output()


def _silence_output() -> None:
    """Point stdout and stderr at /dev/null, so that the interpreter's own flush at exit does not
    fail again on the broken pipe (Python's documented way out of SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass


def _caused_by_interrupt(e: BaseException | None) -> bool:
    """Whether a Ctrl-C is in ``e``'s chain (a progress bar closing on a dead pipe while the
    interrupt unwinds raises a BrokenPipeError in its place)."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__context__, seen + 1
    return False


if __name__ == "__main__":
    sys.exit(main())
