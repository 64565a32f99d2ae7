"""The tables of an index in its PostgreSQL schema, how they are created and checked, and the
advisory lock its writers take (used by :class:`~hippo_engine.store.postgres.db.PostgresIndexStore`)."""
from __future__ import annotations

import re
import zlib

from hippo_engine.config import ConfigError
from hippo_engine.store import document_registry as registry
from hippo_engine.store.base import StoreError
from hippo_engine.store.postgres.server import INSTALL_HINT

SCHEMA_VERSION = "2"   # 2: passage_triples / passage_hyperedges carry their fact_id
#: first key of every advisory lock this backend takes ("Hi"); the second is derived from the schema
LOCK_CLASS = 0x4869
SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

TABLES = {
    "meta": 'key text COLLATE "C" PRIMARY KEY, value text NOT NULL',
    "passage_triples": 'passage_id text COLLATE "C" NOT NULL, pos integer NOT NULL, subj text NOT NULL, '
                       'pred text NOT NULL, obj text NOT NULL, fact_id text COLLATE "C" NOT NULL, '
                       'PRIMARY KEY (passage_id, pos)',
    "passage_hyperedges": 'passage_id text COLLATE "C" NOT NULL, pos integer NOT NULL, text text NOT NULL, '
                          'entities text NOT NULL, fact_id text COLLATE "C" NOT NULL, PRIMARY KEY (passage_id, pos)',
    "synonymy": 'src text COLLATE "C" NOT NULL, dst text COLLATE "C" NOT NULL, score double precision NOT NULL, '
                'PRIMARY KEY (src, dst)',
    "documents": 'doc_id text COLLATE "C" NOT NULL, pos integer NOT NULL, passage_id text COLLATE "C" NOT NULL, '
                 'PRIMARY KEY (doc_id, pos)',
    # added after schema version 2 was set: created where missing (an additive change)
    "document_metadata": 'doc_id text COLLATE "C" PRIMARY KEY, metadata text NOT NULL, '
                         'metadata_json jsonb GENERATED ALWAYS AS (metadata::jsonb) STORED',
    "communities": 'id text COLLATE "C" PRIMARY KEY, level integer NOT NULL, parent text, data text NOT NULL',
    "community_reports": 'member_key text COLLATE "C" PRIMARY KEY, report text NOT NULL, source text NOT NULL',
    # a copy of the latest graph.npz, for readers on other hosts (labelled in meta: graph_file_*)
    "graph_file": 'part integer PRIMARY KEY, data bytea NOT NULL',
    # added after schema version 2: one row per document (store/document_registry.py), filled when created
    registry.TABLE: registry.POSTGRES_COLUMNS,
}
INDEXES = {"synonymy_dst": "synonymy (dst)", "documents_passage": "documents (passage_id)",
           "passage_triples_fact": "passage_triples (fact_id)",
           "passage_hyperedges_fact": "passage_hyperedges (fact_id)",
           # added after schema version 2 (created where missing): which passages name an entity, for a
           # writer removing passages (store/postgres/changes.py)
           "passage_triples_subj": "passage_triples USING hash (subj)",
           "passage_triples_obj": "passage_triples USING hash (obj)",
           "passage_hyperedges_entities": "passage_hyperedges USING gin ((entities::jsonb) jsonb_path_ops)"}


def psycopg_module():
    try:
        import psycopg
    except ImportError:
        raise StoreError(f"the PostgreSQL backend needs psycopg; install it with: {INSTALL_HINT}") from None
    return psycopg


def lock_key(schema: str) -> tuple[int, int]:
    """The advisory lock (two int4 keys) that writers of ``schema`` take."""
    return LOCK_CLASS, zlib.crc32(schema.encode("utf-8")) & 0x7FFFFFFF


class SchemaNameError(StoreError, ConfigError):
    """A ``postgres_schema`` PostgreSQL cannot hold an index in: a configuration error (exit status
    2 on the command line) that is also a ``StoreError``, as it always was."""


def check_schema_name(schema: str) -> str:
    """``schema`` if PostgreSQL can hold an index there; else a configuration error naming it
    (malformed, or reserved: ``pg_...`` is PostgreSQL's own)."""
    if not isinstance(schema, str) or not SCHEMA_NAME.match(schema):
        raise SchemaNameError(f"postgres_schema: schema name {schema!r}: use letters, digits and '_' (at most "
                                 "63, not starting with a digit)")
    if schema.lower().startswith("pg_"):
        raise SchemaNameError(f"postgres_schema: schema name {schema!r} starts with 'pg_', which PostgreSQL "
                                 "reserves for its own schemas; choose another name")
    return schema


