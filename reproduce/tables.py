"""Regenerate the HippoRAG 2 paper's tables, one command per table.

    python -m reproduce table-recall    --dataset DIR_OR_NAME   # passage Recall@2/@5, dense vs HippoRAG 2 (Tables 3, 9)
    python -m reproduce table-ablations --dataset DIR_OR_NAME   # NER-to-node, query-to-node, no passage nodes, no filter (Table 4)
    python -m reproduce table-weights   --dataset DIR_OR_NAME   # passage-node weight sweep 0.01 ... 0.5 (Table 5)
    python -m reproduce table-qa        --dataset DIR_OR_NAME   # QA EM/F1, dense vs HippoRAG 2, same reader (Table 2)
    python -m reproduce table-graph     --dataset DIR_OR_NAME   # graph statistics and indexing cost (Tables 10, 12)

Each command writes ``reproduce/results/<dataset>/<table>.md`` (``<table>-no-filter.md`` with
``--no-filter``, ``...-firstN.md`` with ``--limit N``): our figures beside the paper's (spec section 5; "n/a" where the paper has
none), the models, the exact command, the git commit, the wall time and the LLM tokens spent.
Recall tables also get a PNG of the Recall@k curves next to the markdown.

Resumable and cached:
    * one index per dataset and embedder in ``--save-dir`` (default
      ``outputs/reproduce/<dataset>/<embedder>``), built once and reused by every table and every
      configuration: ablations and sweeps are retrieval-time settings, so each configuration is
      ``HippoRAG(same_dir, **overrides)`` on the same index;
    * every LLM reply is cached by the engine in ``save_dir/llm_cache.sqlite``;
    * per-question results are appended to ``save_dir/reproduce_runs/*.jsonl`` as they are
      computed, so a rerun after a crash (or another table needing the same configuration)
      continues where it stopped. ``--recompute`` ignores them.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hippo_engine import HippoConfig, HippoRAG
from hippo_engine.evaluation.datasets import Dataset, default_data_root, load_dataset
from hippo_engine.evaluation.metrics import DEFAULT_RECALL_KS, qa_metrics_per_query
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.text import mdhash_id

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# ----------------------------------------------------------------------------- paper figures
#: Spec section 5. Llama-3.3-70B-Instruct (OpenIE, filter, reader) and NV-Embed-v2 (7B).
PAPER_SETUP = "Llama-3.3-70B-Instruct for OpenIE, filter and reader; NV-Embed-v2 embedder"
PAPER_COLUMNS = ("NQ", "PopQA", "MuSiQue", "2Wiki", "HotpotQA")
PAPER_RECALL = {  # (Recall@2, Recall@5)
    "dense": {"NQ": (45.3, 75.4), "PopQA": (45.3, 51.0), "MuSiQue": (52.7, 69.7), "2Wiki": (67.1, 76.5),
              "HotpotQA": (84.1, 94.5)},
    "hipporag2": {"NQ": (45.6, 78.0), "PopQA": (43.9, 51.7), "MuSiQue": (56.1, 74.7), "2Wiki": (76.2, 90.4),
                  "HotpotQA": (83.5, 96.3)},
}
PAPER_ABLATION_R5 = {  # Recall@5; the paper reports MuSiQue, 2Wiki and HotpotQA only
    "full": {"MuSiQue": 74.7, "2Wiki": 90.4, "HotpotQA": 96.3},
    "ner": {"MuSiQue": 53.8, "2Wiki": 91.2, "HotpotQA": 78.8},
    "query": {"MuSiQue": 44.9, "2Wiki": 65.5, "HotpotQA": 68.3},
    "no_passage": {"MuSiQue": 63.7, "2Wiki": 90.3, "HotpotQA": 88.9},
    "no_filter": {"MuSiQue": 73.0, "2Wiki": 90.7, "HotpotQA": 95.4},
}
PAPER_OTHER_DENSE_MUSIQUE_R5 = (("GTE-Qwen2-7B", 63.6, 68.8), ("GritLM-7B", 66.0, 71.6), ("NV-Embed-v2", 69.7, 74.7))
PAPER_QA_F1 = {
    "dense": {"NQ": 61.9, "PopQA": 55.7, "MuSiQue": 45.7, "2Wiki": 61.5, "HotpotQA": 75.3},
    "hipporag2": {"NQ": 63.3, "PopQA": 56.2, "MuSiQue": 48.6, "2Wiki": 71.0, "HotpotQA": 75.5},
}
PAPER_GRAPH = {"MuSiQue": {"entity_nodes": 85_288, "passage_nodes": 11_656, "fact_edges": 140_830,
                           "synonymy_edges": 1_125_951, "context_edges": 132_586}}
PAPER_COST = {"MuSiQue": {"indexing_min": 99.5, "query_s": 1.2}}
#: Official names of the paper's question sets; other names (e.g. ``musique_train``) are
#: compared with the same paper column but flagged as a different question set.
PAPER_CANONICAL = {"NQ": "nq_rear", "PopQA": "popqa", "MuSiQue": "musique", "2Wiki": "2wikimultihopqa",
                   "HotpotQA": "hotpotqa"}
WEIGHTS = (0.01, 0.05, 0.1, 0.3, 0.5)


def paper_column(dataset_name: str) -> str | None:
    """The paper's column for a dataset name (``musique_train`` -> ``MuSiQue``), or ``None``."""
    n = dataset_name.lower()
    for prefix, col in (("musique", "MuSiQue"), ("2wiki", "2Wiki"), ("hotpotqa", "HotpotQA"),
                        ("nq", "NQ"), ("popqa", "PopQA")):
        if n.startswith(prefix):
            return col
    return None


def _fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}"


