"""Retrieval: pure scoring/seeding functions, PPR ranking on a hand-built graph, fallback,
ablation code paths, and retrieval after index/delete."""
import json

import numpy as np
import pytest
from fakes import ScriptedLLM
from helpers import CORPUS, make_rag

from hippo_engine.retrieve.facts.seeding import entity_seeds, passage_seeds
from hippo_engine.retrieve.scoring import min_max, top_k


def test_min_max_and_top_k():
    np.testing.assert_allclose(min_max(np.array([1.0, 3.0, 2.0])), [0, 1, 0.5])
    np.testing.assert_array_equal(min_max(np.array([2.0, 2.0])), [1, 1])  # constant -> ones
    np.testing.assert_array_equal(top_k(np.array([0.1, 0.9, 0.5, 0.9]), 3), [1, 3, 2])  # ties: lower index
    assert len(top_k(np.array([1.0]), 5)) == 1


def test_entity_seeds_mean_and_idf():
    counts = np.array([2, 1, 4, 0, 0])
    # node 0 linked twice (scores 1.0 and 0.5, 2 passages) -> mean(0.5, 0.25)=0.375
    w, seeds = entity_seeds([(0, 1.0), (0, 0.5), (1, 0.3), (2, 1.0)], counts, 5, keep=2)
    assert seeds == [(0, 0.375), (1, 0.3)]
    assert w[2] == 0 and w[0] == 0.375
    np.testing.assert_allclose(passage_seeds(np.array([0.2, 0.4, 0.3]), 0.05), [0, 0.05, 0.025])


# A hand-built memory: the two-hop chain Nora -> Pell -> Quill is spread over three passages.
DOCS = ["P1\nNora Vance founded Pell Works.", "P2\nPell Works is based in Quillton.",
        "P3\nQuillton has a river port.", "P4\nZed Orr paints boats."]
TRIPLES = {DOCS[0]: [["Nora Vance", "founded", "Pell Works"]],
           DOCS[1]: [["Pell Works", "based in", "Quillton"]],
           DOCS[2]: [["Quillton", "has", "river port"]],
           DOCS[3]: [["Zed Orr", "paints", "boats"]]}


def chain_llm():
    def respond(messages):
        user = messages[-1]["content"]
        if "Named entities:" not in user and "Passage:" in user:
            return json.dumps({"named_entities": []})
        for d, t in TRIPLES.items():
            if d in user:
                return json.dumps({"triples": t})
        return "[]"
    return ScriptedLLM(respond)


def test_ppr_ranking_on_hand_built_graph(tmp_path):
    rag = make_rag(tmp_path, llm=chain_llm(), use_filter=False, passage_node_weight=0.0, linking_top_k=1)
    rag.index(DOCS)
    (sol,) = rag.retrieve(["Who founded Pell Works?"])
    # the top fact is (nora vance, founded, pell works); with linking_top_k=1 one entity seeds
    assert sol.kept_facts[0] == ("nora vance", "founded", "pell works")
    assert len(sol.seed_entities) == 1
    # walk order: the seed's passage(s) first, then the next hop, the unconnected passage last
    seed = sol.seed_entities[0][0]
    first = "P1" if seed == "nora vance" else None
    assert sol.docs[-1] == DOCS[3] and sol.doc_scores[-1] == 0.0
    assert sol.docs.index(DOCS[0]) < sol.docs.index(DOCS[2])
    assert sol.docs.index(DOCS[1]) < sol.docs.index(DOCS[2])
    if first:
        assert sol.docs[0] == DOCS[0]
    assert not sol.used_fallback


def test_fallback_when_filter_keeps_nothing(tmp_path):
    def respond(messages):
        text = " ".join(m["content"] for m in messages)
        if "relevant" in text.lower() and "Passage:" not in messages[-1]["content"]:
            return "[[ ## relevant_facts ## ]]\n[]\n\n[[ ## completed ## ]]"
        return chain_llm().respond(messages)
    rag = make_rag(tmp_path, llm=ScriptedLLM(respond))
    rag.index(DOCS)
    dense = rag.retrieve_dpr(["Who founded Pell Works?"])[0]
    (sol,) = rag.retrieve(["Who founded Pell Works?"])
    assert sol.used_fallback and sol.kept_facts == [] and len(sol.candidate_facts) > 0
    assert sol.docs == dense.docs