def describe_dsn(dsn: str) -> str:
    """``postgresql <db> on <host>`` for messages (never the password)."""
    from hippo_engine.dsn import redact_dsn
    try:
        info = psycopg_module().conninfo.conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - only for a message
        return f"postgresql (an unparsable DSN: {redact_dsn(dsn)})"
    return f"postgresql database {info.get('dbname') or '?'} on {info.get('host') or 'the default host'}"


def ensure_vector_extension(conn, location: str) -> str:
    """Create pgvector in the database if it is missing; returns the schema holding its types."""
    find = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname='vector'"
    ext = conn.execute(find).fetchone()
    if ext is None:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg_module().Error as e:
            raise StoreError(f"{location}: the pgvector extension is not installed in this database and could "
                             f"not be created: {e}") from e
        ext = conn.execute(find).fetchone()
    return ext[0]


def refuse_foreign(conn, schema: str) -> None:
    """Fail, before writing anything, on a schema that holds tables but is not an index."""
    tables = sorted(r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname=%s", (schema,)))
    ours = "meta" in tables and conn.execute(
        f'SELECT 1 FROM "{schema}".meta WHERE key=\'schema_version\'').fetchone() is not None
    if tables and not ours:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"schema {schema} of postgresql database {conn.info.dbname} holds tables ({shown}) but is "
                         "not a hippo-engine index; nothing was written to it. Use another schema.")


def schema_complete(conn, schema: str) -> bool:
    """Whether every table and index of the schema exists, with its version row."""
    have = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(%s)",
                                       (f'"{schema}"',))}
    return (set(TABLES) | set(INDEXES)) <= have and conn.execute(
        f'SELECT 1 FROM "{schema}".meta WHERE key=\'schema_version\'').fetchone() is not None


def create_schema(conn, schema: str) -> None:
    """Create what is missing of the schema (inside the caller's transaction, under the lock)."""
    q = f'"{schema}"'
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
    fill = not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{q}.{registry.TABLE}",)).fetchone()[0]
    for name, cols in TABLES.items():
        conn.execute(f"CREATE TABLE IF NOT EXISTS {q}.{name} ({cols})")
    if fill:                # a schema from before the registry (or a new one, where this finds nothing)
        registry.fill_postgres(conn, q)
    for name, on in INDEXES.items():
        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {q}.{on}")
    conn.execute(f"INSERT INTO {q}.meta VALUES ('schema_version', %s) ON CONFLICT DO NOTHING", (SCHEMA_VERSION,))


def schema_version(conn, schema: str) -> str | None:
    """The ``schema_version`` row of an index schema (None: none yet)."""
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".meta',)).fetchone()[0]:
        row = conn.execute(f'SELECT value FROM "{schema}".meta WHERE key=\'schema_version\'').fetchone()
        return None if row is None else row[0]
    return None


def migrate_1_to_2(conn, schema: str) -> None:
    """Version 1 -> 2 (inside the caller's transaction, under the lock): add ``fact_id`` to the
    fact tables, computed from the stored facts as the engine computes it."""
    from hippo_engine.ids import fact_id, fact_text
    q = f'"{schema}"'
    for table, cols, text_of in (("passage_triples", "subj, pred, obj", lambda r: fact_text(r)),
                                 ("passage_hyperedges", "text", lambda r: r[0])):
        conn.execute(f'ALTER TABLE {q}.{table} ADD COLUMN IF NOT EXISTS fact_id text COLLATE "C"')
        conn.execute('CREATE TEMP TABLE hippo_fact_ids (passage_id text COLLATE "C", pos integer, '
                     'fact_id text) ON COMMIT DROP')
        rows = conn.execute(f"SELECT passage_id, pos, {cols} FROM {q}.{table}").fetchall()
        with conn.cursor() as cur, cur.copy("COPY hippo_fact_ids FROM STDIN") as cp:
            for r in rows:
                cp.write_row((r[0], r[1], fact_id(text_of(tuple(r[2:])))))
        conn.execute(f"UPDATE {q}.{table} t SET fact_id = f.fact_id FROM hippo_fact_ids f "
                     "WHERE t.passage_id = f.passage_id AND t.pos = f.pos")
        conn.execute("DROP TABLE hippo_fact_ids")
        conn.execute(f"ALTER TABLE {q}.{table} ALTER COLUMN fact_id SET NOT NULL")
    for name, on in INDEXES.items():
        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {q}.{on}")
    conn.execute(f"UPDATE {q}.meta SET value = '2' WHERE key = 'schema_version'")


__all__ = ["INDEXES", "LOCK_CLASS", "SCHEMA_NAME", "SCHEMA_VERSION", "TABLES", "SchemaNameError", "check_schema_name",
           "create_schema", "describe_dsn", "ensure_vector_extension", "lock_key", "migrate_1_to_2", "psycopg_module",
           "refuse_foreign", "schema_complete", "schema_version"]
