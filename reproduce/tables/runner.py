"""The state one table command runs in: the dataset, the shared index (built once per dataset and
embedder), the models, the per-question result caches and the report header."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine import HippoRAG
from hippo_engine.evaluation.datasets import Dataset, default_data_root
from hippo_engine.evaluation.metrics import DEFAULT_RECALL_KS, qa_metrics_per_query
from hippo_engine.llm.base import LLMClient
from hippo_engine.text import mdhash_id

from ..common import RESULTS_DIR, file_sha256, git_head, write_result
from .meter import MeteredLLM, delta, sum_llm, tokens_line
from .methods import DEFAULTS, Method
from .paper import PAPER_CANONICAL, PAPER_SETUP, paper_column
from .results import ResultCache, sha

logger = logging.getLogger(__name__)


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
        return {"corpus_sha256": sha(self.ds.docs, 64), "passages": len(self.ds.docs),
                "embedder": self.embedder_name,
                "openie_file": self.openie.name if self.openie else None,
                "openie_sha256": file_sha256(self.openie) if self.openie else None}

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
                               "llm": delta(self.llm.snapshot(), before),
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

    # ---------------------------------------------------------------- per-question runs
    def _cache(self, kind: str, method: Method, extra: dict | None = None) -> ResultCache:
        header = {"kind": kind, "method": method.config, "dense": method.dense,
                  "index": self.manifest.get("fingerprint"), "index_version": self.index_version,
                  "embedder": self.embedder_name, "llm": self.llm_name if (method.needs_llm or kind == "qa") else None,
                  "retrieval_top_k": DEFAULTS.retrieval_top_k, **(extra or {})}
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
        cache = self._cache("qa", method, {"qa_top_k": DEFAULTS.qa_top_k})
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

    # ---------------------------------------------------------------- report
    def ks(self) -> list[int]:
        """The k values of Recall@k (up to ``retrieval_top_k``)."""
        return [k for k in DEFAULT_RECALL_KS if k <= DEFAULTS.retrieval_top_k]

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
        cached_llm = sum_llm([e for es in entries_used for e in es])
        commit = git_commit()
        computed = ", ".join(f"{k}: {v} question(s)" for k, v in self.computed.items())
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
                 f"| LLM tokens | this invocation: {tokens_line(self.llm.snapshot())}; behind the results shown: "
                 f"{tokens_line(cached_llm)} |",
                 f"| computed by this invocation | {computed or 'nothing (all results cached)'} |",
                 f"| generated | {_dt.datetime.now().isoformat(timespec='seconds')} |", ""]
        return lines

    def write(self, table: str, lines: list[str], plot: dict | None = None, plot_title: str = "") -> Path:
        """Write the markdown (and the PNG of ``plot`` series beside it)."""
        path = self.out_path(table)
        if plot:
            from ..plots import plot_recall_curves
            png = plot_recall_curves(plot, path.with_suffix(".png"), plot_title,
                                     f"{self.ds.name}, {len(self.ds)} questions, {self.embedder_name}")
            if png is not None:
                lines += ["", f"![Recall@k]({png.name})", ""]
        write_result(path, "\n".join(lines).rstrip() + "\n")
        logger.info("wrote %s", path)
        return path

    def close(self) -> None:
        """Release the index handles."""
        self.factory.close()


def git_commit() -> str:
    """The report's commit: ``git rev-parse --short HEAD``, flagged when tracked files differ."""
    head = git_head()
    if head is None:
        return "unknown (git not available)"
    commit, dirty = head
    return commit + (" (working tree had uncommitted changes)" if dirty else "")