@pytest.mark.parametrize("linking", ["fact", "query", "ner"])
@pytest.mark.parametrize("use_passage_nodes", [True, False])
def test_ablation_paths(tmp_path, linking, use_passage_nodes):
    rag = make_rag(tmp_path, llm=chain_llm(), use_filter=False, linking=linking,
                   use_passage_nodes=use_passage_nodes)
    rag.index(DOCS)
    (sol,) = rag.retrieve(["Where is Pell Works based?"])
    if linking == "ner":  # the toy NER finds nothing in queries -> fallback
        assert sol.used_fallback
    else:
        assert sol.seed_entities and not sol.used_fallback
        if linking == "query":
            assert sol.candidate_facts == []
    assert sorted(sol.docs) == sorted(DOCS)
    r = rag.retriever
    reset, _ = r.reset_vector([(0, 1.0)], np.array([0.1, 0.5, 0.2, 0.9]))
    assert (reset[r.passage_nodes].sum() > 0) == use_passage_nodes


def test_metrics_and_determinism(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?"]
    gold = [[CORPUS[1]], [CORPUS[3]]]
    sols, m = rag.retrieve(qs, gold_docs=gold)
    assert set(m) >= {"Recall@1", "Recall@2", "Recall@5"} and all(0 <= v <= 1 for v in m.values())
    again, _ = rag.retrieve(qs, gold_docs=gold)
    assert [s.docs for s in sols] == [s.docs for s in again]
    assert all(np.array_equal(a.doc_scores, b.doc_scores) for a, b in zip(sols, again, strict=False))


def test_retrieval_sees_index_and_delete(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS[:4])
    q = ["Who married Oren Pike?"]
    assert CORPUS[7] not in rag.retrieve(q)[0].docs
    rag.index(CORPUS[4:])
    assert CORPUS[7] in rag.retrieve(q)[0].docs
    rag.delete([CORPUS[7]])
    docs = rag.retrieve(q)[0].docs
    assert CORPUS[7] not in docs and len(docs) == len(CORPUS) - 1
    assert CORPUS[7] not in rag.retrieve_dpr(q)[0].docs


def test_bad_queries(tmp_path):
    rag = make_rag(tmp_path)
    with pytest.raises(RuntimeError, match="empty"):
        rag.retrieve(["anything"])
    rag.index(CORPUS[:2])
    with pytest.raises(TypeError):
        rag.retrieve("not a list")
    with pytest.raises(ValueError):
        rag.retrieve(["ok", "  "])


# ------------------------------------------------------------------ vectorised paths
def test_entity_seed_table_matches_per_query_seeds():
    from hippo_engine.retrieve.facts.seeding import entity_seed_table
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 5, 30)
    links = [[(int(rng.integers(0, 30)), float(rng.random())) for _ in range(rng.integers(0, 12))] for _ in range(7)]
    q = np.concatenate([[j] * len(lk) for j, lk in enumerate(links)]).astype(np.int64)
    n = np.array([a for lk in links for a, _ in lk], dtype=np.int64)
    s = np.array([b for lk in links for _, b in lk])
    tq, tn, tw = entity_seed_table(q, n, s, counts, keep=3)
    for j, lk in enumerate(links):
        _, seeds = entity_seeds(lk, counts, 30, keep=3)
        m = tq == j
        assert list(zip(tn[m].tolist(), tw[m].tolist(), strict=False)) == seeds


def test_top_facts_exact_with_ties():
    """Candidates, their order (ties: lower row) and min-max scores equal the exact float64 answer."""
    from hippo_engine.retrieve.retriever import Retriever
    rng = np.random.default_rng(1)
    mat = rng.standard_normal((5000, 16)).astype(np.float32)
    mat[10] = mat[20] = mat[30]            # exact ties
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    q = np.vstack([mat[30] + 0.01 * rng.standard_normal(16).astype(np.float32), rng.standard_normal((3, 16))])
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    r = Retriever.__new__(Retriever)      # only the fact matrix is needed
    from hippo_engine.retrieve.facts.fact_search import MatrixSearch
    r.fact_search = MatrixSearch(mat)
    import hippo_engine.retrieve.scoring as sc
    for block in (sc.ROW_BLOCK, 777):
        old, sc.ROW_BLOCK = sc.ROW_BLOCK, block
        try:
            rows, scores = r.top_facts(q, 5)
            single = [r.top_facts(q[j:j + 1], 5) for j in range(len(q))]
        finally:
            sc.ROW_BLOCK = old
        for j in range(len(q)):
            ex = mat.astype(np.float64) @ q[j].astype(np.float64)
            order = np.lexsort((np.arange(len(ex)), -ex))[:5]
            assert list(rows[j]) == list(order)
            np.testing.assert_allclose(scores[j], (ex[order] - ex.min()) / (ex.max() - ex.min()), rtol=0, atol=1e-12)
            assert np.array_equal(single[j][0][0], rows[j]) and np.array_equal(single[j][1][0], scores[j])
    assert list(rows[0][:3]) == [10, 20, 30]


