"""``where=`` on both backends: SQLite, and PostgreSQL read lazily (``postgres_search`` ``hnsw`` and
``exact``: the allowed facts' and entities' vectors are read from the database) or mirrored in
memory (the ``[postgres`` cases are in the integration tier). On each, a query filtered to one
user's documents never returns another's and fills its top-k from the filter's passages; the
filtered rankings and scores equal SQLite's exactly."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import CORPUS, make_rag

from hippo_engine.ids import chunk_id

IDS = [f"d{i}" for i in range(len(CORPUS))]
META = [{"user": ["alice", "bob", "carol"][i % 3], "time": i} for i in range(len(CORPUS))]
QUERIES = [d.split("\n", 1)[0] for d in CORPUS] + ["Where was the geologist who founded Tamsin College from?"]
KINDS = ["sqlite", "postgres-hnsw", "postgres-exact", "postgres-memory"]


def _open(kind: str, path, request, **kw):
    if kind == "sqlite":
        return make_rag(path, **kw)
    return make_rag(path, storage_backend="postgres", postgres_dsn=request.getfixturevalue("pg_dsn"),
                    postgres_schema=request.getfixturevalue("pg_schema"), postgres_search=kind.split("-")[1], **kw)


def _rankings(rag, extractor):
    out = {}
    for user in ("alice", "bob", "carol", "nobody"):
        for mode in ("hipporag2", "naive"):
            k = max(1, sum(m["user"] == user for m in META))
            sols = rag.retrieve(QUERIES, k, mode=mode, where={"user": user})
            out[user, mode] = [(s.passage_ids, np.asarray(s.doc_scores).tobytes(), s.doc_ids) for s in sols]
    out["range"] = [(s.passage_ids, s.doc_ids) for s in rag.retrieve(QUERIES, 3, where={"time": {"$gte": 2, "$lt": 6}})]
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The filtered rankings of an SQLite index, per extractor."""
    out = {}
    for extractor in ("openie", "ner"):
        rag = make_rag(tmp_path_factory.mktemp(f"ref-{extractor}"), use_filter=False, extractor=extractor)
        rag.index(CORPUS, ids=IDS, metadata=META)
        out[extractor] = _rankings(rag, extractor)
        rag.close()
    return out


@pytest.mark.parametrize("extractor", ["openie", "ner"])
@pytest.mark.parametrize("kind", KINDS)
def test_filtered_queries_stay_inside_fill_top_k_and_agree_across_backends(kind, extractor, tmp_path, request,
                                                                           reference):
    rag = _open(kind, tmp_path / "idx", request, use_filter=False, extractor=extractor)
    try:
        rag.index(CORPUS, ids=IDS, metadata=META)
        got = _rankings(rag, extractor)
        index_of = {chunk_id(c): i for i, c in enumerate(CORPUS)}
        for user in ("alice", "bob", "carol"):
            own = {chunk_id(CORPUS[i]) for i, m in enumerate(META) if m["user"] == user}
            for mode in ("hipporag2", "naive"):
                for pids, _, doc_ids in got[user, mode]:
                    assert set(pids) == own                         # never another's; top-k full
                    assert all(ds == [IDS[index_of[p]]] for p, ds in zip(pids, doc_ids, strict=True))
        assert all(pids == [] for pids, _, _ in got["nobody", "hipporag2"])
        alice = {chunk_id(CORPUS[i]) for i, m in enumerate(META) if m["user"] == "alice"}
        for sol in rag.retrieve(QUERIES, 2, where={"user": "alice"}, explain=True):
            assert {e.passage_id for e in sol.explanations} == set(sol.passage_ids) <= alice
        for sol in rag.retrieve(QUERIES[:3], 2, mode="hi_local", where={"user": "alice"}):
            assert set(sol.passage_ids) <= alice
        assert got == reference[extractor]                           # same rows, scores and ids as SQLite
        if kind != "sqlite":
            assert rag.document_metadata(["d0", "d1", "zz"]) == {"d0": META[0], "d1": META[1]}
    finally:
        rag.close()
