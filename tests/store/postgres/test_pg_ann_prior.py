"""The dense prior from the passage store's HNSW index (retrieve/ppr/ann_prior.py) on a real PostgreSQL
with the real encoder and spaCy (an LLM-free ``ner`` index): the writer builds the passage index, the
push path reads the prior from it (no scan), and its rankings agree with the scanned prior's."""
from __future__ import annotations

import numpy as np
from test_pg_lazy import corpus, questions

from hippo_engine import HippoRAG


def _reader(path, dsn, schema, **kw):
    # a small corpus: the index's 20 best (and 20 lowest) of 150 passages, 10 of them pushed
    kw = {"ppr_solver": "push", "dense_prior_head": 20, "ppr_push_head": 10, **kw}
    return HippoRAG(path, extractor="ner", storage="postgres", dsn=dsn, postgres_schema=schema,
                    postgres_search="hnsw", show_progress=False, **kw)


def test_push_with_the_ann_prior_agrees_with_the_scanned_prior(tmp_path, pg_dsn, pg_schema):
    docs = corpus(150, seed=3)
    writer = HippoRAG(tmp_path / "pg", extractor="ner", storage="postgres", dsn=pg_dsn, postgres_schema=pg_schema,
                      show_progress=False)
    writer.index(docs[:100])
    writer.index(docs[100:])               # the second batch goes into the HNSW indexes
    assert writer.index_state.stores["passage"].has_hnsw()
    writer.close()
    qs = questions(20) + ["Who was born in Velor?", "Which museum stands in Orsk?"]
    ann = _reader(tmp_path / "pg", pg_dsn, pg_schema)
    scan = _reader(tmp_path / "pg", pg_dsn, pg_schema, dense_prior="scan")
    exact = _reader(tmp_path / "pg", pg_dsn, pg_schema, ppr_solver="exact")
    r = ann.retriever
    assert r.ann_dense is not None and r.uses_push and scan.retriever.ann_dense is None
    q_fact, q_pass = ann.encode_queries(qs[:2])
    dense, priors = r.block_dense(q_pass, 10, True)
    assert priors is not None and all(p is not None and len(p.known) <= 40 for p in priors)
    assert priors is not None and all(p is not None for p in priors)
    full = r.dense_scores(q_pass)
    for j, p in enumerate(priors):          # the head has the scan's scores, the extremes are the scan's
        assert np.array_equal(dense[p.known, j], full[p.known, j])
        assert dense[:, j].max() == full[:, j].max()
    got, ref, walk = ann.retrieve(qs, 10), scan.retrieve(qs, 10), exact.retrieve(qs, 10)
    same5 = sum(a.passage_ids[:5] == b.passage_ids[:5] for a, b in zip(got, ref, strict=True))
    recall10 = np.mean([len(set(a.passage_ids) & set(b.passage_ids)) / 10 for a, b in zip(got, walk, strict=True)])
    assert same5 >= 0.9 * len(qs), same5
    assert recall10 >= 0.9, recall10
    for rag in (ann, scan, exact):
        rag.close()
    for linking in ("ner_fact", "fact"):     # one walk: from the seed table and the priors, no reset matrix
        _one_walk_by_parts_equals_the_matrix_walk(tmp_path / "pg", pg_dsn, pg_schema, qs, linking)


def _one_walk_by_parts_equals_the_matrix_walk(path, dsn, schema, qs, linking):
    from unittest import mock

    from hippo_engine.retrieve import retriever as retriever_module
    from hippo_engine.retrieve.ppr import solver as solver_module
    rag = _reader(path, dsn, schema, second_hop="none", linking=linking)
    calls = []
    real = solver_module.run_seed_table
    spy = lambda *a, **k: calls.append(len(a[2])) or real(*a, **k)      # noqa: E731 - counts the walked queries
    with mock.patch.object(solver_module, "run_seed_table", spy):
        parts = rag.retrieve(qs, 10)
    assert sum(calls) >= len(qs) // 2       # queries walked so (one reaching no entity takes the dense ranking)
    with mock.patch.object(retriever_module.Retriever, "_by_parts", lambda *a: False):
        matrix = rag.retrieve(qs, 10)
    for a, b in zip(parts, matrix, strict=True):
        assert a.passage_ids == b.passage_ids and np.array_equal(a.doc_scores, b.doc_scores)
        assert a.seed_entities == b.seed_entities
    rag.close()