def test_batch_equals_single_bitwise(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?", "Which fair is held in Velor?",
          "Who married Oren Pike?", "What is the capital of Kaldavia?"]
    batch = rag.retrieve(qs)
    for q, b in zip(qs, batch, strict=False):
        (s,) = rag.retrieve([q])
        assert s.docs == b.docs and np.array_equal(s.doc_scores, b.doc_scores)
        assert s.seed_entities == b.seed_entities and s.kept_facts == b.kept_facts


def test_batched_search_in_blocks_and_reset_vectors(tmp_path):
    """query_batch_size splits a batch without changing results; the vectorised reset matrix
    equals the per-query reset vectors column by column."""
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?", "Who married Oren Pike?"]
    ref = rag.retrieve(qs)
    rag2 = make_rag(tmp_path, use_filter=False, query_batch_size=1)
    assert [s.docs for s in rag2.retrieve(qs)] == [s.docs for s in ref]
    r = rag.retriever
    q_fact, _ = rag.encode_queries(qs)
    rows, scores = r.top_facts(q_fact, r.config.linking_top_k)
    dense = r.dense_scores(q_fact)
    qq = np.repeat(np.arange(len(qs)), rows.shape[1])
    nodes = r.fact_nodes_of(rows.reshape(-1))
    lq, ln, ls = np.repeat(qq, 2), nodes.reshape(-1), np.repeat(scores.reshape(-1), 2)
    ok = ln >= 0
    R, seeds = r.reset_matrix(lq[ok], ln[ok], ls[ok], dense, [0, 2])
    for c, j in enumerate([0, 2]):
        m = lq[ok] == j
        vec, sd = r.reset_vector(list(zip(ln[ok][m].tolist(), ls[ok][m].tolist(), strict=True)), dense[:, j])
        assert np.array_equal(R[:, c], vec) and seeds[c] == sd


def test_a_large_graph_gets_smaller_blocks_with_the_same_results(tmp_path, monkeypatch):
    """Blocks shrink where the dense per-query arrays over the graph's nodes would pass BLOCK_BYTES (here made
    tiny: one query per block); every query's ranking and scores stay the same."""
    from hippo_engine.retrieve import retriever as retriever_module
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?", "Who married Oren Pike?"]
    ref = rag.retrieve(qs)
    r = rag.retriever
    assert r.block_size() == r.config.query_batch_size
    monkeypatch.setattr(retriever_module, "BLOCK_BYTES", retriever_module.NODE_BYTES_PER_QUERY * r.graph.num_nodes)
    assert r.block_size() == 1
    blocks = []
    search_block = r._search_block
    monkeypatch.setattr(r, "_search_block", lambda block, *a, **k: blocks.append(block.e - block.s)
                        or search_block(block, *a, **k))
    got = rag.retrieve(qs)
    assert blocks == [1, 1, 1]                      # the search ran one query per block
    assert [s.docs for s in got] == [s.docs for s in ref]
    assert all(np.array_equal(a.doc_scores, b.doc_scores) for a, b in zip(got, ref, strict=True))


class RecordingSeeds:
    """A seed source that puts weight 1.0 on one node and records what it was given."""

    def __init__(self, node):
        self.node, self.calls = node, []

    def score(self, q_pass):
        return np.arange(len(q_pass), dtype=np.float32)[None, :]    # one item, score = query number

    def add_seeds(self, resets, scores, cols):
        self.calls.append((scores.copy(), list(cols)))
        resets[self.node, :] += 1.0