# ----------------------------------------------------------------------------- LLM meter
class MeteredLLM(LLMClient):
    """Wraps the LLM the tables use: creates it on first use (so tables that need no LLM never
    load one) and counts calls, cache hits and tokens. A reply whose ``cached`` flag is set
    (the engine's SQLite cache) counts as served from the cache, not as tokens spent."""

    def __init__(self, factory: Callable[[], LLMClient], model_name: str):
        self._factory = factory
        self._inner: LLMClient | None = None
        self.model_name = model_name
        self._lock = threading.Lock()
        self.counts = {"calls": 0, "cache_hits": 0, "errors": 0, "prompt_tokens": 0, "completion_tokens": 0,
                       "cached_prompt_tokens": 0, "cached_completion_tokens": 0}

    @property
    def loaded(self) -> bool:
        """Whether the underlying LLM has been created."""
        return self._inner is not None

    @property
    def inner(self) -> LLMClient:
        """The wrapped client, created on first access."""
        with self._lock:
            if self._inner is None:
                logger.info("loading LLM %s", self.model_name)
                try:
                    self._inner = self._factory()
                except (ImportError, OSError) as e:
                    raise RuntimeError(f"could not create the LLM {self.model_name!r} needed by this table: {e}. "
                                       "Pass --llm NAME (with --llm-base-url for a server), or run the table "
                                       "with --no-filter where that applies.") from e
            return self._inner

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return getattr(self.inner, "max_concurrency", 1)

    def generation_params(self, **kw) -> dict:
        return self.inner.generation_params(**kw)

    def _count(self, res: Any) -> None:
        with self._lock:
            c = self.counts
            if isinstance(res, LLMResponse):
                c["calls"] += 1
                if res.cached:
                    c["cache_hits"] += 1
                    c["cached_prompt_tokens"] += int(res.prompt_tokens or 0)
                    c["cached_completion_tokens"] += int(res.completion_tokens or 0)
                else:
                    c["prompt_tokens"] += int(res.prompt_tokens or 0)
                    c["completion_tokens"] += int(res.completion_tokens or 0)
            else:
                c["errors"] += 1

    def generate(self, messages, *, max_new_tokens=None, temperature=None) -> LLMResponse:
        try:
            res = self.inner.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        except LLMError as e:
            self._count(e)
            raise
        self._count(res)
        return res

    def generate_many(self, batch, *, max_new_tokens=None, temperature=None, show_progress=False, desc="LLM"):
        out = self.inner.generate_many(batch, max_new_tokens=max_new_tokens, temperature=temperature,
                                       show_progress=show_progress, desc=desc)
        for res in out:
            self._count(res)
        return out

    def snapshot(self) -> dict:
        """A copy of the counters."""
        with self._lock:
            return dict(self.counts)


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def _tokens_line(c: dict) -> str:
    spent = c.get("prompt_tokens", 0) + c.get("completion_tokens", 0)
    new_calls = c.get("calls", 0) - c.get("cache_hits", 0)
    line = (f"{spent:,.0f} tokens spent ({c.get('prompt_tokens', 0):,.0f} prompt + "
            f"{c.get('completion_tokens', 0):,.0f} completion) in {new_calls:,.0f} new call(s)")
    if c.get("cache_hits"):
        cached = c.get("cached_prompt_tokens", 0) + c.get("cached_completion_tokens", 0)
        line += f"; {c['cache_hits']:,.0f} call(s) ({cached:,.0f} tokens) served from the LLM cache"
    if c.get("errors"):
        line += f"; {c['errors']:,.0f} failed call(s)"
    return line


# ----------------------------------------------------------------------------- methods
_DEFAULTS = HippoConfig()


@dataclass(frozen=True)
class Method:
    """One retrieval configuration: engine overrides (retrieval-time settings only) or dense."""

    key: str
    label: str
    overrides: tuple = ()
    dense: bool = False

    @property
    def config(self) -> dict:
        """The overrides that differ from the defaults (``use_filter`` dropped where it has no
        effect, i.e. when the query is not linked through facts)."""
        out = {k: v for k, v in self.overrides if getattr(_DEFAULTS, k) != v}
        linking = dict(self.overrides).get("linking", _DEFAULTS.linking)
        if linking != "fact":
            out.pop("use_filter", None)
        return dict(sorted(out.items()))

    @property
    def needs_llm(self) -> bool:
        """Whether retrieval calls the LLM (recognition filter or query NER)."""
        if self.dense:
            return False
        cfg = {**{"linking": _DEFAULTS.linking, "use_filter": _DEFAULTS.use_filter}, **dict(self.overrides)}
        return cfg["linking"] == "ner" or (cfg["linking"] == "fact" and cfg["use_filter"])


def _m(key: str, label: str, dense: bool = False, **overrides) -> Method:
    return Method(key, label, tuple(sorted(overrides.items())), dense)


def hippo_method(use_filter: bool, key: str = "hipporag2", label: str = "HippoRAG 2", **overrides) -> Method:
    """HippoRAG 2 with optional overrides; the label says when the filter is off."""
    if not use_filter and overrides.get("linking", "fact") == "fact" and "filter" not in label:
        label = f"{label[:-1]}, filter off)" if label.endswith(")") else f"{label} (filter off)"
    return _m(key, label, use_filter=use_filter, **overrides)


# ----------------------------------------------------------------------------- result cache
class ResultCache:
    """Per-question results of one configuration, appended to a JSONL file as they come."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.header = header

    def load(self) -> dict[str, dict]:
        """``{question key: entry}``; a torn last line (crash while writing) is ignored."""
        out: dict[str, dict] = {}
        if not self.path.exists():
            return out
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(f):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    logger.warning("%s: ignoring unreadable line %d", self.path, n + 1)
                    continue
                if "key" in row:
                    out[row["key"]] = row
        return out

    def append(self, entries: Sequence[dict]) -> None:
        """Append entries (writes the header first when the file is new)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as f:
            if new:
                f.write(json.dumps({"header": self.header}, sort_keys=True) + "\n")
            for e in entries:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def clear(self) -> None:
        """Forget every cached result of this configuration."""
        if self.path.exists():
            self.path.unlink()


