"""Document metadata filters (``where=``) evaluated: in Python (:func:`matches`, the reference) and
compiled to SQL (:func:`sql_where`) for SQLite (``json_type``/``json_extract``) or PostgreSQL
(``jsonb``), with every value and key passed as a parameter.

The filter language and the checks of metadata given to ``index()`` (:func:`parse_where`,
:func:`check_metadata`) live on the base floor, :mod:`hippo_engine.metadata_check` (the configuration
checks a filter without the storage package); they are re-exported here.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from hippo_engine.metadata_check import (
    COMPARE,
    LOGICAL,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    OPERATORS,
    Condition,
    Filter,
    Junction,
    Scalar,
    check_metadata,
    check_metadata_item,
    encode_metadata,
    parse_where,
)

Dialect = Literal["sqlite", "postgres"]


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


__all__ = ["COMPARE", "LOGICAL", "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH", "OPERATORS", "Condition", "Dialect",
           "Filter", "Junction", "check_metadata", "check_metadata_item", "encode_metadata", "matches",
           "parse_where", "sql_where"]