def test_seed_source_adds_its_seeds_per_block(tmp_path):
    from hippo_engine.retrieve.facts.seeding import SeedSource
    from hippo_engine.retrieve.retriever import Retriever
    rag = make_rag(tmp_path, use_filter=False, query_batch_size=2)
    rag.index(CORPUS)
    qs = ["Where was Ilse Marrow born?", "Who founded Tamsin College?", "Who married Oren Pike?"]
    r = rag.retriever
    target = int(r.passage_nodes[CORPUS.index(CORPUS[6])])     # the Amber Fair passage node
    src = RecordingSeeds(target)
    assert isinstance(src, SeedSource)
    seeded = Retriever.from_index(r.config, rag.index_state, seed_sources=[src])
    q_fact, q_pass = rag.encode_queries(qs)
    plain, _ = r.search(qs, q_fact, q_pass, len(CORPUS))
    got, _ = seeded.search(qs, q_fact, q_pass, len(CORPUS))
    # called once per block (2 + 1 queries) with the block's score columns and its graph columns
    assert [c for _, c in src.calls] == [[0, 1], [0]]
    assert [s.tolist() for s, _ in src.calls] == [[[0.0, 1.0]], [[2.0]]]
    row = list(rag.index_state.stores["passage"].ids).index(r.graph.node_ids[target])
    for a, b in zip(plain, got, strict=True):
        assert b.scores[list(b.order).index(row)] > a.scores[list(a.order).index(row)]
        assert a.seed_entities == b.seed_entities


def test_dense_column_split_over_threads_matches_one_scan():
    """The scan splits big matrices into equal blocks on a thread pool; each score must be
    the one a single scan gives (bit for bit), whatever the number of rows."""
    from hippo_engine.retrieve.scoring import dense_column
    rng = np.random.default_rng(3)
    q = rng.standard_normal(48).astype(np.float32)
    for n in (0, 5, 8191, 8192, 17033, 40001):
        mat = rng.standard_normal((n, 48)).astype(np.float32)
        got = dense_column(mat, q)
        assert got.dtype == np.float32 and got.shape == (n,)
        assert np.array_equal(got, np.einsum("ij,j->i", mat, q))
        if n:
            assert np.array_equal(dense_column(mat[n // 3:], q), got[n // 3:])


def test_dense_first_fusion():
    from hippo_engine.retrieve.scoring import dense_first

    order, scores = np.array([3, 1, 2, 0]), np.array([0.4, 0.3, 0.2, 0.1])
    dense = np.array([0.9, 0.1, 0.5, 0.2])
    o, s = dense_first(order, scores, dense, 1, 4)
    assert o.tolist() == [0, 3, 1, 2] and s[0] == 2.0 and s[1:].tolist() == [0.4, 0.3, 0.2]
    o, s = dense_first(order, scores, dense, 2, 3)
    assert o.tolist() == [0, 2, 3] and np.all(np.diff(s) < 0)
    assert dense_first(order, scores, dense, 0, 4)[0] is order


def test_dense_first_config_puts_the_dense_top_passage_first(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS)
    qs = ["Who founded the Amber Fair?", "Where does the Tamsin River flow?"]
    dense = rag.retrieve_dpr(qs, num_to_retrieve=3)
    plain = rag.retrieve(qs, num_to_retrieve=5)
    rag.config = rag.config.replace(dense_first=1)
    fused = rag.retrieve(qs, num_to_retrieve=5)
    for d, p, f in zip(dense, plain, fused, strict=True):
        assert f.docs[0] == d.docs[0]
        assert f.docs[1:] == [x for x in p.docs if x != d.docs[0]][:4]


def test_nearest_rows_is_exact_and_batch_independent():
    from hippo_engine.retrieve.scoring import max_row_norm, nearest_rows

    rng = np.random.default_rng(0)
    mat = rng.standard_normal((5000, 32)).astype(np.float32)
    mat[17] = mat[4000]                       # an exact tie: the lower row wins
    vecs = rng.standard_normal((7, 32)).astype(np.float32)
    vecs[3] = mat[4000] * 3
    rows, sims = nearest_rows(mat, max_row_norm(mat), vecs)
    exact = mat.astype(np.float64) @ vecs.astype(np.float64).T
    assert rows.tolist() == [int(np.argmax(exact[:, j])) for j in range(7)] and rows[3] == 17
    assert np.allclose(sims, exact.max(axis=0), rtol=0, atol=1e-12)
    for j in range(7):
        r1, s1 = nearest_rows(mat, max_row_norm(mat), vecs[j:j + 1])
        assert r1[0] == rows[j] and s1[0] == sims[j]
