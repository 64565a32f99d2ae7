"""The state one table command runs in: the dataset, the shared index (built once per dataset,
embedder and extractor), the models and the per-question result caches (the report side: reporting.py)."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine import HippoRAG
from hippo_engine.evaluation.datasets import Dataset
from hippo_engine.evaluation.metrics import qa_metrics_per_query
from hippo_engine.ids import chunk_id
from hippo_engine.llm.base import LLMClient

from ..common import file_sha256
from .meter import MeteredLLM, delta
from .methods import DEFAULTS, Method
from .reporting import ReportMixin
from .results import ResultCache, sha

logger = logging.getLogger(__name__)


class Runner(ReportMixin):
    """Everything one table command needs: the dataset, the shared index, the models, the
    per-question caches, and the bookkeeping for the report header."""

    def __init__(self, args: argparse.Namespace, dataset: Dataset, argv: Sequence[str], *,
                 llm: LLMClient | None = None, encoder=None, extractor: str = "openie", main: Runner | None = None):
        self.args = args
        self.ds = dataset
        self.argv = list(argv)
        self.t0 = time.perf_counter()
        self.extractor = extractor
        # the "ner" index is the LLM-free path: the tables never switch its filter on
        self.use_filter = not args.no_filter and extractor != "ner"
        from hippo_engine.models.assets import DEFAULT_EMBEDDER
        emb = args.embedder or (encoder.name if encoder is not None else DEFAULT_EMBEDDER)
        llm_name = args.llm or (llm.model_name if llm is not None else None)
        self.save_dir = index_dir(args, dataset.name, emb, extractor)
        overrides: dict = {"show_progress": not args.quiet, "extractor": extractor, "chunk_size": None}
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
        self.llm_name = self.factory.llm_model_name
        self._encoder = encoder
        self.openie = self._openie_file() if extractor == "openie" else None
        self.manifest: dict = {}
        self.index_note = ""
        self.llm_used = False
        self._cleared: set[str] = set()
        # runners over other extractors' indexes (table-recall) share the main one's meter and counts
        self.main = main or self
        self.others: list[Runner] = []
        self.llm = main.llm if main else MeteredLLM(lambda: self.factory.llm, self.factory.llm_model_name)
        self.computed: dict[str, int] = main.computed if main else {}
        if main:
            main.others.append(self)

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

    @property
    def runners(self) -> list[Runner]:
        """This runner and those over the other extractors' indexes."""
        return [self, *self.others]

    def fingerprint(self) -> dict:
        """What the index is built from; a save_dir built from something else is refused. (The
        extractor is left out for "openie", so that indexes made before the option keep their caches.)"""
        fp = {"corpus_sha256": sha(self.ds.docs, 64), "passages": len(self.ds.docs),
              "embedder": self.embedder_name,
              "openie_file": self.openie.name if self.openie else None,
              "openie_sha256": file_sha256(self.openie) if self.openie else None}
        return fp if self.extractor == "openie" else {**fp, "extractor": self.extractor}

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
        logger.info("index %s (extractor %s)", self.save_dir, self.extractor)
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
                               "llm": delta(self.llm.snapshot(), before),
                               "openie_source": (self.openie.name if self.openie else self.llm_name),
                               "extractor": self.extractor})
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
                built = f" (built {b[0]['at']}, {sum(x['wall_s'] for x in b):.1f} s)" if b else ""
                self.index_note = "reused" + built
            self.index_version = rag.index_state.version
        finally:
            rag.close()
        self.manifest = manifest

    def open(self, method: Method) -> HippoRAG:
        """A ``HippoRAG`` over the shared index with this configuration's overrides."""
        return HippoRAG(self.save_dir, llm_model_name=self.llm_name, embedding_model_name=self.embedder_name,
                        llm=self.llm, encoder=self.encoder, **{**self._overrides, "show_progress": False},
                        **method.config)

    def tag(self, key: str) -> str:
        """A configuration key, prefixed with the extractor unless it is "openie"."""
        return key if self.extractor == "openie" else f"{self.extractor}:{key}"

    def fused(self, method: Method, n: int | None = None, key: str | None = None) -> Method:
        """``method`` with rank fusion ``dense_first=n`` (default ``--dense-first``), under the same
        key unless ``key`` is given; dense and ``n == 0`` are returned unchanged."""
        n = self.args.dense_first if n is None else n
        if method.dense or not n:
            return method
        return Method(key or method.key, f"{method.label} + dense_first={n}",
                      tuple(sorted({**dict(method.overrides), "dense_first": n}.items())))

    # ---------------------------------------------------------------- per-question runs
    def _cache(self, kind: str, method: Method, extra: dict | None = None) -> ResultCache:
        header = {"kind": kind, "method": method.config, "dense": method.dense,
                  "index": self.manifest.get("fingerprint"), "index_version": self.index_version,
                  "embedder": self.embedder_name, "llm": self.llm_name if (method.needs_llm or kind == "qa") else None,
                  "retrieval_top_k": DEFAULTS.retrieval_top_k,
                  # the retrieval defaults a method does not override (a changed default, e.g. the second
                  # walk of a ner index, must not reuse runs cached under the old one)
                  "retrieval_defaults": sha(DEFAULTS.retrieval.model_dump(mode="json")), **(extra or {})}
        slug = "dense" if method.dense else ("_".join(f"{k}={v}" for k, v in method.config.items()) or "default")
        slug = re.sub(r"[^A-Za-z0-9._=-]+", "_", slug)
        path = self.save_dir / "reproduce_runs" / f"{kind}-{slug}-{sha(header)}.jsonl"
        cache = ResultCache(path, header)
        if self.args.recompute and str(path) not in self._cleared:
            cache.clear()
            self._cleared.add(str(path))
        return cache

    def _qkey(self, i: int) -> str:
        gold = sorted(self.ds.gold_docs[i]) if self.ds.gold_docs is not None else []
        return sha([self.ds.questions[i], gold], 24)

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
        qa_k = DEFAULTS.qa_top_k
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
                    llm = {k: v / len(idx) for k, v in delta(self.llm.snapshot(), before).items() if v}
                    entries = []
                    for i, sol in zip(idx, sols, strict=False):
                        gold = list(dict.fromkeys(self.ds.gold_docs[i])) if self.ds.gold_docs is not None else []
                        rank = {}
                        for r, d in enumerate(sol.docs, 1):
                            rank.setdefault(d, r)
                        entries.append({"key": keys[i], "gold_ranks": [rank.get(g) for g in gold],
                                        "n_gold": len(gold), "top": [chunk_id(d) for d in sol.docs[:qa_k]],
                                        "fallback": bool(sol.used_fallback), "kept": len(sol.kept_facts),
                                        "s": dt, "llm": llm})
                    cache.append(entries)
                    for e in entries:
                        done[e["key"]] = e
                    tag = self.tag(method.key)
                    self.computed[tag] = self.computed.get(tag, 0) + len(idx)
                    bar.update(len(idx))
        finally:
            rag.close()

    def qa(self, method: Method, compute: bool | None = None) -> list[dict] | None:
        """Per-question reader results on top of ``method``'s retrieval (same caching rules)."""
        from tqdm.auto import tqdm

        from hippo_engine.datatypes import QuerySolution

        if compute is None:
            compute = self._selected(method)
        self.llm_used = True
        cache = self._cache("qa", method, {"qa_top_k": DEFAULTS.qa_top_k})
        done = cache.load()
        keys = [self._qkey(i) for i in range(len(self.ds))]
        todo = [i for i, k in enumerate(keys) if k not in done]
        if todo and not compute:
            return None
        if todo:
            ret = self.retrieval(method, compute=True)
            by_id = {chunk_id(d): d for d in self.ds.docs}
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
                        llm = {k: v / len(idx) for k, v in delta(self.llm.snapshot(), before).items() if v}
                        scores = qa_metrics_per_query([sol.answer or "" for sol in sols],
                                                      [self.ds.gold_answers[i] for i in idx])
                        entries = [{"key": keys[i], "answer": sol.answer or "", "response": resp,
                                    "em": sc["ExactMatch"], "f1": sc["F1"], "s": dt, "llm": llm,
                                    "error": meta.get("error")}
                                   for i, sol, resp, meta, sc in zip(idx, sols, responses, metadata, scores,
                                                                     strict=False)]
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

    def close(self) -> None:
        """Release the index handles."""
        self.factory.close()


def index_dir(args: argparse.Namespace, dataset: str, embedder: str, extractor: str) -> Path:
    """The index folder: ``--save-dir`` or ``outputs/reproduce/<dataset>/<embedder>``, with
    ``-<extractor>`` (other than openie) and ``-shuffle<SEED>`` (``--shuffle-corpus``) appended."""
    base = Path(args.save_dir) if args.save_dir else (
        Path("outputs") / "reproduce" / dataset / re.sub(r"[^A-Za-z0-9._-]+", "_", embedder))
    suffix = "" if extractor == "openie" else f"-{extractor}"
    suffix += f"-shuffle{args.shuffle_corpus}" if args.shuffle_corpus is not None else ""
    return base.with_name(base.name + suffix) if suffix else base

