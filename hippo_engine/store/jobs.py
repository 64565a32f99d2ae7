"""The service's job tables beside an index, as a storage backend keeps them: :class:`JobTables`.

The service's ingestion queue (``hippo_engine.service.jobstore.JobStore``: what a job, a claim and a
tombstone mean) runs plain SQL over three tables kept in the index's own database: ``service_jobs`` (one
row per accepted batch), ``service_documents`` (one row per document id) and ``service_job_items`` (which
document revisions a job accepted). A backend hands out a :class:`JobTables` for an opened index
(``StorageBackend.job_tables``): a connection of its own, its transactions, its placeholders and table
names, its row locks and the errors after which a write is tried again. Built in:
:class:`~hippo_engine.store.jobs_sqlite.SQLiteJobTables` and
:class:`~hippo_engine.store.postgres.jobs.PostgresJobTables`.

A folder whose index is not open is read through :class:`ClosedTables` (``SharedStorage.closed_tables``).
"""
from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: the columns of the tables (SQLite types; a backend derives its own from these)
DOCUMENT_COLUMNS = (
    "doc_id TEXT PRIMARY KEY, rev INTEGER NOT NULL, status TEXT NOT NULL, text TEXT NOT NULL, title TEXT, "
    "metadata TEXT, error TEXT, job_id TEXT, seq INTEGER NOT NULL, pos INTEGER NOT NULL, attempts INTEGER NOT "
    "NULL, owner TEXT, claimed_rev INTEGER, purged INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL")
ITEM_COLUMNS = ("job_id TEXT NOT NULL, pos INTEGER NOT NULL, doc_id TEXT NOT NULL, rev INTEGER NOT NULL, "
                "PRIMARY KEY (job_id, pos)")
#: index name -> what it indexes
INDEXES = {"service_documents_queue": "service_documents (status, seq, pos)",
           "service_documents_owner": "service_documents (owner)"}
TABLES = ("service_jobs", "service_documents", "service_job_items")


class JobTables(ABC):
    """The job tables of one index on a connection of their own. Statements name their tables
    ``{d}`` (``service_documents``), ``{j}`` (``service_jobs``), ``{i}`` (``service_job_items``),
    ``{r}`` (the index's document registry) and ``{m}`` (the index's document metadata), and take
    ``?`` placeholders; :meth:`sql` makes them the backend's. Thread-safe: one connection, used under
    :attr:`lock`."""

    #: the backend's name (``sqlite``, ``postgres``) and where the tables are, for messages
    name = ""
    location = ""
    #: row-locking clauses of a claim's SELECT and of a SELECT before an UPDATE ("" where the
    #: backend's write transactions exclude each other)
    claim_lock = ""
    row_lock = ""
    #: errors after which a write transaction is tried again (the database aborted it to break a deadlock)
    retry_on: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self.lock = threading.RLock()

    @abstractmethod
    def write(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction (taken at once: SQLite ``BEGIN IMMEDIATE``); yields a connection."""

    @abstractmethod
    def read(self) -> contextlib.AbstractContextManager[Any]:
        """A read transaction (one snapshot); yields a connection."""

    @abstractmethod
    def new_job(self, c: Any, job_id: str, created: float, total: int) -> int:
        """Insert a job row; returns its sequence number (increasing: the queue's order)."""

    def sql(self, sql: str) -> str:
        """``sql`` with this backend's table names and placeholders."""
        return sql

    def x(self, c: Any, sql: str, params: Sequence = ()) -> Any:
        """Run ``sql`` (see :meth:`sql`) on the connection ``c``; returns its cursor."""
        return c.execute(self.sql(sql), tuple(params))

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""


@dataclass(frozen=True)
class ClosedTables:
    """The tables of an index folder that is not open, read-only: ``run(sql, params)`` runs a statement
    naming ``{r}`` (the registry), ``{d}`` (the queue's documents), ``{m}`` (the document metadata) and
    ``{documents}`` (the passages of each document) with ``?`` placeholders; ``have``: which of those
    names are tables there."""

    run: Callable[[str, Sequence], Any]
    have: frozenset[str]


__all__ = ["DOCUMENT_COLUMNS", "INDEXES", "ITEM_COLUMNS", "TABLES", "ClosedTables", "JobTables"]
