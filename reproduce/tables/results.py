"""Per-question results: the resumable JSONL cache and the recall statistics computed from it."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


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


def sha(obj: Any, n: int = 16) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``obj`` as canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:n]


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


def mean(values: Sequence[float]) -> float | None:
    """The mean, or ``None`` for no values."""
    values = list(values)
    return sum(values) / len(values) if values else None


def per_question_recall(entries: Sequence[dict], k: int) -> list[float]:
    """Recall@k of each question (0 for a question without gold)."""
    return [(sum(1 for r in e["gold_ranks"] if r is not None and r <= k) / e["n_gold"]) if e["n_gold"] else 0.0
            for e in entries]


def paired_difference(a: Sequence[dict], b: Sequence[dict], k: int = 5, resamples: int = 2000,
                      seed: int = 0) -> dict:
    """Per-question Recall@k of ``a`` minus ``b`` (same questions, same order): the mean
    difference, a 95% bootstrap interval (deterministic seed), and how many questions got
    better / worse."""
    d = [x - y for x, y in zip(per_question_recall(a, k), per_question_recall(b, k), strict=False)]
    if not d:
        return {"mean": 0.0, "low": 0.0, "high": 0.0, "better": 0, "worse": 0}
    rng = random.Random(seed)
    n = len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"mean": sum(d) / n, "low": means[int(0.025 * resamples)], "high": means[int(0.975 * resamples) - 1],
            "better": sum(1 for x in d if x > 0), "worse": sum(1 for x in d if x < 0)}