def _sha(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:n]


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def recall_curve(entries: Sequence[dict], ks: Sequence[int]) -> dict[int, float]:
    """Mean Recall@k over questions from each entry's ``gold_ranks`` (1-based rank of every
    distinct gold passage in the retrieved list, ``None`` when absent) and ``n_gold``. Same
    definition as :func:`evaluation.metrics.recall_at_k` (0 for a question without gold)."""
    n = len(entries)
    out = {}
    for k in ks:
        tot = 0.0
        for e in entries:
            if e["n_gold"]:
                tot += sum(1 for r in e["gold_ranks"] if r is not None and r <= k) / e["n_gold"]
        out[k] = tot / n if n else 0.0
    return out


def _mean(values: Sequence[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _sum_llm(entries: Sequence[dict]) -> dict:
    out: dict[str, float] = {}
    for e in entries:
        for k, v in (e.get("llm") or {}).items():
            out[k] = out.get(k, 0) + v
    return out


# ----------------------------------------------------------------------------- runner
class Runner:
    """Everything one table command needs: the dataset, the shared index, the models, the
    per-question caches, and the bookkeeping for the report header."""

    def __init__(self, args: argparse.Namespace, dataset: Dataset, argv: Sequence[str], *,
                 llm: LLMClient | None = None, encoder=None):
        self.args = args
        self.ds = dataset
        self.argv = list(argv)
        self.t0 = time.perf_counter()
        self.use_filter = not args.no_filter
        from hippo_engine.models.assets import DEFAULT_EMBEDDER
        emb = args.embedder or (encoder.name if encoder is not None else DEFAULT_EMBEDDER)
        llm_name = args.llm or (llm.model_name if llm is not None else None)
        self.save_dir = Path(args.save_dir) if args.save_dir else (
            Path("outputs") / "reproduce" / dataset.name / re.sub(r"[^A-Za-z0-9._-]+", "_", emb))
        overrides: dict = {"show_progress": not args.quiet}
        if args.llm_base_url:
            overrides["llm_base_url"] = args.llm_base_url
        if getattr(args, "llm_backend", None):
            overrides["llm_backend"] = args.llm_backend
        self._overrides = overrides
        # The factory instance creates the default models exactly as the engine does (the
        # default LLM wrapped in the SQLite response cache in save_dir).
        self.factory = HippoRAG(self.save_dir, llm_model_name=llm_name, embedding_model_name=emb,
                                llm=llm, encoder=encoder, **overrides)
        self.embedder_name = self.factory.embedding_model_name
        self.llm = MeteredLLM(lambda: self.factory.llm, self.factory.llm_model_name)
        self.llm_name = self.factory.llm_model_name
        self._encoder = encoder
        self.openie = self._openie_file()
        self.manifest: dict = {}
        self.index_note = ""
        self.llm_used = False
        self.computed: dict[str, int] = {}
        self._cleared: set[str] = set()

    # ---------------------------------------------------------------- setup
    def _openie_file(self) -> Path | None:
        o = self.args.openie
        if o is None:
            return self.ds.openie_file
        if o.lower() == "none":
            return None
        p = Path(o).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"--openie {o}: no such file")
        return p

    @property
    def encoder(self):
        """The embedder, loaded once and shared by every configuration."""
        if self._encoder is None:
            logger.info("loading embedder %s", self.embedder_name)
            self._encoder = self.factory.encoder
        return self._encoder

    def fingerprint(self) -> dict:
        """What the index is built from; a save_dir built from something else is refused."""
        return {"corpus_sha256": _sha(self.ds.docs, 64), "passages": len(self.ds.docs),
                "embedder": self.embedder_name,
                "openie_file": self.openie.name if self.openie else None,
                "openie_sha256": _file_sha(self.openie) if self.openie else None}

    def prepare_index(self) -> None:
        """Build the index once (importing the OpenIE file first) or reuse it."""
        mpath = self.save_dir / "reproduce_manifest.json"
        fp = self.fingerprint()
        manifest = json.loads(mpath.read_text(encoding="utf-8")) if mpath.exists() else {}
        if manifest and manifest.get("fingerprint") != fp:
            diff = [k for k in fp if manifest.get("fingerprint", {}).get(k) != fp[k]]
            raise RuntimeError(f"{self.save_dir} holds an index built from other inputs (differs in: "
                               f"{', '.join(diff)}); pass another --save-dir")
        rag = HippoRAG(self.save_dir, llm_model_name=self.llm_name, embedding_model_name=self.embedder_name,
                       llm=self.llm, encoder=self.encoder, **self._overrides)
        try:
            before = self.llm.snapshot()
            t = time.perf_counter()
            if self.openie and len(rag.index_state) < len(self.ds.docs):
                n = rag.import_openie(self.openie)
                logger.info("imported OpenIE for %d passages from %s", n, self.openie)
            report = rag.index(self.ds.docs)
            wall = time.perf_counter() - t
            added = report.get("added", 0)
            if added:
                builds = manifest.get("builds", [])
                builds.append({"at": _dt.datetime.now().isoformat(timespec="seconds"), "added": added,
                               "wall_s": wall, "timings": report.get("timings", {}),
                               "openie_llm_passages": report.get("openie_llm_passages", 0),
                               "llm": _delta(self.llm.snapshot(), before),
                               "openie_source": (self.openie.name if self.openie else self.llm_name)})
                manifest = {"fingerprint": fp, "builds": builds, "graph": rag.graph_stats(),
                            "facts": int(len(rag.index_state.stores["fact"].ids)),
                            "index_version": rag.index_state.version}
                tmp = mpath.with_suffix(".tmp")
                tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
                os.replace(tmp, mpath)
                self.index_note = f"built by this run ({added:,} passages, {wall:.1f} s)"
                self.llm_used = self.llm_used or bool(report.get("openie_llm_passages"))
            else:
                if not manifest:  # index made elsewhere: record what we can
                    manifest = {"fingerprint": fp, "builds": [], "graph": rag.graph_stats(),
                                "facts": int(len(rag.index_state.stores["fact"].ids)),
                                "index_version": rag.index_state.version}
                    mpath.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
                b = manifest.get("builds", [])
                self.index_note = ("reused" + (f" (built {b[0]['at']}, {sum(x['wall_s'] for x in b):.1f} s)" if b else ""))
            self.index_version = rag.index_state.version
        finally:
            rag.close()
        self.manifest = manifest

    def open(self, method: Method) -> HippoRAG:
        """A ``HippoRAG`` over the shared index with this configuration's overrides."""
        return HippoRAG(self.save_dir, llm_model_name=self.llm_name, embedding_model_name=self.embedder_name,
                        llm=self.llm, encoder=self.encoder, **{**self._overrides, "show_progress": False},
                        **method.config)

    # ---------------------------------------------------------------- per-question runs
    def _cache(self, kind: str, method: Method, extra: dict | None = None) -> ResultCache:
        header = {"kind": kind, "method": method.config, "dense": method.dense,
                  "index": self.manifest.get("fingerprint"), "index_version": self.index_version,
                  "embedder": self.embedder_name, "llm": self.llm_name if (method.needs_llm or kind == "qa") else None,
                  "retrieval_top_k": _DEFAULTS.retrieval_top_k, **(extra or {})}
        slug = "dense" if method.dense else ("_".join(f"{k}={v}" for k, v in method.config.items()) or "default")
        path = self.save_dir / "reproduce_runs" / f"{kind}-{re.sub(r'[^A-Za-z0-9._=-]+', '_', slug)}-{_sha(header)}.jsonl"
        cache = ResultCache(path, header)
        if self.args.recompute and str(path) not in self._cleared:
            cache.clear()
            self._cleared.add(str(path))
        return cache

    def _qkey(self, i: int) -> str:
        gold = sorted(self.ds.gold_docs[i]) if self.ds.gold_docs is not None else []
        return _sha([self.ds.questions[i], gold], 24)

    def _selected(self, method: Method) -> bool:
        only = self.args.only
        return not only or method.key in only

    def retrieval(self, method: Method, compute: bool | None = None) -> list[dict] | None:
        """Per-question retrieval results for ``method`` (cached ones reused, missing ones
        computed unless ``compute`` is False, in which case ``None`` is returned when any is
        missing)."""
        if compute is None:
            compute = self._selected(method)
        if method.needs_llm:
            self.llm_used = True
        cache = self._cache("retrieval", method)
        done = cache.load()
        keys = [self._qkey(i) for i in range(len(self.ds))]
        todo = [i for i, k in enumerate(keys) if k not in done]
        if todo and not compute:
            return None
        if todo:
            self._compute_retrieval(method, cache, todo, keys, done)
        return [done[k] for k in keys]

    def _compute_retrieval(self, method: Method, cache: ResultCache, todo: list[int], keys: list[str],
                           done: dict) -> None:
        from tqdm.auto import tqdm

        step = self.args.batch_llm if method.needs_llm else self.args.batch
        qa_k = _DEFAULTS.qa_top_k
        logger.info("%s: retrieving %d question(s)%s", method.label, len(todo),
                    " (calls the LLM: slow on CPU)" if method.needs_llm else "")
        rag = self.open(method)
        try:
            with tqdm(total=len(todo), desc=f"retrieve [{method.key}]", disable=self.args.quiet) as bar:
                for s in range(0, len(todo), step):
                    idx = todo[s:s + step]
                    qs = [self.ds.questions[i] for i in idx]
                    before = self.llm.snapshot()
                    t = time.perf_counter()
                    sols = rag.retrieve_dpr(qs) if method.dense else rag.retrieve(qs)
                    dt = (time.perf_counter() - t) / len(idx)
                    llm = {k: v / len(idx) for k, v in _delta(self.llm.snapshot(), before).items() if v}
                    entries = []
                    for i, sol in zip(idx, sols, strict=False):
                        gold = list(dict.fromkeys(self.ds.gold_docs[i])) if self.ds.gold_docs is not None else []
                        rank = {}
                        for r, d in enumerate(sol.docs, 1):
                            rank.setdefault(d, r)
                        entries.append({"key": keys[i], "gold_ranks": [rank.get(g) for g in gold],
                                        "n_gold": len(gold), "top": [mdhash_id(d, "chunk-") for d in sol.docs[:qa_k]],
                                        "fallback": bool(sol.used_fallback), "kept": len(sol.kept_facts),
                                        "s": dt, "llm": llm})
                    cache.append(entries)
                    for e in entries:
                        done[e["key"]] = e
                    self.computed[method.key] = self.computed.get(method.key, 0) + len(idx)
                    bar.update(len(idx))
        finally:
            rag.close()

    def qa(self, method: Method, compute: bool | None = None) -> list[dict] | None:
        """Per-question reader results on top of ``method``'s retrieval (same caching rules)."""
        from tqdm.auto import tqdm

        from hippo_engine.qa.reader import QuerySolution

        if compute is None:
            compute = self._selected(method)
        self.llm_used = True
        cache = self._cache("qa", method, {"qa_top_k": _DEFAULTS.qa_top_k})
        done = cache.load()
        keys = [self._qkey(i) for i in range(len(self.ds))]
        todo = [i for i, k in enumerate(keys) if k not in done]
        if todo and not compute:
            return None
        if todo:
            ret = self.retrieval(method, compute=True)
            by_id = {mdhash_id(d, "chunk-"): d for d in self.ds.docs}
            rag = self.open(method)
            step = self.args.batch_llm
            logger.info("%s: reading %d question(s) with %s", method.label, len(todo), self.llm_name)
            try:
                with tqdm(total=len(todo), desc=f"QA [{method.key}]", disable=self.args.quiet) as bar:
                    for s in range(0, len(todo), step):
                        idx = todo[s:s + step]
                        sols = [QuerySolution(question=self.ds.questions[i],
                                              docs=[by_id.get(h) or rag.index_state.stores["passage"].text(h)
                                                    for h in ret[i]["top"]], doc_scores=[])
                                for i in idx]
                        before = self.llm.snapshot()
                        t = time.perf_counter()
                        sols, responses, metadata = rag.rag_qa(sols)
                        dt = (time.perf_counter() - t) / len(idx)
                        llm = {k: v / len(idx) for k, v in _delta(self.llm.snapshot(), before).items() if v}
                        scores = qa_metrics_per_query([sol.answer or "" for sol in sols],
                                                      [self.ds.gold_answers[i] for i in idx])
                        entries = [{"key": keys[i], "answer": sol.answer or "", "response": resp,
                                    "em": sc["ExactMatch"], "f1": sc["F1"], "s": dt, "llm": llm,
                                    "error": meta.get("error")}
                                   for i, sol, resp, meta, sc in zip(idx, sols, responses, metadata, scores, strict=False)]
                        # a failed reader call (e.g. a timeout) is reported but not cached, so
                        # the next run retries it, like the engine's LLM cache
                        cache.append([e for e in entries if not e["error"]])
                        for e in entries:
                            done[e["key"]] = e
                        self.computed[f"qa:{method.key}"] = self.computed.get(f"qa:{method.key}", 0) + len(idx)
                        bar.update(len(idx))
            finally:
                rag.close()
        return [done[k] for k in keys]

    # ---------------------------------------------------------------- report
    def ks(self) -> list[int]:
        """The k values of Recall@k (up to ``retrieval_top_k``)."""
        return [k for k in DEFAULT_RECALL_KS if k <= _DEFAULTS.retrieval_top_k]

    def command(self) -> str:
        """The exact command of this run."""
        return "python -m reproduce " + shlex.join(self.argv)

    def out_path(self, table: str) -> Path:
        """``<results>/<dataset>/<table>[-no-filter].md``."""
        root = Path(self.args.out) if self.args.out else RESULTS_DIR
        suffix = "-no-filter" if (self.args.no_filter and table != "graph") else ""
        if len(self.ds) < self.args.full_questions:  # a partial run never overwrites a full one
            suffix += f"-first{len(self.ds)}"
        return root / self.ds.name / f"{table}{suffix}.md"

    def dataset_line(self) -> str:
        ds = self.ds
        full = self.args.full_questions
        used = (f"first {len(ds):,} of {full:,} questions (`--limit {self.args.limit}`)"
                if len(ds) < full else f"all {len(ds):,} questions")
        where = ds.path
        try:
            where = ds.path.resolve().relative_to(default_data_root().resolve())
            where = f"`{where}` under the data root"
        except (ValueError, AttributeError, OSError):
            where = f"`{ds.path}`"
        return f"`{ds.name}`: {used}, {len(ds.docs):,} passages ({where})"

    def header(self, title: str, paper_ref: str, uses_llm: str, entries_used: Sequence[Sequence[dict]]) -> list[str]:
        """The report header: command, data, models, commit, time, tokens."""
        wall = time.perf_counter() - self.t0
        compute = sum(e.get("s", 0.0) for es in entries_used for e in es)
        cached_llm = _sum_llm([e for es in entries_used for e in es])
        commit = git_commit()
        openie = (f"`{self.openie.name}` (file, imported; no LLM call)" if self.openie
                  else f"{self.llm_name} (run by the engine when the index was built)")
        col = paper_column(self.ds.name)
        paper_note = "n/a (the paper does not report this dataset)" if col is None else (
            f"{col} column" + ("" if PAPER_CANONICAL[col] == self.ds.name
                               else f" — the paper's `{PAPER_CANONICAL[col]}` question set, not `{self.ds.name}`; "
                                    "compare trends, not values"))
        lines = [f"# {title}", "", f"Reproduces the HippoRAG 2 paper, {paper_ref}. Regenerate with:", "",
                 "```bash", self.command(), "```", "",
                 "| | |", "| --- | --- |",
                 f"| dataset | {self.dataset_line()} |",
                 f"| embedder | `{self.embedder_name}` |",
                 f"| OpenIE | {openie} |",
                 f"| LLM (filter, query NER, reader) | {uses_llm} |",
                 f"| recognition filter | {'on' if self.use_filter else 'off (`--no-filter`)'} |",
                 f"| index | `{self.save_dir}`, {self.index_note} |",
                 f"| paper figures | {PAPER_SETUP}; {paper_note} |",
                 f"| git commit | `{commit}` |",
                 f"| wall time | {wall:.1f} s for this invocation; {compute:.1f} s of retrieval/reading behind the "
                 f"per-question results shown (measured when they were computed, partly in earlier runs) |",
                 f"| LLM tokens | this invocation: {_tokens_line(self.llm.snapshot())}; behind the results shown: "
                 f"{_tokens_line(cached_llm)} |",
                 f"| computed by this invocation | "
                 f"{', '.join(f'{k}: {v} question(s)' for k, v in self.computed.items()) or 'nothing (all results cached)'} |",
                 f"| generated | {_dt.datetime.now().isoformat(timespec='seconds')} |", ""]
        return lines

    def write(self, table: str, lines: list[str], plot: dict | None = None, plot_title: str = "") -> Path:
        """Write the markdown (and the PNG of ``plot`` series beside it)."""
        path = self.out_path(table)
        path.parent.mkdir(parents=True, exist_ok=True)
        if plot:
            from .plots import plot_recall_curves
            png = plot_recall_curves(plot, path.with_suffix(".png"), plot_title,
                                     f"{self.ds.name}, {len(self.ds)} questions, {self.embedder_name}")
            if png is not None:
                lines += ["", f"![Recall@k]({png.name})", ""]
        path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
        logger.info("wrote %s", path)
        return path

    def close(self) -> None:
        """Release the index handles."""
        self.factory.close()


def git_commit() -> str:
    """``git rev-parse --short HEAD`` of this repository, flagged when tracked files differ."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    return sha + (" (working tree had uncommitted changes)" if dirty else "")


# ----------------------------------------------------------------------------- tables
def _require_gold(r: Runner) -> None:
    if r.ds.gold_docs is None:
        raise SystemExit(f"dataset {r.ds.name} has no gold passages (no paragraphs / supporting_facts / "
                         "contexts in its question file): recall tables cannot be computed; table-qa and "
                         "table-graph still work")


def _llm_label(r: Runner, used: bool) -> str:
    return f"`{r.llm_name}`" if used else f"not used by this table (`{r.llm_name}` would be)"


def _rows_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _curve_table(r: Runner, curves: dict[str, dict[int, float] | None]) -> list[str]:
    ks = r.ks()
    rows = [[label] + ([_pct(c[k]) for k in ks] if c else ["not run"] * len(ks)) for label, c in curves.items()]
    return _rows_table(["method"] + [f"R@{k}" for k in ks], rows)


_S_NOTE = ("*s / question*: retrieval time per question when the result was computed, on this machine (CPU); "
           "rows whose filter prompts equal another row's were answered from the LLM cache and show that speed.")


def _not_run(m: Method) -> str:
    return f"not run (add `--only {m.key}`)"


def table_recall(r: Runner) -> Path:
    """Passage Recall@2/@5, dense retrieval vs HippoRAG 2 (paper Tables 3 and 9)."""
    _require_gold(r)
    col = paper_column(r.ds.name)
    dense = _m("dense", f"Dense retrieval ({r.embedder_name})", dense=True)
    hippo = hippo_method(r.use_filter)
    res = {m: r.retrieval(m) for m in (dense, hippo)}
    curves = {m.label: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for m, e in res.items():
        c = curves[m.label]
        if m.dense:
            p = PAPER_RECALL["dense"].get(col) if col else None
            paper = (_fmt(p[0]), _fmt(p[1]), "NV-Embed-v2") if p else ("n/a", "n/a", "")
        elif r.use_filter:
            p = PAPER_RECALL["hipporag2"].get(col) if col else None
            paper = (_fmt(p[0]), _fmt(p[1]), "HippoRAG 2") if p else ("n/a", "n/a", "")
        else:
            p5 = PAPER_ABLATION_R5["no_filter"].get(col) if col else None
            paper = ("n/a", _fmt(p5), "HippoRAG 2 w/o filter (Table 4)" if p5 else "")
        fb = (f"{100.0 * sum(x['fallback'] for x in e) / len(e):.0f}%" if e and not m.dense else "")
        sq = _fmt(_mean([x["s"] for x in e]), 3) if e else "n/a"
        rows.append([m.label, _pct(c[2]) if c else _not_run(m), _pct(c[5]) if c else "", paper[0], paper[1],
                     paper[2], fb, sq])
    lines = r.header("Passage recall: dense retrieval vs HippoRAG 2", "Table 3 (and Table 9)",
                     _llm_label(r, r.use_filter), [e for e in res.values() if e])
    lines += ["## Recall@2 / Recall@5 (%)", ""]
    lines += _rows_table(["method", "R@2", "R@5", "paper R@2", "paper R@5", "paper row", "dense fallback",
                          "s / question"], rows)
    lines += ["", "*dense fallback*: share of questions where no fact was linked and HippoRAG 2 returned the "
              "dense ranking; *s / question*: retrieval time per question on this machine (CPU).", ""]
    if col == "MuSiQue":
        lines += ["Paper Table 9, MuSiQue Recall@5, dense -> HippoRAG 2 with other embedders: "
                  + "; ".join(f"{n} {a} -> {b}" for n, a, b in PAPER_OTHER_DENSE_MUSIQUE_R5) + ".", ""]
    lines += ["## Recall@k (%)", ""] + _curve_table(r, curves)
    return r.write("recall", lines, {k: v for k, v in curves.items() if v},
                   "Passage Recall@k: dense vs HippoRAG 2")


def ablation_methods(use_filter: bool) -> list[Method]:
    """The paper's Table 4 rows, all on the same index."""
    ms = [hippo_method(use_filter, "full", "HippoRAG 2 (full)"),
          _m("ner", "NER-to-node (query NER entities -> entity nodes)", linking="ner"),
          _m("query", "Query-to-node (query embedding -> entity nodes)", linking="query"),
          hippo_method(use_filter, "no_passage", "w/o passage nodes", use_passage_nodes=False)]
    if use_filter:
        ms.append(hippo_method(False, "no_filter", "w/o recognition filter"))
    return ms


def _per_question_recall(entries: Sequence[dict], k: int) -> list[float]:
    return [(sum(1 for r in e["gold_ranks"] if r is not None and r <= k) / e["n_gold"]) if e["n_gold"] else 0.0
            for e in entries]


def paired_difference(a: Sequence[dict], b: Sequence[dict], k: int = 5, resamples: int = 2000,
                      seed: int = 0) -> dict:
    """Per-question Recall@k of ``a`` minus ``b`` (same questions, same order): the mean
    difference, a 95% bootstrap interval (deterministic seed), and how many questions got
    better / worse."""
    import random

    d = [x - y for x, y in zip(_per_question_recall(a, k), _per_question_recall(b, k), strict=False)]
    if not d:
        return {"mean": 0.0, "low": 0.0, "high": 0.0, "better": 0, "worse": 0}
    rng = random.Random(seed)
    n = len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"mean": sum(d) / n, "low": means[int(0.025 * resamples)], "high": means[int(0.975 * resamples) - 1],
            "better": sum(1 for x in d if x > 0), "worse": sum(1 for x in d if x < 0)}


