"""Reading an LLM's n-ary fact reply (``extractor="nary"``), as pure functions.

:func:`parse_nary` reads a reply and never raises: code fences, prose around the JSON, one JSON
object per line, truncation (only complete segments are kept), missing, extra or mistyped
fields, duplicates and garbage are tolerated; what cannot be used is counted in ``dropped``.
Model output is only ever parsed as JSON, never evaluated. The data classes of a parsed reply
and of a stored result live here too; :mod:`hippo_engine.index.nary` runs the LLM and keeps the
results file.
"""
from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hippo_engine.datatypes import Hyperedge
from hippo_engine.lenient_json import json_depth, json_events, parse_json_lenient
from hippo_engine.normalize import alnum_count

logger = logging.getLogger(__name__)

PROMPT_NAME = "nary_facts.json"
FILE_FORMAT, FILE_VERSION = "hippo-engine/nary", 1

# accepted spellings of the reply's keys (compared lower-case, spaces and hyphens as "_")
SEGMENT_LIST_KEYS = ("segments", "knowledge_segments", "facts", "hyperedges", "knowledge", "results")
TEXT_KEYS = ("text", "segment", "knowledge_segment", "fact", "statement", "sentence", "content")
ENTITY_LIST_KEYS = ("entities", "named_entities", "entity_list", "entity")
NAME_KEYS = ("name", "entity_name", "entity", "text")
TYPE_KEYS = ("type", "entity_type", "category")
DESCRIPTION_KEYS = ("description", "entity_description", "desc")
COMPLETENESS_KEYS = ("completeness", "completeness_score", "score")
IMPORTANCE_KEYS = ("importance", "importance_score", "key_score", "score")


# ------------------------------------------------------------------ data
@dataclass(frozen=True)
class NaryEntity:
    name: str
    type: str | None = None
    description: str | None = None
    importance: int | None = None      # 0-100

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "description": self.description,
                "importance": self.importance}


@dataclass(frozen=True)
class NarySegment:
    text: str
    entities: tuple[NaryEntity, ...]
    completeness: int | None = None    # 0-10

    def hyperedge(self) -> Hyperedge:
        return Hyperedge(self.text, tuple(e.name for e in self.entities))

    def to_json(self) -> dict:
        return {"text": self.text, "completeness": self.completeness,
                "entities": [e.to_json() for e in self.entities]}


@dataclass
class NaryParse:
    """What :func:`parse_nary` made of a reply. ``error`` is set when nothing usable was found."""

    segments: list[NarySegment] = field(default_factory=list)
    dropped: int = 0          # segments and entities left out (unusable, duplicate or cut off)
    truncated: bool = False   # the reply's JSON was cut off; only complete segments were kept
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class NaryResult:
    """The kept segments of one passage (one doc of the results file)."""

    idx: str
    passage: str
    segments: list[NarySegment] = field(default_factory=list)
    dropped: int = 0
    truncated: bool = False

    def hyperedges(self) -> list[Hyperedge]:
        return [s.hyperedge() for s in self.segments]

    def to_json(self) -> dict:
        return {"idx": self.idx, "passage": self.passage, "segments": [s.to_json() for s in self.segments],
                "dropped": self.dropped, "truncated": self.truncated}


# ------------------------------------------------------------------ reading a reply
def _key(k: Any) -> str:
    return re.sub(r"[\s\-]+", "_", k.strip().lower()) if isinstance(k, str) else ""


def _keyed(d: dict) -> dict[str, Any]:
    """``d`` with normalised keys (first spelling wins)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.setdefault(_key(k), v)
    return out


def _first(d: dict[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if k in d:
            return d[k]
    return None


def _clean_str(v: Any) -> str | None:
    if isinstance(v, str):
        v = " ".join(v.split())
        return v or None
    return None


def _score(v: Any, hi: int) -> int | None:
    """An integer score in ``[0, hi]`` from a number or a numeric string ("8", "8/10", "85%")."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", v)
        if not m:
            return None
        v = float(m.group(1))
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return int(min(max(round(v), 0), hi))


def _entity(raw: Any) -> NaryEntity | None:
    if isinstance(raw, str) or (isinstance(raw, int) and not isinstance(raw, bool)):
        name, kd = _clean_str(str(raw)), {}
    elif isinstance(raw, dict):
        kd = _keyed(raw)
        name = _first(kd, NAME_KEYS)
        if isinstance(name, int) and not isinstance(name, bool):
            name = str(name)
        name = _clean_str(name)
    else:
        return None
    if name is None or alnum_count(name) == 0:
        return None
    return NaryEntity(name, _clean_str(_first(kd, TYPE_KEYS)), _clean_str(_first(kd, DESCRIPTION_KEYS)),
                      _score(_first(kd, IMPORTANCE_KEYS), 100))


