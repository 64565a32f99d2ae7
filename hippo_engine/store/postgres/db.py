"""The index in a PostgreSQL schema: :class:`PostgresIndexStore`.

One schema per index, so one database holds several indexes. The tables mirror the SQLite
layout of :class:`~hippo_engine.store.db.IndexDB` (``meta``, ``passage_triples``,
``passage_hyperedges``, ``synonymy``, ``documents``, ``document_metadata``, ``communities``,
``community_reports``) and
each embedding store is a table ``store_<namespace>`` with a pgvector column
(:mod:`hippo_engine.store.postgres.vectors`). Ids are ``text COLLATE "C"``, so ``ORDER BY id`` is
the bytewise order Python's sort and SQLite give, whatever the database's locale.

Writers: the outermost :meth:`PostgresIndexStore.transaction` takes a transaction-scoped advisory
lock derived from the schema name, so writers of one index serialise across processes and hosts
and a writer that dies releases it with its connection. Readers take no lock;
:meth:`PostgresIndexStore.snapshot` is a REPEATABLE READ transaction.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import hyperedge_id, triple_id
from hippo_engine.store import document_registry as registry
from hippo_engine.store.base import IndexStore, StoreError, Triple, encode_entities, hyperedges_by_passage
from hippo_engine.store.lock import IndexLockedError
from hippo_engine.store.postgres.changes import ChangeQueries
from hippo_engine.store.postgres.errors import connect_error, guard_driver_errors
from hippo_engine.store.postgres.graphcopy import GraphFileCopy
from hippo_engine.store.postgres.metadata import MetadataTables
from hippo_engine.store.postgres.schema import (
    SCHEMA_VERSION,
    check_schema_name,
    create_schema,
    ensure_vector_extension,
    lock_key,
    migrate_1_to_2,
    psycopg_module,
    refuse_foreign,
    schema_complete,
    schema_version,
)
from hippo_engine.store.postgres.server import EmbeddedPostgres

logger = logging.getLogger(__name__)


@guard_driver_errors(skip=("close",))
class PostgresIndexStore(ChangeQueries, MetadataTables, GraphFileCopy, IndexStore):
    """An index kept in schema ``schema`` of the PostgreSQL database at ``dsn``.

    The schema is created if missing (with a ``schema_version`` row in ``meta``); a schema that
    holds other tables is refused, naming it, before anything is written. ``lock_timeout``:
    seconds a writer waits for another writer of the same index before
    :class:`~hippo_engine.store.lock.IndexLockedError` (None: wait as long as it takes).
    """

    owned_server: EmbeddedPostgres | None = None   # the server to stop on close (set by open_postgres)

    def __init__(self, dsn: str, schema: str, *, lock_timeout: float | None = None):
        super().__init__()
        psycopg = psycopg_module()
        check_schema_name(schema)
        self.dsn, self.schema, self.lock_timeout = dsn, schema, lock_timeout
        self.q = f'"{schema}"'            # the quoted schema, to qualify table names
        try:
            self.conn = psycopg.connect(dsn, autocommit=True, application_name=(
                f"hippo-engine pid {os.getpid()} host {socket.gethostname()}")[:63])
        except psycopg.Error as e:
            raise connect_error(e, dsn, schema) from None
        self.location = f"postgresql {self.conn.info.dbname} schema {schema}"
        self.shown_location = f"schema {schema}"
        self._in_snapshot = False
        try:
            self._setup()
        except BaseException:
            self.conn.close()
            raise

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        """Make sure pgvector is there, then create (or check) this index's schema."""
        c = self.conn
        c.execute(f"SET search_path = {ensure_vector_extension(c, self.location)}, pg_catalog")
        refuse_foreign(c, self.schema)
        if schema_version(c, self.schema) == "1":
            with self._tx():
                self._take_lock()
                if schema_version(c, self.schema) == "1":
                    logger.info("%s: upgrading the schema from version 1 to 2 (fact ids)", self.location)
                    migrate_1_to_2(c, self.schema)
        if not schema_complete(c, self.schema):     # create what is missing, under the writer lock
            with self._tx():
                self._take_lock()
                refuse_foreign(c, self.schema)
                create_schema(c, self.schema)
        have = self.get_meta("schema_version")
        if have != SCHEMA_VERSION:
            raise StoreError(f"{self.location} has schema version {have}, this hippo-engine reads {SCHEMA_VERSION}")
        from pgvector.psycopg import register_vector
        register_vector(c)

    def table_exists(self, name: str) -> bool:
        """Whether table ``name`` exists in this index's schema."""
        return self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.q}.{name}",)).fetchone()[0]

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """A plain transaction on the autocommit connection (no lock, no nesting)."""
        self.conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        if not self.conn.closed:
            with contextlib.suppress(Exception):
                self.conn.execute("ROLLBACK")

    def _begin(self) -> None:
        """BEGIN and take the index's advisory lock (refused inside a snapshot)."""
        if self._in_snapshot:
            raise StoreError(f"{self.location}: a write transaction cannot start inside a snapshot")
        self.conn.execute("BEGIN")
        try:
            self._take_lock()
        except BaseException:
            self._rollback()
            raise

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    def _connection(self) -> object:
        return self.conn

    def _take_lock(self) -> None:
        psycopg = psycopg_module()
        if self.lock_timeout is None:
            self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock_key(self.schema))
            return
        self.conn.execute(f"SET LOCAL lock_timeout = '{max(1, int(self.lock_timeout * 1000))}ms'")
        try:
            self.conn.execute("SAVEPOINT hippo_lock")
            self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock_key(self.schema))
        except psycopg.errors.LockNotAvailable:
            self.conn.execute("ROLLBACK TO SAVEPOINT hippo_lock")
            raise IndexLockedError(f"the index in {self.location} is being written by {self.lock_holder()}; gave "
                                   f"up after waiting {self.lock_timeout:g} s. One writer at a time; readers need "
                                   "no lock.") from None
        self.conn.execute("RELEASE SAVEPOINT hippo_lock")
        self.conn.execute("SET LOCAL lock_timeout = 0")

    def lock_holder(self) -> str:
        """Who holds this index's write lock (its connection's application name), if anyone."""
        row = self.conn.execute(
            "SELECT a.application_name, a.backend_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            lock_key(self.schema)).fetchone()
        if row is None:
            return "nobody (now)"
        return f"{row[0] or 'an unnamed client'} (connected since {row[1]:%Y-%m-%d %H:%M:%S})"

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[object]:
        """Reads inside see one committed state (a REPEATABLE READ transaction; within a write
        transaction, that transaction's state), whatever other processes commit meanwhile."""
        if self._depth or self._in_snapshot:
            yield self.conn
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self._in_snapshot = True
        try:
            yield self.conn
        except BaseException:
            self._in_snapshot = False
            self._rollback()
            raise
        self._in_snapshot = False
        self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def ddl(self) -> Iterator[object]:
        """Schema changes (a store's table, an index): under the writer lock, inside the current
        transaction or snapshot if there is one."""
        if self._depth:
            yield self.conn
        elif self._in_snapshot:
            self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock_key(self.schema))
            yield self.conn
        else:
            with self.transaction():
                yield self.conn

    # ------------------------------------------------------------------ helpers
    def _copy_in(self, table: str, columns: str, rows: Iterable[Sequence]) -> None:
        """Append rows to a table of this schema (COPY, text format)."""
        with self.conn.cursor() as cur, cur.copy(f"COPY {self.q}.{table} ({columns}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)

    def _delete_any(self, table: str, column: str, keys: Iterable[str]) -> None:
        keys = list(dict.fromkeys(keys))
        if keys:
            self.conn.execute(f"DELETE FROM {self.q}.{table} WHERE {column} = ANY(%s)", (keys,))

    # ------------------------------------------------------------------ metadata
    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute(f"SELECT value FROM {self.q}.meta WHERE key=%s", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self.conn.execute(f"INSERT INTO {self.q}.meta (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                              "DO UPDATE SET value = EXCLUDED.value", (key, value))

    # ------------------------------------------------------------------ passages
    def passage_ids(self) -> list[str]:
        if not self.table_exists("store_passage"):
            return []
        return [r[0] for r in self.conn.execute(f"SELECT id FROM {self.q}.store_passage ORDER BY id")]

    def has_passage(self, pid: str) -> bool:
        return self.table_exists("store_passage") and self.conn.execute(
            f"SELECT 1 FROM {self.q}.store_passage WHERE id=%s", (pid,)).fetchone() is not None

    def passage_count(self) -> int:
        if not self.table_exists("store_passage"):
            return 0
        return int(self.conn.execute(f"SELECT count(*) FROM {self.q}.store_passage").fetchone()[0])

    # ------------------------------------------------------------------ facts
    def load_passage_triples(self) -> dict[str, list[Triple]]:
        out: dict[str, list[Triple]] = {}
        for pid, s, p, o in self.conn.execute(
                f"SELECT passage_id, subj, pred, obj FROM {self.q}.passage_triples ORDER BY passage_id, pos"):
            out.setdefault(pid, []).append((s, p, o))
        return out

    def put_passage_triples(self, pid: str, triples: Sequence[Triple]) -> None:
        with self.transaction():
            self._delete_any("passage_triples", "passage_id", [pid])
            self._copy_in("passage_triples", "passage_id, pos, subj, pred, obj, fact_id",
                          ((pid, i, s, p, o, triple_id((s, p, o)))
                           for i, (s, p, o) in enumerate(triples)))

    def delete_passage_triples(self, pids: Iterable[str]) -> None:
        with self.transaction():
            self._delete_any("passage_triples", "passage_id", pids)

    def load_passage_hyperedges(self) -> dict[str, list[Hyperedge]]:
        return hyperedges_by_passage(self.conn.execute(
            f"SELECT passage_id, text, entities FROM {self.q}.passage_hyperedges ORDER BY passage_id, pos"),
            self.location)

    def put_passage_hyperedges(self, pid: str, hyperedges: Sequence[Hyperedge]) -> None:
        with self.transaction():
            self._delete_any("passage_hyperedges", "passage_id", [pid])
            self._copy_in("passage_hyperedges", "passage_id, pos, text, entities, fact_id",
                          ((pid, i, h.text, encode_entities(h.entities), hyperedge_id(h))
                           for i, h in enumerate(hyperedges)))

    def delete_passage_hyperedges(self, pids: Iterable[str]) -> None:
        with self.transaction():
            self._delete_any("passage_hyperedges", "passage_id", pids)

    def facts_of(self, fact_ids: Iterable[str]) -> dict[str, Triple | Hyperedge]:
        """The stored triple or hyperedge of each fact id (unknown ids are left out), read by the
        ``fact_id`` index: what a reader that keeps no fact in memory asks for its candidates."""
        ids = list(dict.fromkeys(fact_ids))
        if not ids:
            return {}
        out: dict[str, Triple | Hyperedge] = {}
        for fid, s, p, o in self.conn.execute(
                f"SELECT DISTINCT ON (fact_id) fact_id, subj, pred, obj FROM {self.q}.passage_triples "
                "WHERE fact_id = ANY(%s) ORDER BY fact_id, passage_id, pos", (ids,)):
            out[fid] = (s, p, o)
        rest = [f for f in ids if f not in out]
        if rest:
            for fid, text, ents in self.conn.execute(
                    f"SELECT DISTINCT ON (fact_id) fact_id, text, entities FROM {self.q}.passage_hyperedges "
                    "WHERE fact_id = ANY(%s) ORDER BY fact_id, passage_id, pos", (rest,)):
                try:
                    out[fid] = Hyperedge(text, tuple(json.loads(ents)))
                except ValueError as e:
                    raise StoreError(f"{self.location}: unreadable entity list of fact {fid}: {e}") from e
        return out

    # ------------------------------------------------------------------ synonymy
    def load_synonymy(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s, d, w in self.conn.execute(f"SELECT src, dst, score FROM {self.q}.synonymy ORDER BY src, dst"):
            out.setdefault(s, {})[d] = w
        return out

    def replace_synonymy_lists(self, lists: Mapping[str, Mapping[str, float]]) -> None:
        """Overwrite the neighbour lists of the given sources (an empty dict clears one)."""
        with self.transaction():
            self._delete_any("synonymy", "src", lists)
            self._copy_in("synonymy", "src, dst, score",
                          ((s, d, float(w)) for s, nb in lists.items() for d, w in nb.items()))

    # ------------------------------------------------------------------ documents
    def put_documents(self, docs: Mapping[str, Sequence[str]]) -> None:
        with self.transaction():
            self._delete_any("documents", "doc_id", docs)
            self._copy_in("documents", "doc_id, pos, passage_id",
                          ((d, i, p) for d, pids in docs.items() for i, p in enumerate(pids)))
            registry.upsert_postgres(self.conn, self.q, docs)

    def register_documents(self, doc_ids: Iterable[str]) -> None:
        with self.transaction():
            registry.upsert_postgres(self.conn, self.q, doc_ids)

    def unregister_documents(self, doc_ids: Iterable[str]) -> None:
        with self.transaction():
            self._delete_any(registry.TABLE, "doc_id", doc_ids)

    def document_count(self) -> int:
        return int(self.conn.execute(f"SELECT COUNT(*) FROM {self.q}.{registry.TABLE}").fetchone()[0])

    def document_page(self, offset: int = 0, limit: int = 50) -> list[tuple[str, float, float]]:
        return [tuple(r) for r in self.conn.execute(f"SELECT doc_id, added, updated FROM {self.q}.{registry.TABLE} "
                                                    "ORDER BY seq LIMIT %s OFFSET %s", (limit, offset))]

    def document_passages(self, doc_ids: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for d, p in self.conn.execute(f"SELECT doc_id, passage_id FROM {self.q}.documents WHERE doc_id = ANY(%s) "
                                      "ORDER BY doc_id, pos", (list(dict.fromkeys(doc_ids)),)):
            out.setdefault(d, []).append(p)
        return out

    def passage_documents(self, pids: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p, d in self.conn.execute(f"SELECT passage_id, doc_id FROM {self.q}.documents WHERE passage_id = "
                                      "ANY(%s) ORDER BY passage_id, doc_id", (list(dict.fromkeys(pids)),)):
            out.setdefault(p, []).append(d)
        return out

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        keys = list(dict.fromkeys(doc_ids))
        with self.transaction():
            self._delete_any("documents", "doc_id", keys)
            self._delete_any("document_metadata", "doc_id", keys)
            self._delete_any(registry.TABLE, "doc_id", keys)

    # ------------------------------------------------------------------ communities (HiRAG)
    def load_community_rows(self) -> list[str]:
        return [r[0] for r in self.conn.execute(f"SELECT data FROM {self.q}.communities ORDER BY level, id")]

    def load_report_rows(self) -> list[tuple[str, str]]:
        return [(k, r) for k, r in self.conn.execute(
            f"SELECT member_key, report FROM {self.q}.community_reports ORDER BY member_key")]

    def replace_communities(self, rows: Sequence[tuple[str, int, str | None, str]],
                            reports: Sequence[tuple[str, str, str]]) -> None:
        with self.transaction():
            self.conn.execute(f"DELETE FROM {self.q}.communities")
            self._copy_in("communities", "id, level, parent, data", rows)
            self.conn.execute(f"DELETE FROM {self.q}.community_reports")
            self._copy_in("community_reports", "member_key, report, source", reports)

    # ------------------------------------------------------------------ vectors and lifetime
    def embedding_store(self, namespace: str, dim: int, *, mirror: bool = True, **options):
        """The :class:`~hippo_engine.store.postgres.vectors.PostgresEmbeddingStore` of
        ``namespace`` (options: see that class); ``mirror=False``: a
        :class:`~hippo_engine.store.postgres.writer.PostgresWriteStore`, which holds only ids."""
        if not mirror:
            from hippo_engine.store.postgres.writer import PostgresWriteStore
            return PostgresWriteStore(self, namespace, dim, **options)
        from hippo_engine.store.postgres.vectors import PostgresEmbeddingStore
        return PostgresEmbeddingStore(self, namespace, dim, **options)

    #: how retrieval searches this index (``postgres_search``, set by the opener): "memory"
    #: mirrors every vector in RAM; "hnsw" and "exact" search them in the database
    search = "memory"

    @property
    def vectors_in_memory(self) -> bool:
        return self.search == "memory"

    def vector_writer(self, namespace: str, dim: int, *, vector_dtype: str = "float32", mmap: bool = False):
        """The writer's store: mirrored in memory, or (searching in the database) a
        :class:`~hippo_engine.store.postgres.writer.PostgresWriteStore` holding only ids."""
        return self.embedding_store(namespace, dim, mirror=self.vectors_in_memory, vector_dtype=vector_dtype,
                                    mmap=mmap)

    def vector_search(self, namespace: str, dim: int, *, keep: str, vector_dtype: str = "float32"):
        """A read-only, memory-light view of a store for retrieval
        (:class:`~hippo_engine.store.postgres.lazy.LazyPostgresStore`)."""
        from hippo_engine.store.postgres.lazy import LazyPostgresStore
        return LazyPostgresStore(self, namespace, dim, keep=keep, vector_dtype=vector_dtype)

    reader_store = vector_search

    def close(self) -> None:
        """Close the connection, and stop the embedded server this store was opened with
        (``owned_server``, set by :func:`hippo_engine.store.opening.open_index_store`)."""
        if not self.conn.closed:
            if self._depth or self._in_snapshot:
                self._rollback()
            self.conn.close()
        server, self.owned_server = self.owned_server, None
        if server is not None:
            server.stop()


__all__ = ["PostgresIndexStore"]
