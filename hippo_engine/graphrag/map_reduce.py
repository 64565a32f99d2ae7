"""The map and reduce steps of ``graphrag_global``: prompts (``prompts/graphrag_map.json``,
``prompts/graphrag_reduce.json``), the parsing of the rated points, and their selection.

Map: one LLM call per batch of reports asks for the points that help answer the question, each
with a score 0-100, as JSON. The reply is read leniently (:func:`~hippo_engine.lenient_json.parse_json_lenient`:
code fences, prose around the JSON, truncation); a reply that is no JSON gives its ``- text (score: N)``
lines, else nothing. Nothing is evaluated as code. Reduce: the points with a positive score, best
first (ties: batch order), that fit ``graphrag_reduce_tokens``, are read by one last call that
answers in the form ``response_type``.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hippo_engine.hirag.context import pack_by_tokens
from hippo_engine.hirag.report_context import TokenCounter
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.prompts import load_json_prompt

MAP_PROMPT, REDUCE_PROMPT = "graphrag_map.json", "graphrag_reduce.json"
_LINE = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*(.+?)\s*[\(\[]?\s*score\s*[:=]\s*(\d+(?:\.\d+)?)\s*[\)\]]?\s*$", re.I)


@dataclass(frozen=True)
class Point:
    """One rated point of a map reply: ``description``, ``score`` (0-100) and the ``batch`` it came from."""

    description: str
    score: float
    batch: int = 0


def _prompt(name: str) -> dict:
    p = load_json_prompt(name)
    for k in ("system", "user_template"):
        if not isinstance(p.get(k), str):
            raise ValueError(f"prompts/{name} needs a string field {k!r}")
    return p


def map_messages(question: str, reports: Sequence[str]) -> list[dict]:
    """Chat messages of one map call over a batch of report lines."""
    p = _prompt(MAP_PROMPT)
    return [{"role": "system", "content": p["system"]},
            {"role": "user", "content": p["user_template"].format(question=question, reports="\n\n".join(reports))}]


def reduce_messages(question: str, points: Sequence[Point], response_type: str) -> list[dict]:
    """Chat messages of the reduce call over the kept points."""
    p = _prompt(REDUCE_PROMPT)
    shown = "\n".join(f"- [score {int(pt.score)}] {pt.description}" for pt in points) or "(no points)"
    return [{"role": "system", "content": p["system"].replace("{response_type}", response_type)},
            {"role": "user", "content": p["user_template"].format(question=question, points=shown)}]


def _score(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        s = float(v)
    elif isinstance(v, str):
        m = re.search(r"-?\d+(?:\.\d+)?", v)
        if not m:
            return None
        s = float(m.group())
    else:
        return None
    return min(max(s, 0.0), 100.0) if s == s else None


def _items(data: Any) -> list:
    if isinstance(data, dict):
        for k in ("points", "key_points", "results", "items"):
            if isinstance(data.get(k), list):
                return data[k]
        return [data] if "description" in data else []
    return data if isinstance(data, list) else []


def parse_points(text: str | None, batch: int = 0) -> list[Point]:
    """The rated points of a map reply (see the module docs); malformed items are skipped."""
    if not text:
        return []
    try:
        items = _items(parse_json_lenient(text))
    except (ValueError, TypeError):
        items = []
    out = []
    for it in items:
        if not isinstance(it, dict):
            continue
        desc = it.get("description", it.get("point", it.get("text")))
        score = _score(it.get("score", it.get("rating")))
        if isinstance(desc, str) and desc.strip() and score is not None:
            out.append(Point(" ".join(desc.split()), score, batch))
    if out or any(isinstance(it, dict) for it in items):    # JSON points, even if none was usable
        return out
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1).strip():
            out.append(Point(m.group(1).strip(), min(float(m.group(2)), 100.0), batch))
    return out


def select_points(points: Sequence[Point], count: TokenCounter, budget: int) -> list[Point]:
    """Points with a positive score, best first (ties: batch, then given order), that fit ``budget`` tokens."""
    ranked = sorted((p for p in points if p.score > 0), key=lambda p: (-p.score, p.batch))
    kept = pack_by_tokens([p.description for p in ranked], count, budget)
    return ranked[: len(kept)]