def _segment(raw: Any) -> tuple[NarySegment | None, int]:
    """A segment and how many of its entities were dropped; ``None`` when it is unusable."""
    if not isinstance(raw, dict):
        return None, 0
    kd = _keyed(raw)
    text = _clean_str(_first(kd, TEXT_KEYS))
    ents_raw = _first(kd, ENTITY_LIST_KEYS)
    if isinstance(ents_raw, (str, dict)):
        ents_raw = [ents_raw]
    if not isinstance(ents_raw, list):
        ents_raw = []
    ents: dict[str, NaryEntity] = {}
    dropped = 0
    for e in ents_raw:
        ent = _entity(e)
        if ent is None or ent.name in ents:
            dropped += 1
        else:
            ents[ent.name] = ent
    if text is None or not ents:
        return None, dropped
    return NarySegment(text, tuple(ents.values()), _score(_first(kd, COMPLETENESS_KEYS), 10)), dropped


def _is_segment(d: dict) -> bool:
    kd = _keyed(d)
    return _first(kd, TEXT_KEYS) is not None and _first(kd, ENTITY_LIST_KEYS) is not None


def _find_segments(value: Any, depth: int = 0) -> list | None:
    """The list of segment-like items in a parsed reply (bounded search; never recursive deep)."""
    if isinstance(value, list):
        return _find_in_list(value, depth)
    if not isinstance(value, dict):
        return None
    return _find_in_dict(value, depth)


def _find_in_list(value: list, depth: int) -> list:
    """A list is the segments, unless it wraps one non-segment object that holds them."""
    if len(value) == 1 and isinstance(value[0], dict) and not _is_segment(value[0]) and depth < 3:
        inner = _find_segments(value[0], depth + 1)
        if inner is not None:
            return inner
    return value


def _find_in_dict(value: dict, depth: int) -> list | None:
    """Segments under a known list key, the object itself, or inside a nested object."""
    kd = _keyed(value)
    for k in SEGMENT_LIST_KEYS:
        v = kd.get(k)
        if isinstance(v, list):
            return v
        if isinstance(v, dict) and _is_segment(v):
            return [v]
    if _is_segment(value):
        return [value]
    if depth < 3:
        for v in value.values():
            if isinstance(v, dict):
                inner = _find_segments(v, depth + 1)
                if inner is not None:
                    return inner
    return None


