"""The report side of a table command: its header (command, data, models, indexes, commit, time,
tokens), its file name and the markdown / PNG it writes. Mixed into :class:`.runner.Runner`."""
from __future__ import annotations

import datetime as _dt
import logging
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine.evaluation.datasets import default_data_root
from hippo_engine.evaluation.metrics import DEFAULT_RECALL_KS

from ..common import RESULTS_DIR, commit_label, write_result
from .meter import sum_llm, tokens_line
from .methods import DEFAULTS
from .paper import PAPER_CANONICAL, PAPER_SETUP, paper_column

logger = logging.getLogger(__name__)


class ReportMixin:
    """Header, file name and writing of a table report (uses the runner's attributes)."""

    def ks(self) -> list[int]:
        """The k values of Recall@k (up to ``retrieval_top_k``)."""
        return [k for k in DEFAULT_RECALL_KS if k <= DEFAULTS.retrieval_top_k]

    def command(self) -> str:
        """The exact command of this run."""
        return "python -m reproduce " + shlex.join(self.argv)

    def out_path(self, table: str) -> Path:
        """``<results>/<dataset>/<table>[-<extractors>][-dense-firstN][-shuffleSEED][-no-filter].md``
        (the extractors when other than openie alone)."""
        root = Path(self.args.out) if self.args.out else RESULTS_DIR
        extractors = [r.extractor for r in self.runners]
        suffix = "" if extractors == ["openie"] else "-" + "-".join(extractors)
        suffix += f"-dense-first{self.args.dense_first}" if self.args.dense_first else ""
        suffix += f"-shuffle{self.args.shuffle_corpus}" if self.args.shuffle_corpus is not None else ""
        suffix += "-no-filter" if (self.args.no_filter and table != "graph") else ""
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
        several = len(self.runners) > 1
        facts = "; ".join(r.facts_note() for r in self.runners)
        if self.args.forbid_llm:
            uses_llm = "none: `--forbid-llm` made every LLM call an error, and the run completed"
        index = "; ".join((f"{r.extractor}: " if several else "") + f"`{r.save_dir}`, {r.index_note}"
                          for r in self.runners)
        ds_line = self.dataset_line() + (f"; corpus indexed in an order shuffled with seed {self.args.shuffle_corpus} "
                                         "(`--shuffle-corpus`)" if self.args.shuffle_corpus is not None else "")
        col = paper_column(self.ds.name)
        paper_note = "n/a (the paper does not report this dataset)" if col is None else (
            f"{col} column" + ("" if PAPER_CANONICAL[col] == self.ds.name
                               else f" — the paper's `{PAPER_CANONICAL[col]}` question set, not `{self.ds.name}`; "
                                    "compare trends, not values"))
        lines = [f"# {title}", "", f"Reproduces the HippoRAG 2 paper, {paper_ref}. Regenerate with:", "",
                 "```bash", self.command(), "```", "",
                 "| | |", "| --- | --- |",
                 f"| dataset | {ds_line} |",
                 f"| embedder | `{self.embedder_name}` |",
                 f"| facts (extractor) | {facts} |",
                 f"| LLM (filter, query NER, reader) | {uses_llm} |",
                 f"| recognition filter | {self.filter_note()} |",
                 f"| index | {index} |",
                 f"| paper figures | {PAPER_SETUP}; {paper_note} |",
                 f"| git commit | `{commit}` |",
                 f"| wall time | {wall:.1f} s for this invocation; {compute:.1f} s of retrieval/reading behind the "
                 f"per-question results shown (measured when they were computed, partly in earlier runs) |",
                 f"| LLM tokens | this invocation: {tokens_line(self.llm.snapshot())}; behind the results shown: "
                 f"{tokens_line(cached_llm)} |",
                 f"| computed by this invocation | {computed or 'nothing (all results cached)'} |",
                 f"| generated | {_dt.datetime.now().isoformat(timespec='seconds')} |", ""]
        return lines

    def facts_note(self) -> str:
        """How this runner's index got its facts."""
        if self.extractor == "ner":
            return "`ner`: spaCy NER + sentences as facts, no LLM (index and query side)"
        if self.openie:
            return f"`{self.extractor}`, OpenIE `{self.openie.name}` (file, imported; no LLM call)"
        return f"`{self.extractor}` by {self.llm_name} (run by the engine when the index was built)"

    def filter_note(self) -> str:
        """The report's recognition-filter cell."""
        if self.args.no_filter:
            return "off (`--no-filter`)"
        has_ner = any(r.extractor == "ner" for r in self.runners)
        ner = " (the `ner` index never uses it: the LLM-free path)" if has_ner else ""
        return ("on" + ner) if any(r.use_filter for r in self.runners) else "off" + ner

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


def git_commit() -> str:
    """The report's commit: ``git rev-parse --short HEAD``, flagged when tracked files differ."""
    return commit_label(" (working tree had uncommitted changes)", "unknown (git not available)")
