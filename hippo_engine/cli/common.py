"""What the commands share: the flags (the index folder, storage, embedder, LLM, ranking, ``--ray``),
their argparse types, the engine a command opens from them, and the exit status of LLM failures.

Every command module imports this one (never :mod:`.app` nor another command). Light to import
(the engine loads when a command runs)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def positive(text: str) -> int:
    """argparse type: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def storage_backend(text: str) -> str:
    """argparse type of ``--storage``: a registered storage backend's name (the registry is read only when
    the flag is given: naming no backend imports no storage code)."""
    from hippo_engine.store.registry import backend_names
    if text not in backend_names():
        raise argparse.ArgumentTypeError(f"unknown storage backend {text!r}; registered: {', '.join(backend_names())}")
    return text


# ----------------------------------------------------------------------------- flags
def shared_flags(sp, save_dir_default=None, *, creates: bool = False, llm: bool = True) -> None:
    """The flags every command shares: the index folder, storage, embedder, output; ``llm``: also
    the LLM flags (commands that call no LLM, stats and delete, leave them out); ``creates``:
    the command makes a missing index folder (index, demo) instead of refusing it."""
    sp.add_argument("--save-dir", required=save_dir_default is None, default=save_dir_default,
                    help="directory holding the index (created if missing)" if creates else
                    "directory holding an existing index (made by `hippo-engine index`)")
    sp.add_argument("--storage", type=storage_backend, default=None, metavar="BACKEND",
                    help="where the index lives: sqlite (a file in --save-dir, the default for a new index), "
                         "postgres (PostgreSQL + pgvector: an embedded server in --save-dir, or --dsn) or "
                         "falkordb (a graph database: an embedded server in --save-dir, or --falkordb); an "
                         "existing index is found whichever it uses")
    sp.add_argument("--dsn", default=None, help="a PostgreSQL server for the index (postgresql://...; "
                    "implies --storage postgres)")
    sp.add_argument("--falkordb", default=None, metavar="URL",
                    help="a FalkorDB server for the index (falkordb://[:password@]host:port[/graph], or the data "
                         "folder of an embedded server to share; implies --storage falkordb; pip install "
                         "'hippo-engine[falkordb]'); --storage falkordb alone starts an embedded one in --save-dir")
    sp.add_argument("--postgres-search", choices=("hnsw", "exact", "memory"), default=None,
                    help="how retrieval reads a PostgreSQL index: hnsw (default: top-k by the HNSW index, "
                         "vectors stay in the database), exact (exact scans in the database) or memory "
                         "(every vector loaded)")
    sp.add_argument("--embedder", default=None, help="embedding model (default: packaged all-MiniLM-L6-v2)")
    sp.add_argument("--quiet", action="store_true", help="no progress bars or announcements")
    if llm:
        llm_flags(sp)


def llm_flags(sp) -> None:
    """The LLM flags (the model, its server, key, timeout, concurrency, backend) and ``--extractor``."""
    sp.add_argument("--llm", default=None, help="LLM name: packaged default, a local dir / hub name, or a "
                    "model on --llm-base-url (default: packaged Qwen2.5-Coder-0.5B-Instruct)")
    sp.add_argument("--llm-base-url", default=None, help="OpenAI-compatible server URL, usually ending in /v1")
    sp.add_argument("--api-key", default=None, help="API key for --llm-base-url (default: env OPENAI_API_KEY)")
    sp.add_argument("--llm-timeout", type=positive_float, default=None, metavar="SECONDS",
                    help="seconds to wait for one LLM reply before giving up; a timed-out request is not "
                         "sent again (default 600, env HIPPO_LLM_TIMEOUT)")
    sp.add_argument("--llm-concurrency", type=positive, default=None, metavar="N",
                    help="LLM requests in flight at once (default 8, env HIPPO_LLM_CONCURRENCY); lower it "
                         "for a server with few slots")
    sp.add_argument("--llm-backend", choices=("auto", "transformers", "llama_cpp"), default=None,
                    help="how a local model runs: llama_cpp (GGUF, fast; pip install 'hippo-engine[fast]'), "
                         "transformers, or auto (llama_cpp when installed; the default)")
    sp.add_argument("--extractor", choices=("auto", "openie", "ner", "nary"), default=None,
                    help="how documents become facts: openie (LLM triples, the paper), ner (spaCy sentences "
                         "and entities, no LLM), nary (LLM n-ary facts), or auto (the default for a new index: "
                         "ner without --llm-base-url, openie with it); an existing index keeps its own")


def ranking_flags(sp) -> None:
    """The ranking flags of the commands that rank passages: the recognition filter, linking, dense first."""
    sp.add_argument("--no-filter", action="store_true", help="skip the LLM recognition filter")
    sp.add_argument("--filter", action="store_true",
                    help="run the LLM recognition filter (on by default, except on an extractor=ner index)")
    sp.add_argument("--linking", choices=("auto", "fact", "ner", "query", "ner_fact"), default=None,
                    help="how queries reach the graph (default auto: fact, or ner_fact on an extractor=ner index)")
    sp.add_argument("--dense-first", type=int, default=None, metavar="N",
                    help="rank fusion: the N best dense passages first, then the graph ranking (default 0)")