def _ordering(curves: dict[str, dict | None], entries: dict[str, list | None], k: int = 5) -> list[str]:
    c = {key: (v[k] if v else None) for key, v in curves.items()}
    checks = [("query-to-node < NER-to-node", "query", "ner"), ("NER-to-node < full", "ner", "full"),
              ("w/o passage nodes < full", "no_passage", "full")]
    out = []
    for text, a, b in checks:
        if c.get(a) is None or c.get(b) is None:
            out.append(f"- {text}: not measured")
            continue
        verdict = "yes" if c[a] < c[b] else ("tie" if abs(c[a] - c[b]) < 1e-12 else "no")
        p = paired_difference(entries[a], entries[b], k)
        out.append(f"- {text}: {verdict} ({_pct(c[a])} vs {_pct(c[b])}; per question {100 * p['mean']:+.1f} points, "
                   f"95% bootstrap interval [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}], "
                   f"{p['better']} better / {p['worse']} worse)")
    return out


def table_ablations(r: Runner) -> Path:
    """Ablations: NER-to-node, query-to-node, no passage nodes, no filter (paper Table 4)."""
    _require_gold(r)
    col = paper_column(r.ds.name)
    methods = ablation_methods(r.use_filter)
    res = {m: r.retrieval(m) for m in methods}
    curves = {m.key: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for m, e in res.items():
        c = curves[m.key]
        pkey = "no_filter" if (m.key == "full" and not r.use_filter) else m.key
        p5 = PAPER_ABLATION_R5[pkey].get(col) if col else None
        prow = {"full": "full", "ner": "NER-to-node", "query": "query-to-node", "no_passage": "w/o passage node",
                "no_filter": "w/o filter"}[pkey]
        rows.append([m.label, "yes" if m.needs_llm else "no", _pct(c[2]) if c else _not_run(m),
                     _pct(c[5]) if c else "", _fmt(p5), prow if p5 is not None else "",
                     _fmt(_mean([x["s"] for x in e]), 3) if e else "n/a"])
    uses = any(m.needs_llm and res[m] for m in methods)
    lines = r.header("Ablations of HippoRAG 2", "Table 4", _llm_label(r, uses), [e for e in res.values() if e])
    if not r.use_filter:
        lines += ["**Filter off in every row** (`--no-filter`): *full* is HippoRAG 2 without the recognition "
                  "filter, so each ablation is compared with filter-off HippoRAG 2, and the paper's *w/o filter* "
                  "row is the paper figure beside our *full* row. NER-to-node and query-to-node do not link "
                  "through facts, so the filter does not apply to them anyway.", ""]
    lines += ["## Recall (%)", ""]
    lines += _rows_table(["configuration", "LLM at query time", "R@2", "R@5", "paper R@5", "paper row",
                          "s / question"], rows)
    lines += ["", "NER-to-node needs the LLM at query time (named entities of the question); query-to-node "
              "and the fact-linking rows without the filter do not. " + _S_NOTE, "",
              "## Ordering check (Recall@5; the paper has query-to-node < NER-to-node < full and "
              "w/o passage nodes < full on MuSiQue)", ""] + _ordering(curves, {m.key: e for m, e in res.items()})
    lines += ["", "## Recall@k (%)", ""] + _curve_table(r, {m.label: curves[m.key] for m in methods})
    return r.write("ablations", lines, {m.label: curves[m.key] for m in methods if curves[m.key]},
                   "HippoRAG 2 ablations: Recall@k")


def table_weights(r: Runner) -> Path:
    """Passage-node weight sweep (paper Table 5)."""
    _require_gold(r)
    col = paper_column(r.ds.name)
    methods = [hippo_method(r.use_filter, f"w{w:g}", f"passage_node_weight = {w:g}", passage_node_weight=w)
               for w in r.args.weights]
    res = {m: r.retrieval(m) for m in methods}
    curves = {m.key: (recall_curve(e, r.ks()) if e else None) for m, e in res.items()}
    rows = []
    for w, (m, e) in zip(r.args.weights, res.items(), strict=False):
        c = curves[m.key]
        pkey = "full" if r.use_filter else "no_filter"
        p5 = PAPER_ABLATION_R5[pkey].get(col) if (col and abs(w - 0.05) < 1e-12) else None
        note = ("paper default (Table 4 " + ("full" if r.use_filter else "w/o filter") + ")") if p5 is not None else (
            "n/a (not in our copy of the paper's figures)" if col else "n/a")
        rows.append([f"{w:g}" + (" (default)" if abs(w - 0.05) < 1e-12 else ""),
                     _pct(c[2]) if c else _not_run(m), _pct(c[5]) if c else "", _fmt(p5), note,
                     _fmt(_mean([x["s"] for x in e]), 3) if e else "n/a"])
    lines = r.header("Passage-node weight sweep", "Table 5", _llm_label(r, r.use_filter),
                     [e for e in res.values() if e])
    lines += ["## Recall (%)", ""]
    lines += _rows_table(["passage_node_weight", "R@2", "R@5", "paper R@5", "paper", "s / question"], rows)
    lines += ["", "The weight scales the dense-retrieval passage seeds of the PageRank reset vector (spec section "
              "2, step 7). The paper's sweep figures other than the default are not in our spec, hence n/a. "
              + _S_NOTE, "",
              "## Recall@k (%)", ""] + _curve_table(r, {m.label: curves[m.key] for m in methods})
    return r.write("weights", lines, {m.label: curves[m.key] for m in methods if curves[m.key]},
                   "Passage-node weight sweep: Recall@k")


def table_qa(r: Runner) -> Path:
    """QA exact match and F1, dense vs HippoRAG 2 with the same reader (paper Table 2)."""
    col = paper_column(r.ds.name)
    dense = _m("dense", f"Dense retrieval ({r.embedder_name}) + reader", dense=True)
    hippo = hippo_method(r.use_filter, "hipporag2", "HippoRAG 2 + reader")
    rows, used = [], []
    for m, pkey in ((dense, "dense"), (hippo, "hipporag2")):
        q = r.qa(m)
        ret = r.retrieval(m, compute=False) if q else None
        if q is None:
            rows.append([m.label, _not_run(m), "", "", "", "n/a", "n/a", ""])
            continue
        used += [q, ret or []]
        p = PAPER_QA_F1[pkey].get(col) if col else None
        pf1 = _fmt(p) + ("" if r.use_filter or m.dense or p is None else " (with filter)") if p is not None else "n/a"
        r5 = _pct(recall_curve(ret, [5])[5]) if (ret and r.ds.gold_docs is not None) else "n/a"
        sq = _mean([a["s"] + b["s"] for a, b in zip(q, ret, strict=False)]) if ret else _mean([a["s"] for a in q])
        errors = sum(1 for a in q if a.get("error"))
        rows.append([m.label, _pct(_mean([a["em"] for a in q])), _pct(_mean([a["f1"] for a in q])), r5,
                     "n/a", pf1, _fmt(sq, 1), str(errors)])
    lines = r.header("QA: dense retrieval vs HippoRAG 2, same reader", "Table 2", f"`{r.llm_name}`", used)
    lines += ["## Exact match / F1 (%)", ""]
    lines += _rows_table(["method", "EM", "F1", "R@5 of passages read", "paper EM", "paper F1",
                          "s / question (retrieval + reading)", "reader errors"], rows)
    lines += ["", f"The reader sees the top {_DEFAULTS.qa_top_k} passages; EM/F1 use SQuAD normalisation and the "
              "best gold alias. The paper reports F1 only in its main table (hence paper EM n/a); its reader is "
              "Llama-3.3-70B, ours is the model above, so absolute values are not comparable — the dense vs "
              "HippoRAG 2 difference is."]
    return r.write("qa", lines)


def table_graph(r: Runner) -> Path:
    """Graph statistics and indexing cost (paper Tables 10 and 12)."""
    col = paper_column(r.ds.name)
    g = r.manifest.get("graph") or {}
    pg = PAPER_GRAPH.get(col, {}) if col else {}
    names = [("entity_nodes", "entity nodes"), ("passage_nodes", "passage nodes"),
             ("fact_edges", "fact (relation) edges"), ("context_edges", "context edges (passage-entity)"),
             ("synonymy_edges", "synonymy edges"), ("distinct_edges", "distinct edges (all kinds)")]
    rows = [[label, f"{g.get(k, 0):,}", f"{pg[k]:,}" if k in pg else "n/a"] for k, label in names]
    rows.append(["facts (unique triples)", f"{r.manifest.get('facts', 0):,}", "n/a"])
    rows.append(["total edge weight", f"{g.get('total_edge_weight', 0):,.1f}", "n/a"])
    builds = r.manifest.get("builds", [])
    wall = sum(b["wall_s"] for b in builds)
    stages: dict[str, float] = {}
    for b in builds:
        for k, v in (b.get("timings") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
    openie_calls = sum(b.get("openie_llm_passages", 0) for b in builds)
    build_llm = _sum_llm([{"llm": b.get("llm", {})} for b in builds])
    hippo = hippo_method(r.use_filter)
    dense = _m("dense", "dense", dense=True)
    eh, ed = r.retrieval(hippo), r.retrieval(dense)
    pc = PAPER_COST.get(col, {}) if col else {}
    cost = [["indexing wall time (OpenIE import/LLM + embedding + synonymy + graph)",
             f"{wall:.1f} s ({wall / 60:.2f} min)" if builds else "n/a (index built outside these commands)",
             f"{pc['indexing_min']} min" if pc else "n/a"],
            ["passages sent to the LLM for OpenIE", f"{openie_calls:,}" if builds else "n/a", "all (Llama-3.3-70B)" if pc else "n/a"],
            ["LLM tokens for indexing", _tokens_line(build_llm) if builds else "n/a", "n/a"],
            [f"HippoRAG 2 retrieval per query (filter {'on' if r.use_filter else 'off'})",
             f"{_mean([e['s'] for e in eh]):.3f} s" if eh else "n/a", f"{pc['query_s']} s (GPU, with filter)" if pc else "n/a"],
            ["dense retrieval per query", f"{_mean([e['s'] for e in ed]):.3f} s" if ed else "n/a", "n/a"]]
    cost += [[f"indexing stage: {k}", f"{v:.1f} s", "n/a"] for k, v in stages.items() if k != "total"]
    lines = r.header("Graph statistics and indexing cost", "Tables 10 and 12", _llm_label(r, r.use_filter),
                     [x for x in (eh, ed) if x])
    lines += ["## Graph (Table 10)", ""] + _rows_table(["", "ours", "paper"], rows)
    lines += ["", "Our edges are counted once per node pair (a pair linked by a fact and by synonymy counts in "
              "both rows, once in *distinct edges*). The reference implementation adds parallel edges in both "
              "directions, so its counts are not directly comparable."]
    if col == "MuSiQue" and r.ds.name != "musique":
        lines += [f"The paper's figures are for the full MuSiQue corpus (11,656 passages, Llama-3.3-70B OpenIE); "
                  f"this corpus has {len(r.ds.docs):,} passages."]
    lines += ["", "## Cost (Table 12)", ""] + _rows_table(["", "ours (CPU, this machine)", "paper"], cost)
    return r.write("graph", lines)


TABLES: dict[str, Callable[[Runner], Path]] = {
    "table-recall": table_recall,
    "table-ablations": table_ablations,
    "table-weights": table_weights,
    "table-qa": table_qa,
    "table-graph": table_graph,
}


# ----------------------------------------------------------------------------- CLI
def _weights(text: str) -> list[float]:
    try:
        ws = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--weights takes comma-separated numbers: {e}") from e
    if not ws or any(not 0.0 <= w <= 1.0 for w in ws):
        raise argparse.ArgumentTypeError("--weights must be numbers in [0, 1]")
    return ws


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m reproduce`` argument parser."""
    ap = argparse.ArgumentParser(prog="python -m reproduce", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name, fn in TABLES.items():
        p = sub.add_parser(name, help=(fn.__doc__ or "").strip().splitlines()[0],
                           description=(fn.__doc__ or "").strip())
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
    return ap


def main(argv: Sequence[str] | None = None, *, llm: LLMClient | None = None, encoder=None) -> Path:
    """Run one table command; returns the markdown path. ``llm`` / ``encoder`` inject clients
    (tests use fakes); by default the engine's models are used."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.limit is not None and args.limit <= 0:
        raise SystemExit("--limit must be positive")
    full = load_dataset(args.dataset)
    args.full_questions = len(full)
    ds = full.head(args.limit)
    runner = Runner(args, ds, argv, llm=llm, encoder=encoder)
    try:
        runner.prepare_index()
        path = TABLES[args.command](runner)
    finally:
        runner.close()
    print(path)
    return path
