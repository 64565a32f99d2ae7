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

:func:`parse_where` checks a filter (``ValueError`` naming what is wrong); :func:`matches` evaluates
it in Python (the reference); :func:`sql_where` compiles it for SQLite (``json_type``/``json_extract``)
or PostgreSQL (``jsonb``), with every value and key passed as a parameter. :func:`check_metadata`
checks the metadata given to ``index()``.
"""
from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Scalar = str | int | float | bool
Dialect = Literal["sqlite", "postgres"]

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


# ----------------------------------------------------------------------------- evaluation in Python
def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"


def _same(doc: Any, v: Scalar) -> bool:
    k = _kind(v)
    if _kind(doc) != k:
        return False
    return float(doc) == float(v) if k == "number" else doc == v


def _compare(doc: Any, op: str, v: Scalar) -> bool:
    k = _kind(v)
    if _kind(doc) != k:
        return False
    if k == "number":
        return _ORDER[op](float(doc), float(v))
    return _ORDER[op](str(doc), str(v))


_ORDER = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}


def matches(where: Filter | Mapping, metadata: Mapping | None) -> bool:
    """Whether a document with ``metadata`` (None: none) passes the filter (the reference the
    SQL of :func:`sql_where` agrees with)."""
    f = parse_where(where)
    meta = metadata or {}
    if isinstance(f, Junction):
        test = all if f.op == "$and" else any
        return test(matches(p, meta) for p in f.parts)
    if f.key not in meta:
        return False
    doc = meta[f.key]
    if f.op == "$eq":
        return _same(doc, f.value)
    if f.op == "$ne":
        return not _same(doc, f.value)
    if f.op == "$in":
        return any(_same(doc, v) for v in f.value)
    if f.op == "$nin":
        return not any(_same(doc, v) for v in f.value)
    return _compare(doc, f.op, f.value)


# ----------------------------------------------------------------------------- SQL
_SQL_OPS = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


class _Sql:
    """Typed views of one key of the metadata column, per dialect (``?`` for SQLite, ``%s`` for
    PostgreSQL; keys and values are always parameters)."""

    def __init__(self, dialect: Dialect, column: str):
        self.pg = dialect == "postgres"
        self.mark = "%s" if self.pg else "?"
        self.col = column

    def _key(self, key: str) -> str:
        return key if self.pg else f'$."{key}"'    # KEY allows no quote: the path is well formed

    def present(self, key: str) -> tuple[str, list]:
        if self.pg:
            return f"({self.col} -> %s::text) IS NOT NULL", [key]
        return f"json_type({self.col}, ?) IS NOT NULL", [self._key(key)]

    def typed(self, key: str, kind: str) -> tuple[str, list]:
        """The key's value as an SQL value when it has JSON type ``kind``, else NULL."""
        k = self._key(key)
        if self.pg:
            pg_type, expr = {"number": ("number", f"({self.col} ->> %s::text)::float8"),
                             "string": ("string", f"({self.col} ->> %s::text)"),
                             "bool": ("boolean", f"({self.col} ->> %s::text) = 'true'")}[kind]
            sql = f"(CASE WHEN jsonb_typeof({self.col} -> %s::text) = '{pg_type}' THEN {expr} END)"
            return (sql + ' COLLATE "C"' if kind == "string" else sql), [k, k]
        types, expr = {"number": ("'integer', 'real'", f"CAST(json_extract({self.col}, ?) AS REAL)"),
                       "string": ("'text'", f"json_extract({self.col}, ?)"),
                       "bool": ("'true', 'false'", f"json_type({self.col}, ?) = 'true'")}[kind]
        return f"(CASE WHEN json_type({self.col}, ?) IN ({types}) THEN {expr} END)", [k, k]

    @staticmethod
    def param(v: Scalar) -> Any:
        return float(v) if _kind(v) == "number" else v

    def compare(self, key: str, op: str, v: Scalar) -> tuple[str, list]:
        sql, params = self.typed(key, _kind(v))
        return f"{sql} {_SQL_OPS[op]} {self.mark}", [*params, self.param(v)]

    def one_of(self, key: str, values: Sequence[Scalar]) -> tuple[str, list]:
        parts, params = [], []
        for kind in ("string", "number", "bool"):
            vs = [self.param(v) for v in values if _kind(v) == kind]
            if not vs:
                continue
            sql, p = self.typed(key, kind)
            if self.pg:
                array = {"string": "text[]", "number": "float8[]", "bool": "bool[]"}[kind]
                parts.append(f"{sql} = ANY(%s::{array})")
                params += [*p, vs]
            else:
                parts.append(f"{sql} IN ({', '.join('?' * len(vs))})")
                params += [*p, *vs]
        return "(" + " OR ".join(parts) + ")", params

    def negated(self, key: str, positive: tuple[str, list]) -> tuple[str, list]:
        has, p = self.present(key)
        false = "FALSE" if self.pg else "0"
        return f"({has} AND NOT COALESCE({positive[0]}, {false}))", [*p, *positive[1]]


def sql_where(where: Filter | Mapping, dialect: Dialect, column: str = "metadata") -> tuple[str, list]:
    """``(sql, params)``: a boolean SQL expression over the JSON column ``column`` (text JSON on
    SQLite, ``jsonb`` on PostgreSQL) that holds exactly when :func:`matches` does."""
    return _compile(parse_where(where), _Sql(dialect, column))


def _compile(f: Filter, sql: _Sql) -> tuple[str, list]:
    if isinstance(f, Junction):
        parts = [_compile(p, sql) for p in f.parts]
        joiner = " AND " if f.op == "$and" else " OR "
        return "(" + joiner.join(s for s, _ in parts) + ")", [x for _, p in parts for x in p]
    if f.op in _SQL_OPS:
        return sql.compare(f.key, f.op, f.value)
    if f.op == "$ne":
        return sql.negated(f.key, sql.compare(f.key, "$eq", f.value))
    if f.op == "$in":
        return sql.one_of(f.key, f.value)
    return sql.negated(f.key, sql.one_of(f.key, f.value))


__all__ = ["COMPARE", "Condition", "Filter", "Junction", "LOGICAL", "OPERATORS", "MAX_METADATA_BYTES",
           "MAX_METADATA_DEPTH", "check_metadata", "check_metadata_item", "encode_metadata", "matches",
           "parse_where", "sql_where"]
