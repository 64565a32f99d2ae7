"""Markdown pieces shared by the table reports: number formats, tables, notes."""
from __future__ import annotations

from collections.abc import Sequence

from hippo_engine.evaluation.datasets import Dataset

from .methods import Method

S_NOTE = ("*s / question*: retrieval time per question when the result was computed, on this machine (CPU); "
          "rows whose filter prompts equal another row's were answered from the LLM cache and show that speed.")


def fmt(x: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals, ``n/a`` for ``None``."""
    return "n/a" if x is None else f"{x:.{digits}f}"


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal, ``n/a`` for ``None``."""
    return "n/a" if x is None else f"{100.0 * x:.1f}"


def rows_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table."""
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def curve_table(ks: Sequence[int], curves: dict[str, dict[int, float] | None]) -> list[str]:
    """One Recall@k row per method (``not run`` where it has no results)."""
    rows = [[label] + ([pct(c[k]) for k in ks] if c else ["not run"] * len(ks)) for label, c in curves.items()]
    return rows_table(["method"] + [f"R@{k}" for k in ks], rows)


def llm_label(llm_name: str, used: bool) -> str:
    """The report's LLM cell."""
    return f"`{llm_name}`" if used else f"not used by this table (`{llm_name}` would be)"


def not_run(m: Method) -> str:
    """The cell of a configuration that was neither cached nor selected."""
    return f"not run (add `--only {m.key}`)"


def require_gold(ds: Dataset) -> None:
    """Stop with a message when the dataset has no gold passages (recall tables need them)."""
    if ds.gold_docs is None:
        raise SystemExit(f"dataset {ds.name} has no gold passages (no paragraphs / supporting_facts / "
                         "contexts in its question file): recall tables cannot be computed; table-qa and "
                         "table-graph still work")
