"""Document metadata and the filters over it (``where=``): checked, compiled to SQL, evaluated.

Each document may carry a JSON object (``index(docs, metadata=[...])``: who wrote it, the session,
a time, anything). A query's ``where`` picks documents by their metadata; only the passages of
matching documents (and the facts and entities of those passages) take part in the ranking.

The filter language, small on purpose (as mem0's user/agent/session scopes, MongoDB spelling):

- ``{"user": "alice"}``: equality; several keys in one object must all hold;
- ``{"time": {"$gte": 10, "$lt": 20}}``: operators ``$eq``, ``$ne``, ``$in``, ``$nin``, ``$gt``,
  ``$gte``, ``$lt``, ``$lte`` (several in one object must all hold);
- ``{"$and": [f1, f2]}``, ``{"$or": [f1, f2]}``: lists of filters.

Keys are top-level metadata keys (letters, digits, ``_`` and ``-``). Values are strings, numbers
and booleans; ``$in``/``$nin`` take a non-empty list of them. Types never mix: a number matches only
numbers (compared as 64-bit floats, so ``1`` equals ``1.0``), a string only strings (compared by
code point), a boolean only booleans. Every condition, ``$ne`` and ``$nin`` included, needs the
key to be present: ``{"user": {"$ne": "bob"}}`` does not match a document without ``user``.

:func:`parse_where` checks a filter (``ValueError`` naming what is wrong) and :func:`check_metadata`
checks the metadata given to ``index()``: here, on the base floor, so that the configuration and the
per-call options check a filter without the storage package. Evaluating a filter (in Python and in
SQL) is the store's: :mod:`hippo_engine.store.metadata`, which re-exports these names.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Scalar = str | int | float | bool

#: a filter key: a top-level metadata key of letters, digits, '_' and '-'
KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")
COMPARE = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = ("$eq", "$ne", "$in", "$nin", *COMPARE)
LOGICAL = ("$and", "$or")
#: bounds of one filter (its SQL stays small)
MAX_DEPTH, MAX_CONDITIONS, MAX_IN = 8, 64, 1000
#: bounds of one document's metadata: bytes of JSON, and nesting (a value inside MAX_METADATA_DEPTH
#: containers below the top object is refused; the service's front doors check the same, see
#: hippo_engine/service/jobs.py)
MAX_METADATA_BYTES = 65536
MAX_METADATA_DEPTH = 32
_INT64 = 2 ** 63


@dataclass(frozen=True)
class Condition:
    """One test on one key: ``op`` (one of :data:`OPERATORS`) and its ``value`` (a tuple for
    ``$in``/``$nin``)."""

    key: str
    op: str
    value: Any


@dataclass(frozen=True)
class Junction:
    """``$and`` / ``$or`` of parts (a filter object with several keys is an ``$and``)."""

    op: str
    parts: tuple[Condition | Junction, ...]


Filter = Condition | Junction


class _Budget:
    def __init__(self) -> None:
        self.conditions = 0

    def spend(self) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise ValueError(f"where: more than {MAX_CONDITIONS} conditions; simplify the filter")


def parse_where(where: Any) -> Filter:
    """The checked form of a filter (see the module documentation); ``ValueError`` (``TypeError``
    for a filter that is not an object) naming the part that is wrong."""
    if isinstance(where, (Condition, Junction)):
        return where
    if not isinstance(where, Mapping):
        raise TypeError(f"where must be an object (a dict) such as {{'user': 'alice'}}, got {type(where).__name__}")
    return _parse_object(where, "where", 0, _Budget())


def _parse_object(obj: Mapping, at: str, depth: int, budget: _Budget) -> Filter:
    if depth >= MAX_DEPTH:
        raise ValueError(f"{at}: filters nest at most {MAX_DEPTH} deep")
    if not obj:
        raise ValueError(f"{at}: an empty filter object; give at least one condition")
    parts: list[Filter] = []
    for key, cond in obj.items():
        if not isinstance(key, str):
            raise ValueError(f"{at}: keys must be strings, got {key!r}")
        if key in LOGICAL:
            parts.append(_parse_logical(key, cond, f"{at}.{key}", depth, budget))
        elif key.startswith("$"):
            raise ValueError(f"{at}: unknown operator {key!r} here; use {' or '.join(LOGICAL)} to combine "
                             f"filters, or a metadata key with conditions ({', '.join(OPERATORS)})")
        else:
            if not KEY.match(key):
                raise ValueError(f"{at}: metadata key {key!r}: filter keys are top-level keys of letters, digits, "
                                 "'_' and '-' (at most 64)")
            parts.extend(_parse_conditions(key, cond, f"{at}.{key}", budget))
    return parts[0] if len(parts) == 1 else Junction("$and", tuple(parts))


def _parse_logical(op: str, items: Any, at: str, depth: int, budget: _Budget) -> Junction:
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"{at}: {op} takes a non-empty list of filter objects")
    parts = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"{at}[{i}]: a filter object expected, got {type(item).__name__}")
        parts.append(_parse_object(item, f"{at}[{i}]", depth + 1, budget))
    return Junction(op, tuple(parts))


def _parse_conditions(key: str, cond: Any, at: str, budget: _Budget) -> list[Condition]:
    if not isinstance(cond, Mapping):
        budget.spend()
        return [Condition(key, "$eq", _scalar(cond, at))]
    if not cond:
        raise ValueError(f"{at}: an empty condition object; give an operator such as {{'$eq': ...}}")
    out = []
    for op, value in cond.items():
        budget.spend()
        if op not in OPERATORS:
            raise ValueError(f"{at}: unknown operator {op!r}; the operators are {', '.join(OPERATORS)}")
        where = f"{at}.{op}"
        if op in ("$in", "$nin"):
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"{where}: a non-empty list of strings, numbers or booleans expected")
            if len(value) > MAX_IN:
                raise ValueError(f"{where}: at most {MAX_IN} values")
            out.append(Condition(key, op, tuple(_scalar(v, f"{where}[{i}]") for i, v in enumerate(value))))
            continue
        v = _scalar(value, where)
        if op in COMPARE and isinstance(v, bool):
            raise ValueError(f"{where}: {op} compares numbers or strings, not booleans")
        out.append(Condition(key, op, v))
    return out


def _scalar(value: Any, at: str) -> Scalar:
    if isinstance(value, bool) or isinstance(value, str):
        if isinstance(value, str):
            _check_text(value, at)
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"{at}: integers must fit in 64 bits, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{at}: numbers must be finite, got {value}")
        return value
    raise ValueError(f"{at}: a string, number or boolean expected, got {type(value).__name__} {value!r:.60}")


def _check_text(text: str, at: str) -> None:
    if "\x00" in text:
        raise ValueError(f"{at}: text with a NUL character (\\x00), which PostgreSQL cannot store")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise ValueError(f"{at}: text with a lone surrogate (not valid Unicode)")


# ----------------------------------------------------------------------------- metadata given to index()
def check_metadata(metadata: Any, n: int, what: str) -> list[dict | None]:
    """``metadata``: a list (or tuple) of ``n`` JSON objects (dicts), one per document; an item
    ``None`` gives none for that document (a known one keeps what is stored, a new one has none).
    Returns detached copies; a ``ValueError`` (``TypeError`` for the wrong container) names the position.
    Keys are non-empty strings; values are JSON (objects, lists, strings, finite numbers, integers
    within 64 bits, booleans, null) without NUL characters; at most 64 KiB of JSON a document."""
    if isinstance(metadata, (str, bytes, Mapping)) or not isinstance(metadata, (list, tuple)):
        raise TypeError(f"{what}(): metadata must be a list of dicts, one per document, got {type(metadata).__name__}")
    if len(metadata) != n:
        raise ValueError(f"{what}(): metadata has {len(metadata)} item(s) but there are {n} document(s); give one "
                         "dict per document ({} for none)")
    out: list[dict | None] = []
    for i, m in enumerate(metadata):
        at = f"{what}(): metadata item {i}"
        if m is None:
            out.append(None)
            continue
        out.append(check_metadata_item(m, at))
    return out


def check_metadata_item(m: Any, at: str) -> dict:
    """One document's metadata (a dict) as :func:`check_metadata` checks it, a detached copy; the
    ``ValueError`` starts with ``at``."""
    if not isinstance(m, Mapping):
        raise ValueError(f"{at} must be a dict (a JSON object) or None, got {type(m).__name__}")
    _check_json(m, at, 0)
    text = encode_metadata(m)
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise ValueError(f"{at} is {len(text.encode('utf-8')):,} bytes of JSON; at most {MAX_METADATA_BYTES:,}")
    return json.loads(text)


def _check_json(value: Any, at: str, depth: int) -> None:
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"{at}: nested more than {MAX_METADATA_DEPTH} deep")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (str, int, float)):
        _scalar(value, at)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"{at}: keys must be non-empty strings, got {k!r}")
            _check_text(k, f"{at} key {k!r:.40}")
            _check_json(v, f"{at}[{k!r:.40}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        for j, v in enumerate(value):
            _check_json(v, f"{at}[{j}]", depth + 1)
    else:
        raise ValueError(f"{at}: {type(value).__name__} is not JSON (use strings, numbers, booleans, null, lists "
                         "and objects)")


def encode_metadata(metadata: Mapping) -> str:
    """The stored JSON text of a document's metadata (keys sorted, compact)."""
    return json.dumps(metadata, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


__all__ = ["COMPARE", "KEY", "LOGICAL", "MAX_CONDITIONS", "MAX_DEPTH", "MAX_IN", "MAX_METADATA_BYTES",
           "MAX_METADATA_DEPTH", "OPERATORS", "Condition", "Filter", "Junction", "Scalar", "check_metadata",
           "check_metadata_item", "encode_metadata", "parse_where"]
