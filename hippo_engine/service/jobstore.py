"""The ingestion queue in the index database: :class:`JobStore`, over the job tables its storage backend
keeps beside the index (:class:`~hippo_engine.store.jobs.JobTables`: the index's SQLite file, or its
PostgreSQL schema), handed out by the backend of the index a ``HippoRAG`` opened (:func:`open_job_store`).

Three tables beside the index's own: ``service_jobs`` (one row per accepted batch), ``service_documents``
(one row per document id: its latest accepted text, title and metadata, status, error, revision and the
owner of a claim on it) and ``service_job_items`` (which document revisions a job accepted). Every change is
one transaction, so what ``add`` returned is on disk, and a claim is atomic: a document is claimed by one
worker at a time, whichever process it runs in.

Rules that make "nothing accepted is lost or indexed twice" hold (see :mod:`.ingest`):

* a document added again while claimed keeps its claim (``processing``) with a new revision; the claim's
  end puts it back to ``pending`` rather than ``indexed`` (the newer text is indexed next);
* a document deleted while claimed becomes a tombstone that keeps its owner; the claim's end reports it so
  the worker removes it from the index; a tombstone whose removal from the index is not yet done has
  ``purged = 0`` (:meth:`JobStore.unpurged`);
* claims of owners that are gone (:func:`.jobs.owner_alive`) are reset by :meth:`JobStore.reset_stale`;
* a tombstone removed from the index after it was added again is indexed again (:meth:`JobStore.requeue`).
"""
from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hippo_engine.service import doclist
from hippo_engine.service.jobs import (
    DELETED,
    FAILED,
    INDEXED,
    LISTED,
    PENDING,
    PROCESSING,
    NewDocument,
    iso,
    job_view,
    now,
    shown_metadata,
    shown_status,
)
from hippo_engine.store.jobs import JobTables
from hippo_engine.store.registry import get_backend

#: tries of a write that the database aborted to break a deadlock (the backend's ``retry_on`` errors)
RETRIES = 6


def _storable(key: str) -> bool:
    """Whether a document or job id can be in the tables: no NUL (which PostgreSQL cannot hold in text; the
    queue never accepts an id with a control character). Lookups of other ids find nothing and never reach
    the database, on either backend."""
    return "\x00" not in key