_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)(?:```|$)", re.DOTALL)
_LIST_START = re.compile(r'"(?:' + "|".join(SEGMENT_LIST_KEYS) + r')"\s*:\s*\[', re.IGNORECASE)
_BARE_LIST = re.compile(r"\[(?=\s*\{)")
_DECODER = json.JSONDecoder()
MAX_STARTS = 64     # positions tried as the start of the reply's JSON
MAX_DEPTH = 64      # deeper nesting is garbage (a reply nests 5 deep), not worth json_repair's time


def _candidates(text: str) -> list[str]:
    """Where the JSON may be: inside the first code fence, then the whole reply."""
    m = _FENCE.search(text)
    return [m.group(1), text] if m and m.group(1).strip() else [text]


def _open_at_end(body: str) -> bool:
    """Whether the first JSON value of ``body`` is still open where the text ends (truncation)."""
    depth, in_str, started = 0, False, False
    for _, ev in json_events(body):
        if ev in "\"S":
            in_str = ev == '"'
        elif ev in "[{":
            depth, started = depth + 1, True
        elif ev in "]}":
            depth -= 1
            if depth <= 0 and started:
                return False
    return started and (depth > 0 or in_str)


def _top_level_starts(text: str, limit: int = MAX_STARTS) -> list[int]:
    """Positions of ``{`` and ``[`` outside any bracket or string seen before them (so that a
    value inside a cut-off list is not mistaken for the reply's JSON)."""
    out: list[int] = []
    depth = 0
    for i, ev in json_events(text):
        if ev in "[{":
            if depth == 0:
                out.append(i)
                if len(out) >= limit:
                    break
            depth += 1
        elif ev in "]}":
            depth = max(depth - 1, 0)
    return out


def _values_from(body: str, pos: int, *, stop: str = "") -> tuple[list, int]:
    """Successive complete JSON values from ``pos`` (separated by space or commas) up to
    ``stop``, the end, or the first one that does not decode; and where that was."""
    out: list = []
    while True:
        while pos < len(body) and (body[pos].isspace() or body[pos] == ","):
            pos += 1
        if pos >= len(body) or body[pos] in stop:
            return out, pos
        try:
            value, pos = _DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError):
            return out, pos
        out.append(value)


def _well_formed_items(cands: list[str]) -> tuple[list | None, list | None]:
    """Well-formed JSON, maybe with prose around it: (items found, or None; the first list of
    non-objects seen, kept as a fallback)."""
    fallback = None
    for cand in cands:
        for pos in _top_level_starts(cand):
            try:
                value, end = _DECODER.raw_decode(cand, pos)
            except (ValueError, RecursionError):
                continue
            items = _find_segments(value)
            if items is None:
                continue
            if isinstance(value, dict) and _is_segment(value):   # one segment object per line
                more, _ = _values_from(cand, end)
                items = [value] + [v for v in more if isinstance(v, dict) and _is_segment(v)]
            if any(isinstance(x, dict) for x in items) or isinstance(value, dict):
                return items, fallback
            if fallback is None:
                fallback = items
    return None, fallback


def _cut_list_items(cands: list[str]) -> tuple[tuple[list, bool] | None, list | None]:
    """A cut-off or damaged list: (its complete items and whether it was truncated, or None;
    the complete items of a damaged list, or None)."""
    partial = None
    for cand in cands:
        m = _LIST_START.search(cand) or _BARE_LIST.search(cand)
        if not m:
            continue
        items, pos = _values_from(cand, m.end(), stop="]")
        if items and (pos >= len(cand) or cand[pos] == "]" or _open_at_end(cand[pos:])):
            return (items, pos >= len(cand) or cand[pos] != "]"), partial
        partial = partial or items or None
    return None, partial


def _looks_cut(cands: list[str]) -> bool:
    """Unclosed brackets at the end of a candidate: cut off (or just malformed)."""
    return any(_open_at_end(c[min(p for p in (c.find("{"), c.find("[")) if p >= 0):])
               for c in cands if "{" in c or "[" in c)


def _repaired_items(text: str) -> list | None:
    """Other malformations: json_repair (skipped on deep garbage, where it is slow)."""
    if json_depth(text) > MAX_DEPTH:
        return None
    try:
        return _find_segments(parse_json_lenient(text))
    except (ValueError, RecursionError):
        return None


def _segment_items(text: str, cut_off: bool | None) -> tuple[list | None, bool, bool]:
    """(segment-like items or None, truncated, whether the last item may be cut off)."""
    cands = _candidates(text)
    items, fallback = _well_formed_items(cands)
    if items is not None:
        return items, False, False
    found, partial = _cut_list_items(cands)
    if found is not None:
        return found[0], found[1], False
    cut = _looks_cut(cands) if cut_off is None else cut_off
    items = _repaired_items(text)
    if items is not None and (partial is None or len(items) > len(partial)):
        return items, cut, cut
    if partial is not None:                         # its items decoded strictly: none is cut
        return partial, cut, False
    return fallback, cut, False


def parse_nary(text: Any, *, cut_off: bool | None = None) -> NaryParse:
    """Segments from an n-ary facts reply. Never raises; see the module docstring.

    ``cut_off``: whether the reply was cut off (``finish_reason == "length"``); ``None`` (unknown)
    takes JSON brackets left open at the end for a cut. A cut-off reply keeps its complete
    segments only; a reply that ended normally but has mismatched brackets keeps all it can.
    """
    try:
        return _parse_nary(text, cut_off)
    except Exception as e:  # model output must never break indexing
        logger.debug("n-ary reply could not be read", exc_info=True)
        return NaryParse(error=f"unreadable reply ({type(e).__name__})")


def _parse_nary(text: Any, cut_off: bool | None) -> NaryParse:
    if not isinstance(text, str) or not text.strip():
        return NaryParse(error="empty reply")
    items, truncated, last_suspect = _segment_items(text, cut_off)
    if items is None:
        return NaryParse(truncated=truncated, error=f"no list of segments in the reply: {text[:160]!r}")
    dropped = 0
    if last_suspect and items:
        items, dropped = items[:-1], 1
    kept: dict[str, NarySegment] = {}
    for raw in items:
        seg, lost = _segment(raw)
        dropped += lost
        if seg is None or seg.text in kept:
            dropped += 1
        else:
            kept[seg.text] = seg
    segments = list(kept.values())
    error = None
    if not segments and truncated and not items:
        error = "the reply was cut off before its first complete segment"
    elif not segments and dropped:
        error = f"none of the {len(items)} segment(s) in the reply has both text and an entity: {text[:160]!r}"
    return NaryParse(segments, dropped, truncated, error)