def _ray_address(text: str) -> str:
    """argparse type of ``--ray``: ``host:port`` (or ``ray://host:port``), ``auto`` or ``local``."""
    if text in ("auto", "local") or (":" in text and not Path(text).exists()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a Ray address (host:port, auto or local); to start Ray on "
                                     f"this machine write --ray after the corpus paths, with no address")


def ray_flag(sp) -> None:
    """``--ray [ADDRESS]`` (the index command)."""
    sp.add_argument("--ray", nargs="?", const="local", default=None, type=_ray_address, metavar="ADDRESS",
                    help="split, extract and encode on a Ray cluster (pip install 'hippo-engine[ray]'): ADDRESS "
                         "host:port of its head, or no address for RAY_ADDRESS or else a Ray started on this "
                         "machine on 127.0.0.1; this process writes the index")


# ----------------------------------------------------------------------------- the engine of a command
def _storage(args) -> dict:
    """Config overrides of --storage / --dsn (only those given)."""
    out = {}
    if getattr(args, "storage", None) is not None:
        out["storage_backend"] = args.storage
    if getattr(args, "dsn", None) is not None:
        out["storage_backend"], out["postgres_dsn"] = "postgres", args.dsn
    if getattr(args, "falkordb", None) is not None:
        out["storage_backend"], out["falkordb_server"] = "falkordb", args.falkordb
    if getattr(args, "postgres_search", None) is not None:
        out["postgres_search"] = args.postgres_search
    return out


def existing_index(args) -> None:
    """Commands that read an index refuse a folder that holds none (a typo would create it)."""
    from types import SimpleNamespace

    from hippo_engine.store.opening import index_exists
    st = {"storage_backend": "sqlite", "postgres_dsn": None, "falkordb_server": None, **_storage(args)}
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


def engine_overrides(args) -> dict:
    """``HippoRAG`` configuration overrides from a command's LLM, storage and ranking flags (only those
    given); shared by every command that opens an index (``serve`` and ``mcp`` too)."""
    overrides = {**_llm_overrides(args), **_storage(args)}
    for name in ("linking", "extractor", "dense_first"):
        if getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    if getattr(args, "no_filter", False):
        overrides["use_filter"] = False
    if getattr(args, "filter", False):
        overrides["use_filter"] = True
    return overrides


def rag_options(args) -> dict[str, Any]:
    """HippoRAG keyword arguments from the command's flags (only those given; progress bars off): what
    ``serve`` and ``mcp`` hand their workspaces."""
    return {"llm_model_name": args.llm, "embedding_model_name": args.embedder, **engine_overrides(args),
            "show_progress": False}


#: what the running command opened, closed when it ends (:func:`close_opened`)
_OPENED: list = []


def _make_rag(args, **extra):
    """The engine for a command: its flags as configuration overrides (only those given). Without
    ``--extractor`` a new index gets ``extractor="auto"`` (:mod:`hippo_engine.auto`) and an existing
    one keeps its own; closed when the command ends. (The commands look it up here when they run:
    the tests put an engine of fakes in its place.)"""
    from hippo_engine.hipporag import HippoRAG
    overrides = {**engine_overrides(args), **extra}
    rag = HippoRAG(args.save_dir, llm_model_name=getattr(args, "llm", None), embedding_model_name=args.embedder,
                   **overrides)
    _OPENED.append(rag)     # closed when the command ends (stops an embedded PostgreSQL server)
    return rag


def ray_executor(args) -> dict:
    """``{"executor": RayExecutor(...)}`` with ``--ray``, else ``{}``; the executor leaves Ray when the command ends."""
    if getattr(args, "ray", None) is None:
        return {}
    from hippo_engine.index.distributed import RayExecutor
    executor = RayExecutor(None if args.ray == "local" else args.ray)
    _OPENED.append(executor)
    return {"executor": executor}


def close_opened() -> None:
    """Close what the command opened (engines, a Ray executor), the last opened first."""
    while _OPENED:
        _OPENED.pop().close()


def llm_failures(sols) -> int:
    """Exit status 1, with the failing queries named on stderr, when any LLM call failed."""
    bad = [(i, s) for i, s in enumerate(sols) if s.errors]
    for i, s in bad[:20]:
        print(f"hippo-engine: query {i} ({s.question[:80]!r}): {s.errors[0]}", file=sys.stderr)
    if bad:
        print(f"hippo-engine: LLM calls failed for {len(bad)} of {len(sols)} queries", file=sys.stderr)
    return 1 if bad else 0


__all__ = ["close_opened", "engine_overrides", "existing_index", "llm_failures", "llm_flags", "positive",
           "positive_float", "rag_options", "ranking_flags", "ray_executor", "ray_flag", "shared_flags"]
