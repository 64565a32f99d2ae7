"""The copy of ``graph.npz`` a PostgreSQL index keeps for readers on other hosts
(:class:`GraphFileCopy`, a mixin of :class:`~hippo_engine.store.postgres.db.PostgresIndexStore`).

The graph is derived data, written by a writer beside its index folder after each change. A reader
on another machine (or with an empty folder) would otherwise read every fact to build it again;
instead it takes the writer's file from table ``graph_file`` when the copy is labelled (meta
``graph_file_version``, ``graph_file_digest``) with the version and content digest it has loaded.
"""
from __future__ import annotations

from hippo_engine.store.base import IndexStore
from hippo_engine.system import atomic_write


class GraphFileCopy(IndexStore):
    """Put and fetch the graph file's copy (needs ``transaction``, ``snapshot``, ``get_meta``,
    ``set_meta`` and ``q``, the quoted schema, of the store it is mixed into)."""

    #: bytes per row of the graph file's copy (bytea values stay far below their 1 GB limit)
    GRAPH_PART_BYTES = 32 << 20

    q: str   # the quoted schema, set by the store this is mixed into

    def put_graph_file(self, path, version: str, digest: str) -> bool:
        """Replace the database's copy of the graph file with ``path``, labelled ``version`` and
        ``digest`` in meta, in one transaction; skipped (False) if the index has moved on."""
        with self.transaction() as c:
            if self.get_meta("version") != version:
                return False
            c.execute(f"DELETE FROM {self.q}.graph_file")
            with open(path, "rb") as f, c.cursor() as cur, \
                    cur.copy(f"COPY {self.q}.graph_file (part, data) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["int4", "bytea"])
                part = 0
                while chunk := f.read(self.GRAPH_PART_BYTES):
                    cp.write_row((part, chunk))
                    part += 1
            self.set_meta("graph_file_version", version)
            self.set_meta("graph_file_digest", digest)
        return True

    def fetch_graph_file(self, dest, version: str, digest: str) -> bool:
        """Write the database's copy of the graph file to ``dest`` (atomically, a part at a time)
        if it is labelled ``version`` and ``digest``; False otherwise."""
        with self.snapshot() as c:
            if (self.get_meta("graph_file_version"), self.get_meta("graph_file_digest")) != (version, digest):
                return False

            def write(f) -> None:
                with c.cursor(name="hippo_graph_file") as cur:
                    cur.itersize = 1
                    cur.execute(f"SELECT data FROM {self.q}.graph_file ORDER BY part")
                    for (data,) in cur:
                        f.write(data)
            atomic_write(dest, write)
        return True
