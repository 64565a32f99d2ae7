"""One document list per index, however a document arrived: the index's document registry
(:mod:`hippo_engine.store.document_registry`, written by every path that indexes or deletes: Python, the
CLI, Ray, the service's worker) joined with the service's ingestion queue (``service_documents``), which
adds what the index cannot know: documents accepted but not indexed yet, failed ones, the title and job of
a document that came over HTTP.

A listing has two parts, in this order:

1. every document of the registry (in the order first indexed). Its status is the queue's where the queue
   holds a newer version of it (``pending``, ``processing``, ``failed``), else ``indexed``. Its title and
   job are the queue's when the queue's row is at least as new as the index's (a document indexed again by
   the CLI after it came over HTTP shows no stale title); its metadata is the index's. A document deleted
   over HTTP whose removal from the index has not run yet is hidden;
2. then the documents the queue holds that the index does not (yet): pending, processing or failed, in the
   order accepted.

A document the queue calls ``indexed`` but the index no longer holds (deleted by the CLI or Python) is in
neither part. Every statement here is plain SQL over the tables named ``{r}`` (the registry), ``{d}`` (the
queue's documents) and ``{m}`` (the index's document metadata), filled in by the job store's backend.
"""
from __future__ import annotations

from typing import Any

from hippo_engine.service.jobs import DELETED, FAILED, INDEXED, LISTED, PENDING, PROCESSING

#: statuses in which the queue's row, not the index, says where a document is
ACTIVE = (PENDING, PROCESSING, FAILED)
_ACTIVE_SQL = f"('{PENDING}', '{PROCESSING}', '{FAILED}')"
_FRESH = "s.updated >= r.updated"     # the queue's row is at least as new as the index's
#: the columns of a listed row (the order :meth:`JobStore._doc` reads)
_A_COLUMNS = (
    f"r.doc_id, CASE WHEN s.status IN {_ACTIVE_SQL} THEN s.status ELSE '{INDEXED}' END, s.rev, s.claimed_rev, "
    f"CASE WHEN {_FRESH} OR s.status IN {_ACTIVE_SQL} THEN s.title END, "
    f"CASE WHEN s.status IN {_ACTIVE_SQL} THEN COALESCE(s.metadata, m.metadata) WHEN {_FRESH} "
    "THEN COALESCE(m.metadata, s.metadata) ELSE m.metadata END, "
    f"s.error, CASE WHEN {_FRESH} OR s.status IN {_ACTIVE_SQL} THEN s.job_id END, "
    f"CASE WHEN {_FRESH} THEN s.updated ELSE r.updated END")
_A_FROM = (f"FROM {{r}} r LEFT JOIN {{d}} s ON s.doc_id = r.doc_id LEFT JOIN {{m}} m ON m.doc_id = r.doc_id "
           f"WHERE (s.doc_id IS NULL OR s.status <> '{DELETED}' OR s.updated < r.updated)")
_B_COLUMNS = "s.doc_id, s.status, s.rev, s.claimed_rev, s.title, s.metadata, s.error, s.job_id, s.updated"
_B_FROM = (f"FROM {{d}} s WHERE s.status IN {_ACTIVE_SQL} AND NOT EXISTS "
           "(SELECT 1 FROM {r} r WHERE r.doc_id = s.doc_id)")


def status_filter(status: str | None) -> str:
    """The SQL condition on the queue's row ``s`` for a listing of one ``status`` (None: all)."""
    if status is None:
        return "1 = 1"
    if status not in LISTED:
        raise ValueError(f"status must be one of {', '.join(LISTED)}; got {status!r}")
    if status == INDEXED:
        return f"(s.doc_id IS NULL OR s.status NOT IN {_ACTIVE_SQL})"
    if status == PENDING:        # a new version waiting behind the claim on an older one reads as pending
        return f"(s.status = '{PENDING}' OR s.status = '{PROCESSING}' AND s.claimed_rev <> s.rev)"
    if status == PROCESSING:
        return f"(s.status = '{PROCESSING}' AND s.claimed_rev = s.rev)"
    return f"s.status = '{FAILED}'"


def count(x, c, status: str | None = None) -> int:
    """How many documents a listing of ``status`` holds (``x(c, sql, params)`` runs a statement)."""
    cond = status_filter(status)
    a = x(c, f"SELECT COUNT(*) {_A_FROM} AND {cond}", ()).fetchone()[0]
    b = 0 if status == INDEXED else x(c, f"SELECT COUNT(*) {_B_FROM} AND {cond}", ()).fetchone()[0]
    return int(a) + int(b)


def page(x, c, status: str | None, offset: int, limit: int) -> tuple[list[Any], int]:
    """(rows, total) of one page of a listing: registry rows first, then the queue's own."""
    cond = status_filter(status)
    a = int(x(c, f"SELECT COUNT(*) {_A_FROM} AND {cond}", ()).fetchone()[0])
    b = 0 if status == INDEXED else int(x(c, f"SELECT COUNT(*) {_B_FROM} AND {cond}", ()).fetchone()[0])
    rows: list[Any] = []
    if offset < a:
        rows += x(c, f"SELECT {_A_COLUMNS} {_A_FROM} AND {cond} ORDER BY r.seq LIMIT ? OFFSET ?",
                  (limit, offset)).fetchall()
    left = limit - len(rows)
    if b and left > 0:
        rows += x(c, f"SELECT {_B_COLUMNS} {_B_FROM} AND {cond} ORDER BY s.seq, s.pos LIMIT ? OFFSET ?",
                  (left, max(0, offset - a))).fetchall()
    return rows, a + b


def one(x, c, doc_id: str) -> tuple[Any, str | None] | None:
    """(the listed row, its text where the queue holds the text indexed) of ``doc_id``; None: not listed.
    A registry row whose text only the index holds comes with None (the caller reads the passages)."""
    got = x(c, f"SELECT {_A_COLUMNS}, CASE WHEN {_FRESH} OR s.status IN {_ACTIVE_SQL} THEN s.text END "
               f"{_A_FROM} AND r.doc_id = ?", (doc_id,)).fetchone()
    if got is None:
        got = x(c, f"SELECT {_B_COLUMNS}, s.text {_B_FROM} AND s.doc_id = ?", (doc_id,)).fetchone()
    if got is None:
        return None
    return tuple(got[:9]), got[9]


__all__ = ["ACTIVE", "count", "one", "page", "status_filter"]