def _retried(method):
    """Run a write again (a new transaction) when the database aborted it for a conflict it resolves by
    aborting one side (PostgreSQL: a deadlock); nothing of an aborted try was committed."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        for attempt in range(RETRIES):
            try:
                return method(self, *args, **kwargs)
            except self.tables.retry_on:
                if attempt == RETRIES - 1:
                    raise
                time.sleep(0.02 * 2 ** attempt)
    return run


class JobStore:
    """The job and document tables of one index, on the job tables ``tables`` its backend gave (owned:
    :meth:`close` closes them). Thread-safe (one connection, used under the tables' lock)."""

    def __init__(self, tables: JobTables):
        self.tables = tables
        #: row-locking clauses of the claim's SELECT and of a SELECT before an UPDATE (PostgreSQL; SQLite's
        #: write transactions exclude each other). Rows are locked in doc id order, except by the claim, which
        #: skips locked rows and so never waits.
        self._claim_lock, self._row_lock = tables.claim_lock, tables.row_lock
        #: the backend's name (``sqlite``, ``postgres``) and where the tables are, for messages
        self.name, self.location = tables.name, tables.location

    def _x(self, c, sql: str, params: Sequence = ()) -> Any:
        return self.tables.x(c, sql, params)

    def close(self) -> None:
        """Close the connection."""
        self.tables.close()

    # ------------------------------------------------------------------ accepting
    @_retried
    def add(self, docs: Sequence[NewDocument]) -> str:
        """Accept ``docs`` as one new job (committed before returning); returns the job id."""
        job_id, t = uuid.uuid4().hex, now()
        with self.tables.write() as c:
            seq = self.tables.new_job(c, job_id, t, len(docs))
            for pos, d in sorted(enumerate(docs), key=lambda x: x[1].id):     # rows locked in one order
                self._put(c, d, job_id, seq, pos, t)
        return job_id

    def _put(self, c, d: NewDocument, job_id: str, seq: int, pos: int, t: float) -> None:
        meta = None if d.metadata is None else json.dumps(d.metadata, ensure_ascii=False, sort_keys=True)
        rev = 1
        if self._x(c, "INSERT INTO {d} (doc_id, rev, status, text, title, metadata, error, job_id, seq, pos, attempts, "
                      "owner, claimed_rev, purged, created, updated) VALUES (?, 1, ?, ?, ?, ?, NULL, ?, ?, ?, 0, NULL, "
                      "NULL, 1, ?, ?) ON CONFLICT (doc_id) DO NOTHING",
                   (d.id, PENDING, d.text, d.title, meta, job_id, seq, pos, t, t)).rowcount != 1:
            row = self._x(c, "SELECT rev, owner FROM {d} WHERE doc_id = ?" + self._row_lock, (d.id,)).fetchone()
            rev = row[0] + 1
            status = PROCESSING if row[1] is not None else PENDING     # a claim on an older version ends first
            self._x(c, "UPDATE {d} SET rev = ?, status = ?, text = ?, title = ?, metadata = COALESCE(?, metadata), "
                       "error = NULL, job_id = ?, seq = ?, pos = ?, attempts = 0, purged = 1, updated = ? "
                       "WHERE doc_id = ?",
                    (rev, status, d.text, d.title, meta, job_id, seq, pos, t, d.id))
        self._x(c, "INSERT INTO {i} (job_id, pos, doc_id, rev) VALUES (?, ?, ?, ?)", (job_id, pos, d.id, rev))

    @_retried
    def retry_failed(self) -> tuple[str, list[str]] | None:
        """Put every failed document back in the queue as one new job: (job id, ids); None if none failed."""
        t = now()
        with self.tables.write() as c:
            rows = self._x(c, "SELECT doc_id, rev, seq, pos FROM {d} WHERE status = ? ORDER BY doc_id" + self._row_lock,
                           (FAILED,)).fetchall()
            rows.sort(key=lambda r: (r[2], r[3]))
            if not rows:
                return None
            job_id = uuid.uuid4().hex
            seq = self.tables.new_job(c, job_id, t, len(rows))
            for pos, (doc_id, rev, _, _) in enumerate(rows):
                self._x(c, "UPDATE {d} SET status = ?, error = NULL, attempts = 0, job_id = ?, seq = ?, pos = ?, "
                           "updated = ? WHERE doc_id = ?", (PENDING, job_id, seq, pos, t, doc_id))
                self._x(c, "INSERT INTO {i} (job_id, pos, doc_id, rev) VALUES (?, ?, ?, ?)", (job_id, pos, doc_id, rev))
        return job_id, [r[0] for r in rows]

    # ------------------------------------------------------------------ claims
    @_retried
    def claim(self, owner: str, limit: int) -> list[dict]:
        """Claim up to ``limit`` pending documents, oldest first, for ``owner`` (atomically: no two
        workers get one document). Each: ``{"id", "rev", "text", "title", "metadata", "attempts"}``."""
        t = now()
        with self.tables.write() as c:
            rows = self._x(c, "SELECT doc_id, rev, text, title, metadata, attempts FROM {d} WHERE status = ? "
                              "ORDER BY seq, pos LIMIT ?" + self._claim_lock, (PENDING, limit)).fetchall()
            for r in rows:
                self._x(c, "UPDATE {d} SET status = ?, owner = ?, claimed_rev = rev, updated = ? WHERE doc_id = ?",
                        (PROCESSING, owner, t, r[0]))
        return [{"id": r[0], "rev": r[1], "text": r[2], "title": r[3],
                 "metadata": None if r[4] is None else json.loads(r[4]), "attempts": r[5]} for r in rows]

    @_retried
    def finish(self, owner: str, outcomes: Iterable[tuple[str, int, str | None]]) -> list[str]:
        """End ``owner``'s claims: ``(doc id, claimed rev, error or None)`` each; ``None`` means indexed.
        Returns the ids deleted while claimed (the caller removes them from the index, then
        :meth:`mark_purged`). A claim that is no longer ``owner``'s (reset meanwhile) is left alone."""
        t, gone = now(), []
        with self.tables.write() as c:
            for doc_id, rev, error in sorted(outcomes, key=lambda o: o[0]):
                row = self._x(c, "SELECT status, rev, owner, claimed_rev FROM {d} WHERE doc_id = ?" + self._row_lock,
                              (doc_id,)).fetchone()
                if row is None or row[2] != owner:
                    continue
                if row[0] == DELETED:
                    gone.append(doc_id)
                    self._x(c, "UPDATE {d} SET owner = NULL, claimed_rev = NULL, purged = 0 WHERE doc_id = ?",
                            (doc_id,))
                elif row[1] != rev or row[3] != rev:    # added again, or requeued (:meth:`requeue`), meanwhile
                    self._x(c, "UPDATE {d} SET status = ?, owner = NULL, claimed_rev = NULL, updated = ? "
                               "WHERE doc_id = ?", (PENDING, t, doc_id))
                else:
                    self._x(c, "UPDATE {d} SET status = ?, error = ?, owner = NULL, claimed_rev = NULL, "
                               "updated = ? WHERE doc_id = ?", (FAILED if error else INDEXED, error, t, doc_id))
        return gone

    @_retried
    def release(self, owner: str, ids: Sequence[str], error: str, max_attempts: int) -> None:
        """Give ``owner``'s claims on ``ids`` back after a passing failure (the index was busy or
        unreachable): pending again, or failed with ``error`` once tried ``max_attempts`` times."""
        t = now()
        with self.tables.write() as c:
            for doc_id in sorted(set(ids)):
                row = self._x(c, "SELECT status, rev, claimed_rev, attempts, owner FROM {d} WHERE doc_id = ?"
                              + self._row_lock, (doc_id,)).fetchone()
                if row is None or row[4] != owner:
                    continue
                if row[0] == DELETED:
                    self._x(c, "UPDATE {d} SET owner = NULL, claimed_rev = NULL, purged = 0 WHERE doc_id = ?",
                            (doc_id,))
                    continue
                tries = row[3] + 1
                fail = tries >= max_attempts and row[1] == row[2]
                self._x(c, "UPDATE {d} SET status = ?, error = ?, attempts = ?, owner = NULL, claimed_rev = NULL, "
                           "updated = ? WHERE doc_id = ?", (FAILED if fail else PENDING, error if fail else None,
                                                            tries, t, doc_id))

    @_retried
    def reset_stale(self, alive: Callable[[str], bool]) -> int:
        """Reset the claims of owners for which ``alive(owner)`` is false: their documents go back to
        ``pending`` (tombstones: to be removed from the index). Returns how many rows changed."""
        with self.tables.read() as c:
            owners = [r[0] for r in self._x(c, "SELECT DISTINCT owner FROM {d} WHERE owner IS NOT NULL").fetchall()]
        dead = [o for o in owners if not alive(o)]
        n, t = 0, now()
        with self.tables.write() as c:
            for o in dead:
                n += self._x(c, "UPDATE {d} SET status = ?, owner = NULL, claimed_rev = NULL, updated = ? "
                                "WHERE owner = ? AND status = ?", (PENDING, t, o, PROCESSING)).rowcount
                n += self._x(c, "UPDATE {d} SET owner = NULL, claimed_rev = NULL, purged = 0 WHERE owner = ?",
                             (o,)).rowcount
        return n

    # ------------------------------------------------------------------ deleting
    @_retried
    def delete(self, ids: Sequence[str]) -> tuple[list[str], list[str]]:
        """Make tombstones of the documents ``ids`` (a pending one is cancelled); returns (deleted, unknown).
        A tombstone is then removed from the index (an older version of a pending document may be there):
        by the caller for the unclaimed ones (:meth:`unpurged`), by the claim's worker for claimed ones
        (:meth:`finish`)."""
        bad = next((i for i, d in enumerate(ids) if not _storable(d)), None)
        if bad is not None:
            raise ValueError(f"ids[{bad}] contains a NUL character (\\x00): no document has such an id")
        t, deleted, unknown = now(), [], []
        with self.tables.write() as c:
            for doc_id in sorted(set(ids)):
                row = self._x(c, "SELECT status FROM {d} WHERE doc_id = ?" + self._row_lock, (doc_id,)).fetchone()
                if row is None or row[0] == DELETED:
                    unknown.append(doc_id)
                    continue
                self._x(c, "UPDATE {d} SET status = ?, text = '', title = NULL, metadata = NULL, error = NULL, "
                           "purged = 0, updated = ? WHERE doc_id = ?", (DELETED, t, doc_id))
                deleted.append(doc_id)
        order = {d: i for i, d in enumerate(dict.fromkeys(ids))}
        return sorted(deleted, key=order.__getitem__), sorted(unknown, key=order.__getitem__)

    def unpurged(self, ids: Sequence[str] | None = None) -> list[str]:
        """Tombstones not yet removed from the index and claimed by nobody (of ``ids``, or all)."""
        sql = "SELECT doc_id FROM {d} WHERE status = ? AND purged = 0 AND owner IS NULL"
        with self.tables.read() as c:
            if ids is None:
                return [r[0] for r in self._x(c, sql + " ORDER BY doc_id", (DELETED,)).fetchall()]
            return [d for d in dict.fromkeys(ids)
                    if _storable(d) and self._x(c, sql + " AND doc_id = ?", (DELETED, d)).fetchone()]

    @_retried
    def mark_purged(self, ids: Sequence[str]) -> None:
        """Record that the tombstones ``ids`` are gone from the index."""
        with self.tables.write() as c:
            for doc_id in sorted(set(ids)):
                self._x(c, "UPDATE {d} SET purged = 1 WHERE doc_id = ? AND status = ? AND owner IS NULL",
                        (doc_id, DELETED))

    @_retried
    def requeue(self, ids: Sequence[str]) -> list[str]:
        """Index again those of ``ids`` that are no longer tombstones: called after removing the tombstones
        ``ids`` from the index. A document added again after its tombstone was found and before the removal
        committed may have been judged "already indexed" by a worker of another process (the old version was
        still there), so its status must not stay ``indexed``: an indexed one is pending again, a claimed one
        becomes pending when its claim ends (:meth:`finish`). Returns the ids requeued."""
        t, out = now(), []
        with self.tables.write() as c:
            for doc_id in sorted(set(ids)):
                row = self._x(c, "SELECT status FROM {d} WHERE doc_id = ?" + self._row_lock, (doc_id,)).fetchone()
                if row is None or row[0] not in (INDEXED, PROCESSING):
                    continue
                if row[0] == INDEXED:
                    self._x(c, "UPDATE {d} SET status = ?, updated = ? WHERE doc_id = ?", (PENDING, t, doc_id))
                else:
                    self._x(c, "UPDATE {d} SET claimed_rev = 0, updated = ? WHERE doc_id = ?", (t, doc_id))
                out.append(doc_id)
        return out

    # ------------------------------------------------------------------ reading
    def job(self, job_id: str) -> dict | None:
        """The job ``job_id`` as the API shows it (:func:`.jobs.job_view`); None if unknown."""
        if not _storable(job_id):
            return None
        with self.tables.read() as c:
            row = self._x(c, "SELECT created FROM {j} WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            items = self._x(c, "SELECT i.doc_id, i.rev, d.rev, d.status, d.claimed_rev, d.error, d.updated FROM {i} i "
                               "LEFT JOIN {d} d ON d.doc_id = i.doc_id WHERE i.job_id = ? ORDER BY i.pos",
                            (job_id,)).fetchall()
        return job_view(job_id, row[0], items)

    def documents(self, status: str | None = None, offset: int = 0, limit: int = 50) -> dict:
        """A page of the index's documents, all or those of one status: the index's document registry
        joined with this queue (:mod:`.doclist`: indexed ones in the order first indexed, then those
        accepted and not indexed yet)."""
        doclist.status_filter(status)            # a bad status is refused before the database is read
        with self.tables.read() as c:
            rows, total = doclist.page(self._x, c, status, offset, limit)
        return {"documents": [self._doc(r) for r in rows], "total": total, "offset": offset, "limit": limit}

    def document(self, doc_id: str) -> dict | None:
        """One listed document with its text (None if not listed); ``text`` is None where only the index
        holds it (a document indexed without the service: the caller reads its passages)."""
        if not _storable(doc_id):
            return None
        with self.tables.read() as c:
            got = doclist.one(self._x, c, doc_id)
        return None if got is None else {**self._doc(got[0]), "text": got[1]}

    @staticmethod
    def _doc(r) -> dict:
        return {"id": r[0], "status": shown_status(r[1], r[2], r[3]), "title": r[4], **shown_metadata(r[5]),
                "error": r[6] if r[1] == FAILED else None, "job_id": r[7], "updated": iso(r[8])}

    def counts(self) -> dict[str, int]:
        """How many listed documents have each status (:meth:`documents`' totals)."""
        out = dict.fromkeys(LISTED, 0)
        with self.tables.read() as c:
            rows = self._x(c, "SELECT status, claimed_rev = rev, COUNT(*) FROM {d} WHERE status IN (?, ?, ?) "
                              "GROUP BY status, claimed_rev = rev", doclist.ACTIVE).fetchall()
            out[INDEXED] = doclist.count(self._x, c, INDEXED)
        for status, same, n in rows:
            out[shown_status(status, 1, 1 if same or same is None else 0)] += n
        return out

    def statuses(self, ids: Iterable[str]) -> dict[str, str]:
        """doc id -> stored status, for the known ``ids``."""
        with self.tables.read() as c:
            out = {}
            for d in filter(_storable, dict.fromkeys(ids)):
                r = self._x(c, "SELECT status FROM {d} WHERE doc_id = ?", (d,)).fetchone()
                if r is not None:
                    out[d] = r[0]
        return out


def open_job_store(rag) -> JobStore:
    """The job store of the index ``rag`` (a ``HippoRAG``) opened: on the job tables that the index's
    storage backend keeps beside it."""
    tables = get_backend(rag.config.storage_backend).job_tables(rag.index_state.db, rag.config)
    return JobStore(tables)


__all__ = ["JobStore", "open_job_store"]
